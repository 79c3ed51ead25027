"""``dataset.sessions=N``: each conversation cut to its first N sessions, with only the questions whose
evidence lies in them, on the real locomo10.json (and the DialSim fixture); every system sees the cut."""
from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ctxbench.core import registry
from ctxbench.bench.scripted_llm import ScriptedChatModel
from ctxbench.data.errors import DataError
from ctxbench.data.locomo import load_locomo_file, select
from tests.conftest import TINY_ANSWERS, run_cli
from ctxbench.config.schemas import load_conf_file
from ctxbench.config.compose import option_config

REPO = Path(__file__).resolve().parents[1]
ENV = {"CTXBENCH_CACHE": os.environ.get("CTXBENCH_CACHE", "/tmp/cbcache"), "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def raw26(shared_data):
    return next(c for c in json.loads((shared_data / "locomo10.json").read_text()) if c["sample_id"] == "conv-26")


@pytest.fixture(scope="module")
def locomo(shared_data):
    return load_locomo_file(shared_data / "locomo10.json")


def conv26(locomo, **kw):
    return select(locomo, ["conv-26"], **kw)[0]


def raw_sessions(evidence: list[str]) -> set[int]:
    """Session numbers in raw evidence strings, read here without the loader's parser:
    "D8:6; D9:17" → {8, 9}, "D:11:26" → {11}, "D" → none."""
    out = set()
    for token in " ".join(evidence).replace(";", " ").split():
        head = token.lstrip("D:").split(":")[0]
        if head.isdigit():
            out.add(int(head))
    return out


# ---- LoCoMo -----------------------------------------------------------------------------------------

def test_conv26_first_five_sessions(locomo, raw26):
    full, cut = conv26(locomo), conv26(locomo, sessions=5)
    assert [s.id for s in cut.history.sessions] == [f"session_{i}" for i in range(1, 6)]
    assert cut.history.sessions == full.history.sessions[:5]  # turns untouched
    assert cut.history.speakers == full.history.speakers and len(full.history.sessions) == 19
    for q in cut.questions:
        assert q.evidence and raw_sessions(q.evidence) <= {1, 2, 3, 4, 5}, (q.id, q.evidence)
    expected = [f"conv-26-q{j}" for j, qa in enumerate(raw26["qa"])
                if (where := raw_sessions(qa.get("evidence", []))) and max(where) <= 5]
    assert [q.id for q in cut.questions] == expected and len(expected) == 55 < len(full.questions) == 199


def test_dropped_questions_are_logged(locomo, caplog):
    with caplog.at_level(logging.INFO, logger="ctxbench.data.locomo"):
        conv26(locomo, sessions=5)
    assert ("dataset.sessions=5: conv-26 5/19 sessions, 55/199 questions (2 without a parsable evidence id "
            "dropped)") in caplog.messages


def test_questions_without_evidence_are_dropped_only_when_something_is_cut(locomo, raw26):
    no_evidence = {f"conv-26-q{j}" for j, qa in enumerate(raw26["qa"]) if not raw_sessions(qa.get("evidence", []))}
    assert len(no_evidence) == 2
    assert not no_evidence & {q.id for q in conv26(locomo, sessions=18).questions}
    assert no_evidence <= {q.id for q in conv26(locomo, sessions=19).questions}


@pytest.mark.parametrize("n", [19, 20, 1000])
def test_a_value_past_the_last_session_keeps_everything(locomo, n):
    assert conv26(locomo, sessions=n) == conv26(locomo)


def test_limit_counts_among_kept_questions_and_categories_combine(locomo):
    kept = conv26(locomo, sessions=5).questions
    assert [q.id for q in conv26(locomo, sessions=5, limit=40).questions] == [q.id for q in kept][:40]
    assert [q.id for q in conv26(locomo, limit=40).questions] != [q.id for q in kept][:40]
    temporal = conv26(locomo, sessions=5, categories=[2]).questions
    assert temporal and [q.id for q in temporal] == [q.id for q in kept if q.category == 2]


def test_every_conversation_is_cut(shared_data):
    s = registry.build("dataset", option_config("dataset", {"name": "locomo", "path": str(shared_data / "locomo10.json"),
                                                    "sessions": 2}))
    assert len(s) == 10 and all([x.id for x in c.history.sessions] == ["session_1", "session_2"] for c in s)
    assert all(raw_sessions(q.evidence) <= {1, 2} for c in s for q in c.questions)
    assert s.quirks["malformed_evidence"] == 6  # the whole-file counts are kept


@pytest.mark.parametrize("bad", [0, -3, "5", 2.0, True])
def test_select_refuses_a_bad_value(locomo, bad):
    with pytest.raises(DataError, match=r"field 'dataset.sessions': must be an integer >= 1 \(null = all sessions\)"):
        select(locomo, sessions=bad)


class Recording(ScriptedChatModel):
    """The scripted chat model, keeping every prompt it was sent; a window nothing overflows."""

    def __init__(self) -> None:
        super().__init__(context_window=1_000_000)
        self.prompts: list[str] = []

    def chat(self, messages, **kw):
        self.prompts.append("\n".join(m["content"] for m in messages))
        return super().chat(messages, **kw)


def full_context_prompt(sample) -> tuple[str, dict]:
    cfg = load_conf_file(REPO / "ctxbench" / "conf" / "memory" / "full_context.yaml")
    llm = Recording()
    system = registry.build("memory", cfg, llm=llm)
    system.ingest(sample.history)
    pred = system.answer(sample.questions[0])
    return llm.prompts[-1], pred.usage.extra


def test_full_context_sees_no_session_beyond_the_cut(locomo, raw26):
    earlier = [t["text"] for k in range(1, 6) for t in raw26["conversation"][f"session_{k}"]]
    only6 = [t["text"] for t in raw26["conversation"]["session_6"]
             if len(t["text"]) > 40 and not any(t["text"] in e for e in earlier)]
    assert len(only6) > 5
    last5 = raw26["conversation"]["session_5"][-1]["text"]
    cut, extra = full_context_prompt(conv26(locomo, sessions=5))
    assert extra["truncated_turns"] == 0 and last5 in cut
    assert not [t for t in only6 if t in cut]
    assert raw26["conversation"]["session_6_date_time"] not in cut
    whole, _ = full_context_prompt(conv26(locomo))  # the same system without the option sees session 6
    assert all(t in whole for t in only6) and raw26["conversation"]["session_6_date_time"] in whole


# ---- compose-time checks and the CLI ----------------------------------------------------------------

def refused(monkeypatch, capsys, tmp_path, *argv: str) -> str:
    """The real CLI in-process: exit 2 and one stderr line."""
    from ctxbench.__main__ import main

    argv = (*argv, f"hydra.run.dir={tmp_path / 'run'}")
    monkeypatch.setattr(sys, "argv", ["ctxbench", *argv])
    with pytest.raises(SystemExit) as e:
        main(list(argv))
    err = capsys.readouterr().err
    assert e.value.code == 2 and "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("dataset", ["locomo_sample", "dialsim_sample"])
@pytest.mark.parametrize("value,line", [
    ("0", "config key 'dataset.sessions' must be >= 1 (null = all), got 0"),
    ("-2", "config key 'dataset.sessions' must be >= 1 (null = all), got -2"),
    ("five", "config key 'dataset.sessions' must be int or null, got 'five'"),
    ("1.5", "config key 'dataset.sessions' must be int or null, got 1.5"),
])
def test_a_bad_value_fails_at_compose_time(monkeypatch, capsys, tmp_path, dataset, value, line):
    got = refused(monkeypatch, capsys, tmp_path, "eval", "memory=no_context", f"dataset={dataset}",
                  f"dataset.sessions={value}")
    assert got == f"ctxbench: error: {line}"
    assert not (tmp_path / "run" / "predictions.jsonl").exists()


def test_eval_cli_asks_only_the_kept_questions(tmp_path):
    sample = {"name": "locomo_sample", "path": str(REPO / "data" / "samples" / "locomo_sample.json")}
    every = [q.id for s in registry.build("dataset", option_config("dataset", sample)) for q in s.questions]
    kept = [q.id for s in registry.build("dataset", option_config("dataset", {**sample, "sessions": 1})) for q in s.questions]
    assert 0 < len(kept) < len(every)
    out = tmp_path / "run"
    p = run_cli("eval", "memory=no_context", "dataset=locomo_sample", "dataset.sessions=1", "llm.model=tiny", TINY_ANSWERS,
                "llm.cache=false", "progress=false", f"hydra.run.dir={out}", env=ENV, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    rows = [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()]
    assert sorted(r["id"] for r in rows) == sorted(kept)
    res = json.loads((out / "results.json").read_text())
    assert res["overall"]["n"] == len(kept) and res["config"]["dataset"]["sessions"] == 1
    assert "dataset.sessions=1: demo-1 1/3 sessions, 3/11 questions" in p.stdout + p.stderr


# ---- DialSim ----------------------------------------------------------------------------------------

def dialsim(**kw):
    base = load_conf_file(REPO / "ctxbench" / "conf" / "dataset" / "dialsim_sample.yaml")
    return registry.build("dataset", OmegaConf.merge(base, {"question_time": "none"}, kw))  # one history per show


def test_dialsim_keeps_the_questions_asked_in_the_first_sessions():
    whole = dialsim()[0]
    cut = dialsim(sessions=2)[0]
    assert [s.id for s in cut.history.sessions] == ["S01E01/1", "S01E01/2"]
    assert cut.history.sessions == whole.history.sessions[:2]
    expected = [q.id for q in whole.questions if q.meta["session"] in ("S01E01/1", "S01E01/2")]
    assert [q.id for q in cut.questions] == expected and 0 < len(expected) < len(whole.questions)
    assert [q.id for q in dialsim(sessions=2, limit=1)[0].questions] == expected[:1]
    assert dialsim(sessions=3) == dialsim(sessions=50) == dialsim()


def test_dialsim_per_episode_cuts_each_episode():
    cut = dialsim(per_episode=True, sessions=1)
    assert [[s.id for s in x.history.sessions] for x in cut] == [["S01E01/1"], ["S01E02/1"]]
    assert [{q.meta["session"] for q in x.questions} for x in cut] == [{"S01E01/1"}, {"S01E02/1"}]


def test_dialsim_refuses_a_bad_value():
    with pytest.raises(DataError, match="field 'dataset.sessions': must be an integer >= 1"):
        dialsim(sessions=0)
