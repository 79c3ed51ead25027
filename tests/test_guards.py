"""Guards against results that bypass memory (issue 38 part 5): results.json ``health.warnings``, their
console lines, the marks on boards and paper tables, and tokens per question split into read / written /
construction / judging.

Each warning is tripped by a case built to trip it and stays quiet on one built not to: RAG whose k
covers every chunk it stored (top-k and held context), RAG with k=1 (quiet), full context (held context,
labelled expected), no context (quiet), a lenient judge in a hand-written ``judges`` block (the judges
engineer's contract), a table whose rows mix answer prompts (only the odd row marked).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from ctxbench.config.compose import option_config
from ctxbench.core.types import History, Question, Sample, Session, Turn
from ctxbench.evaluation.evaluator import evaluate_samples
from ctxbench.evaluation.finalize import finalize
from ctxbench.memory.baselines import FullContext, NoContext
from ctxbench.memory.rag import RAG
from ctxbench.memory.stores.retrieval_notes import note_retrieval, noting_retrieval, retrieval_summary
from ctxbench.metrics.base import build_metrics
from ctxbench.metrics.guards import default_held_share, run_warnings, warning_lines
from ctxbench.report import board as B
from ctxbench.report.guards import odd_prompts, run_marks, table_marks
from ctxbench.report.runs import Run
from ctxbench.report.tables import add_guards, compare, render, table_report
from tests.board_runs import eval_config, results_extra, row_system
from tests.conftest import TINY_ANSWERS, run_cli
from tests.memory_scripted import BowEmbedder
from tests.scripted_llm import ScriptedLLM

WORDS = "apple banana cherry dolphin eagle falcon grape harbor igloo jungle kettle lemon".split()


def history(hid: str = "h") -> History:
    turns = [Turn("Alice" if i % 2 == 0 else "Bob", f"I like {w} today", f"D{i // 6 + 1}:{i % 6 + 1}")
             for i, w in enumerate(WORDS)]
    return History(id=hid, sessions=[Session("s1", turns[:6], "1 May, 2023"), Session("s2", turns[6:], "9 May, 2023")],
                   speakers=["Alice", "Bob"])


def samples() -> list[Sample]:
    return [Sample(history(), [Question("q1", "Which fruit did Alice like?", "apple", category=4),
                               Question("q2", "When did Bob mention the eagle?", "1 May 2023", category=2),
                               Question("q3", "Did Bob buy a boat?", "Not mentioned", category=5,
                                        adversarial_answer="a boat")])]


def judge_or_answer(messages, **kw) -> str:
    return '{"label": "CORRECT"}' if kw.get("phase") == "judge" else "apple"


def rag(llm, k: int, workdir: Path) -> RAG:
    cfg = option_config("memory", {"name": "rag", "k": k, "chunk_size": 2, "overlap": 0, "progress": False})
    return RAG(cfg, llm=llm, embedder=BowEmbedder(), workdir=workdir)


def kinds(res: dict) -> dict[str, dict]:
    return {w["kind"]: w for w in res["health"]["warnings"]}


# ---- run warnings --------------------------------------------------------------------------------

def test_rag_retrieving_every_chunk_it_stored_trips_top_k_and_held_context(tmp_path, capsys):
    llm = ScriptedLLM(judge_or_answer)
    system = rag(llm, 50, tmp_path / "stores")  # 12 turns in chunks of 2: 6 chunks stored, 50 asked for
    res = evaluate_samples(system, samples(), tmp_path / "run", llm=llm, metrics=["f1"])
    w = kinds(res)
    assert set(w) == {"held_context", "top_k"}
    assert w["top_k"]["histories"] == ["h"] and w["top_k"]["of"] == 1 and not w["top_k"]["expected"]
    assert "k=50 of 6 stored" in w["top_k"]["message"]
    held = w["held_context"]
    assert not held["expected"] and held["share"] == 1.0 and held["median_ratio"] >= 0.8
    assert res["health"]["held_share"]["questions"] == 3 and res["health"]["status"] == "ok"  # a warning, not a fault
    rec = json.loads((tmp_path / "run" / "predictions.jsonl").read_text().splitlines()[0])
    assert rec["usage"]["extra"]["retrieval"] == {"searches": 1, "exhaustive": 1, "k": 50, "stored": 6}
    assert rec["construction"]["history_tokens"] == llm.count_tokens(_locomo(history()))
    err = capsys.readouterr().err
    assert err.count("warning: ") == 2 and "warning: top-k >= stored items in 1 of 1 histories" in err
    md = (tmp_path / "run" / "results.md").read_text()
    assert "## Warnings" in md and "- top-k >= stored items" in md


def _locomo(h: History) -> str:
    from ctxbench.core.render import render_history

    return render_history(h, "locomo")


def test_rag_retrieving_one_chunk_stays_quiet(tmp_path, capsys):
    llm = ScriptedLLM(judge_or_answer)
    system = rag(llm, 1, tmp_path / "stores")
    res = evaluate_samples(system, samples(), tmp_path / "run", llm=llm, metrics=["f1"])
    assert res["health"]["warnings"] == []
    held = res["health"]["held_share"]
    assert held["over"] == 0 and held["median_ratio"] < 0.3 and held["threshold"] == default_held_share() == 0.8
    rec = json.loads((tmp_path / "run" / "predictions.jsonl").read_text().splitlines()[0])
    assert rec["usage"]["extra"]["retrieval"]["exhaustive"] == 0
    assert "warning" not in capsys.readouterr().err
    assert "## Warnings" not in (tmp_path / "run" / "results.md").read_text()


def test_full_context_trips_held_context_as_the_expected_baseline(tmp_path, capsys):
    llm = ScriptedLLM(judge_or_answer)
    res = evaluate_samples(FullContext(option_config("memory", {"name": "full_context"}), llm=llm), samples(),
                           tmp_path / "run", llm=llm, metrics=["f1"], extra={"system": "memory=full_context"})
    assert res["whole_history_baseline"] is True
    (w,) = res["health"]["warnings"]
    assert w["kind"] == "held_context" and w["expected"] is True and w["median_ratio"] == 1.0
    assert "expected, memory=full_context is a whole-history baseline" in w["message"]
    err = capsys.readouterr().err
    assert "expected: held context >= 80%" in err and "warning:" not in err  # labelled, not a fault
    assert run_marks(res) == ["held >= 80% of history on 100% of q (expected: whole-history baseline)"]


def test_no_context_stays_quiet(tmp_path):
    llm = ScriptedLLM(judge_or_answer)
    res = evaluate_samples(NoContext(option_config("memory", {"name": "no_context"}), llm=llm), samples(),
                           tmp_path / "run", llm=llm, metrics=["f1"])
    assert res["health"]["warnings"] == [] and res["health"]["held_share"]["median_ratio"] == 0.0
    assert "whole_history_baseline" not in res


def test_the_threshold_is_the_setting_and_records_without_history_tokens_are_not_guessed():
    rec = {"history_id": "h", "usage": {"held_text": 50, "held_kv_slots": 10, "held_soft_slots": 0},
           "construction": {"history_tokens": 100}}
    assert run_warnings([rec], {}, 0.8)[0] == []  # 60 of 100 held (text + KV slots)
    (w,), held = run_warnings([rec], {}, 0.6)
    assert w["kind"] == "held_context" and held["share"] == 1.0 and held["median_ratio"] == 0.6
    old = {**rec, "construction": {}}  # written before the guard: no denominator, nothing measured
    assert run_warnings([old], {}, 0.1) == ([], None)
    failed = {**rec, "failed": True}
    assert run_warnings([failed], {}, 0.1) == ([], None)


def test_retrieval_notes_only_inside_an_answer_and_exhaustive_needs_something_stored():
    note_retrieval(5, 3)  # construction: nothing open, nothing noted
    with noting_retrieval() as notes:
        note_retrieval(5, 0)  # an empty store: not "everything"
        note_retrieval(2, 9)
    assert notes == [(5, 0), (2, 9)]
    assert retrieval_summary(notes) == {"searches": 2, "exhaustive": 0, "k": 5, "stored": 9}
    assert retrieval_summary([(2, 9), (10, 4)]) == {"searches": 2, "exhaustive": 1, "k": 10, "stored": 4}
    assert retrieval_summary([]) is None


LENIENT = {"mem0": {"prompt": "mem0-accuracy", "lenient": True, "false_accept": 0.42},
           "strict": {"prompt": "ctxbench-strict", "lenient": False, "false_accept": 0.03}}


def test_a_judge_flagged_lenient_warns_and_a_strict_one_does_not():
    (w,), _ = run_warnings([], {"judges": LENIENT})
    assert w == {"kind": "lenient_judge", "expected": False, "judge": "mem0", "false_accept": 0.42,
                 "message": "judge mem0 is flagged lenient (false-accept rate 42%): its J counts wrong answers as right"}
    assert run_warnings([], {"judges": {"strict": LENIENT["strict"]}})[0] == []
    assert warning_lines([w]) == ["warning: " + w["message"]]


def test_score_of_a_lenient_panel_writes_the_warning(tmp_path, capsys):
    """``score`` has no health of its own: its ``health`` carries the warnings (the judges' contract)."""
    recs = [{"id": "q1", "prediction": "apple", "answer": "apple", "category": 4}]
    res = finalize(tmp_path, recs, build_metrics(["f1"]), {}, "score", with_cost=False,
                   extra={"judges": LENIENT}, progress=False)
    assert [w["judge"] for w in res["health"]["warnings"]] == ["mem0"]
    assert "warning: judge mem0 is flagged lenient" in capsys.readouterr().err
    quiet = finalize(tmp_path, recs, build_metrics(["f1"]), {}, "score", with_cost=False, progress=False)
    assert "health" not in quiet and "cost" not in quiet


# ---- tokens per question: read / written / construction / judging -------------------------------

def test_token_split_adds_up_and_judging_is_counted_per_question(tmp_path):
    class Building(NoContext):
        def ingest(self, h):
            super().ingest(h)
            self.llm.chat([{"role": "user", "content": "summarise these four"}], phase="construction")

    llm = ScriptedLLM(judge_or_answer)
    res = evaluate_samples(Building(option_config("memory", {"name": "no_context"}), llm=llm), samples(),
                           tmp_path / "run", llm=llm, metrics=["f1", "llm_judge"])
    tq = res["cost"]["tokens_per_question"]
    judge_calls = [c for c in llm.calls if c["phase"] == "judge"]
    assert len(judge_calls) == 2  # the adversarial question is not judged (mem0's code)
    reply = llm.count_tokens(judge_or_answer([], phase="judge"))
    judged = sum(sum(llm.count_tokens(m["content"]) for m in c["messages"]) + reply for c in judge_calls)
    assert tq["judging"] == pytest.approx(judged / 3, abs=0.01)
    answers = [c for c in llm.calls if c["phase"] == "answer"]
    assert tq["read"] == tq["answer_prompt"] == pytest.approx(
        sum(sum(llm.count_tokens(m["content"]) for m in c["messages"]) for c in answers) / 3, abs=0.01)
    assert tq["written"] == pytest.approx(1.0) and tq["construction"] == pytest.approx((3 + 1) / 3, abs=0.01)
    assert tq["total"] == pytest.approx(tq["read"] + tq["written"] + tq["construction"] + tq["judging"], abs=0.02)
    assert res["cost"]["judging_per_question"]["calls"] == pytest.approx(2 / 3, abs=1e-3)
    assert res["cost"]["version"] == "ctxbench-cost-5"
    rows = [json.loads(x) for x in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()]
    assert [bool(r.get("judge_usage")) for r in rows] == [True, True, False]
    md = (tmp_path / "run" / "results.md").read_text()
    assert "| answering tokens per question: read (prompt) / written (completion) |" in md
    assert "| judging tokens per question: prompt + completion | " + f"{res['cost']['judging_per_question']['prompt']:.4g}" in md


def test_rescoring_without_the_judge_drops_the_old_judging_count(tmp_path):
    rec = {"id": "q1", "prediction": "apple", "answer": "apple", "category": 4,
           "judge_usage": {"prompt_tokens": 100, "completion_tokens": 3, "calls": 1}}
    res = finalize(tmp_path, [rec], build_metrics(["f1"]), {}, "score", with_cost=False, progress=False)
    assert "cost" not in res
    assert "judge_usage" not in json.loads((tmp_path / "predictions.jsonl").read_text())


# ---- board and paper-table marks --------------------------------------------------------------------

def run_folder(d: Path, experiment: str, ids: list[str], prompt: str = "brief", warnings: list | None = None,
               judges: dict | None = None, judging: float | None = None) -> Path:
    (d / ".hydra").mkdir(parents=True)
    (d / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([f"experiment={experiment}"]))
    system = row_system(experiment)
    config = eval_config(system, experiment=experiment)
    (d / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
    tq = {"answer_prompt": 900.0, "answer_completion": 10.0, "construction_prompt_amortised": 40.0,
          "construction_completion_amortised": 8.0}
    if judging is not None:
        tq["judging"] = judging
    res = {"overall": {"n": len(ids), "f1": 0.3, "f1_stderr": 0.01, "llm_judge": 0.6, "llm_judge_stderr": 0.02},
           "by_category": {"single-hop": {"id": 4, "n": len(ids), "f1": 0.3}},
           "cost": {"tokens_per_question": tq, "held_per_question": {"total": 500.0}},
           "health": {"status": "ok", "warnings": warnings or []}, "qa_prompt": {"name": prompt, "version": "v1"},
           "created": "2026-12-01T00:00:00Z", "config": config, **results_extra(system),
           **({"judges": judges} if judges else {})}
    (d / "results.json").write_text(json.dumps(res))
    (d / "predictions.jsonl").write_text("".join(json.dumps({"id": i}) + "\n" for i in ids))
    return d


HELD_EXPECTED = {"kind": "held_context", "expected": True, "threshold": 0.8, "share": 1.0, "message": "m"}
TOP_K = {"kind": "top_k", "expected": False, "histories": ["conv-26"], "of": 2, "message": "m"}


def test_board_marks_each_guard_and_only_the_odd_answer_prompt(tmp_path):
    ids = ["q0", "q1"]
    run_folder(tmp_path / "full", "locomo_all_full_context", ids, warnings=[HELD_EXPECTED], judging=120.0)
    run_folder(tmp_path / "rag", "locomo_all_rag", ids, warnings=[TOP_K])
    run_folder(tmp_path / "mem0", "locomo_all_mem0", ids, judges=LENIENT)  # marked from `judges` alone
    run_folder(tmp_path / "amem", "locomo_all_amem", ids, prompt="cot")  # the odd prompt out
    run_folder(tmp_path / "none", "locomo_all_no_context", ids)  # nothing to mark
    res = table_report("locomo_all", [tmp_path], tmp_path / "board.md")
    recs, md = {r["row"]: r for r in res["records"]}, res["markdown"]
    assert recs["full_context"]["guards"] == ["held >= 80% of history on 100% of q (expected: whole-history baseline)"]
    assert recs["rag"]["guards"] == ["top-k >= stored items (1/2 histories)"]
    assert recs["mem0"]["guards"] == ["lenient judge mem0"]
    assert recs["amem"]["guards"] == ["answer prompt cot v1 (other rows: brief v1)"]
    assert recs["no_context"]["guards"] == []
    assert "| written / q | construction / q | judging / q |" in md
    assert "| 500 | 900 | 10 | 48 | 120 |" in md and recs["full_context"]["tokens_per_question"] == 900 + 10 + 48 + 120
    assert "| answer prompt cot v1 (other rows: brief v1) |" in md and "guards = why a row's number" in md


def test_odd_prompts_needs_two_prompts_and_ignores_rows_without_one():
    assert odd_prompts({"a": "brief v1", "b": None, "c": "brief v1"}) == {}
    assert odd_prompts({"a": "brief v1", "b": "mem0 v2", "c": "brief v1"}) == {"b": "answer prompt mem0 v2 (other rows: brief v1)"}
    assert table_marks({"a": {"qa_prompt": {"name": "x"}}, "b": None}) == {"a": [], "b": []}


def test_paper_table_marks_its_cells_in_the_heading(tmp_path):
    table = {"name": "t", "source": {"paper": "P", "arxiv": "0", "table": "Table 1", "backbone": "b"},
             "metrics": {"F1": "f1"}, "categories": [{"paper": "Overall", "name": "overall"}],
             "cells": [{"cell": "a", "experiment": "exp_a", "values": {"Overall": {"F1": 30.0}}},
                       {"cell": "b", "experiment": "exp_b", "values": {"Overall": {"F1": 30.0}}},
                       {"cell": "c", "experiment": "exp_c", "values": {"Overall": {"F1": 30.0}}}]}
    runs = {}
    for cell, prompt, extra in (("a", "mem0", {}), ("b", "mem0", {"judges": LENIENT}), ("c", "locomo", {})):
        d = run_folder(tmp_path / cell, f"exp_{cell}", ["q0"], prompt=prompt, judges=extra.get("judges"))
        runs[f"exp_{cell}"] = Run(path=d, kind="eval", results=json.loads((d / "results.json").read_text()))
    records = compare(table, runs)
    add_guards(table, runs, records)
    md = render(table, records)
    heads = [line for line in md.splitlines() if line.startswith("## ")]
    assert "guards" not in heads[0]
    assert heads[1].endswith("; guards: lenient judge mem0")
    assert heads[2].endswith("; guards: answer prompt locomo v1 (other rows: mem0 v1)")


# ---- the CLI ------------------------------------------------------------------------------------------

def test_eval_cli_prints_and_writes_the_guard_under_its_setting(tmp_path):
    env = {"CTXBENCH_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    common = ["eval", "memory=full_context", "dataset=locomo_sample", "dataset.sessions=1", "llm.model=tiny",
              "limit=1", "memory.max_new_tokens=2", TINY_ANSWERS, "llm.cache=false", "progress=false"]
    p = run_cli(*common, "bypass_held_share=0.5", f"hydra.run.dir={tmp_path / 'run'}", env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "expected: held context >= 50% of the history's tokens on 1 of 1 questions" in p.stderr
    res = json.loads((tmp_path / "run" / "results.json").read_text())
    assert res["health"]["held_share"]["threshold"] == 0.5 and res["config"]["bypass_held_share"] == 0.5
    p = run_cli(*common, "bypass_held_share=0", f"hydra.run.dir={tmp_path / 'bad'}", env=env)
    assert p.returncode != 0 and "bypass_held_share" in p.stderr and not (tmp_path / "bad" / "results.json").exists()
