"""MemoryBank's reference forgetting (``forgetting=sample``, the paper setting): each turn memory is kept
with probability R = exp(-t/S) at each later day (zhongwanjun/MemoryBank-SiliconFriend forget_memory.py),
drawn with a seed so that reruns and resumed runs forget the same memories; ``forgetting=threshold``
is the earlier fixed cut-off. Also: the portrait and global summary held in state count in memory_stats."""
from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from ctxbench.config.schema import check_types
from ctxbench.core.errors import ConfigError
from ctxbench.memory.memorybank import MemoryBank, draw, retention
from ctxbench.core.types import History, Session, Turn

from memory_scripted import BowEmbedder, ScriptedLLM
from ctxbench.config.compose import option_config

CONF = Path(__file__).resolve().parents[1] / "conf"
N = 300  # turn memories stored on day 1


def history(gap_days: int = 1, n: int = N) -> History:
    """Day 1: ``n`` distinct turns at noon; ``gap_days`` later, one more turn at noon."""
    first = [Turn("Alice", f"fact number w{i}x about topic t{i}y", f"D1:{i}") for i in range(n)]
    later = Session("s2", [Turn("Bob", "completely unrelated remark", "D2:1")], f"12:00 pm on {1 + gap_days} May, 2023")
    return History(id="h", sessions=[Session("s1", first, "12:00 pm on 1 May, 2023"), later])


def build(tmp_path, responder=None, **kw) -> MemoryBank:
    cfg = option_config("memory", {"name": "memorybank", "k": 3, "forgetting": "sample", "seed": 0, "recall_k": 0,
                            "progress": False, **kw})
    llm = ScriptedLLM(responder or (lambda m, p: "summary text"))
    return MemoryBank(cfg, llm=llm, embedder=BowEmbedder(), workdir=tmp_path)


def forgotten_turns(mb: MemoryBank) -> set[str]:
    return {r.meta["turn"] for r in mb.store.records("h", "turn", include_deleted=True) if r.deleted}


def test_draw_is_uniform_fixed_by_its_key():
    us = [draw(0, "h", i, "2023-05-02") for i in range(4000)]
    assert all(0.0 <= u < 1.0 for u in us)
    assert sum(us) / len(us) == pytest.approx(0.5, abs=0.02)
    assert sum(u < 0.3 for u in us) / len(us) == pytest.approx(0.3, abs=0.03)
    assert draw(0, "h", 5, "2023-05-02") == draw(0, "h", 5, "2023-05-02")
    assert len({draw(s, "h", 5, "2023-05-02") for s in range(3)}) == 3           # the seed changes it
    assert draw(0, "h", 5, "2023-05-02") != draw(0, "h", 5, "2023-05-03")        # a new draw each day


@pytest.mark.parametrize("gap_days", [1, 3])
def test_forgetting_rate_follows_retention(tmp_path, gap_days):
    mb = build(tmp_path)
    mb.ingest(history(gap_days))
    turns = mb.store.records("h", "turn", include_deleted=True)
    old = [r for r in turns if r.meta["turn"].startswith("D1:")]
    keep = retention(gap_days, 1.0)  # t in calendar days, S = 1: R = e^-1 = 0.368, e^-3 = 0.050
    rate = sum(r.deleted for r in old) / len(old)
    sigma = math.sqrt(keep * (1 - keep) / len(old))
    assert abs(rate - (1 - keep)) < 4 * sigma + 1e-9, (rate, 1 - keep)
    # exactly the memories whose draw of that day exceeds R
    day = f"2023-05-{1 + gap_days:02d}"
    assert {r.id for r in old if r.deleted} == {r.id for r in old if draw(0, "h", r.id, day) > keep}
    assert not any(r.deleted for r in turns if r.meta["turn"] == "D2:1")  # stored today: R = 1
    assert mb.counts["forgotten"] == sum(r.deleted for r in old)


def test_a_later_session_on_the_same_day_forgets_nothing(tmp_path):
    """The reference counts whole days (forget_memory.py _get_date_difference): same day, t = 0, R = 1."""
    h = history(0, n=50)
    h.sessions[1] = Session("s2", h.sessions[1].turns, "11:30 pm on 1 May, 2023")
    mb = build(tmp_path)
    mb.ingest(h)
    assert forgotten_turns(mb) == set()


def test_seeded_draws_are_reproducible_across_runs_and_resume(tmp_path):
    def run(d: str, seed: int) -> set[str]:
        mb = build(tmp_path / d, seed=seed)
        mb.ingest(history())
        out = forgotten_turns(mb)
        mb.close()
        return out

    a, b, c = run("a", 7), run("b", 7), run("c", 8)
    assert a == b and a and a != c
    # a run that crashes on day 2 (after forgetting, before the step is committed), then resumes
    crash = {"n": 0}

    def flaky(messages, phase):
        if "Conversation on 02 May 2023" in messages[-1]["content"] and not crash["n"]:
            crash["n"] = 1
            raise RuntimeError("backend died")
        return "summary text"

    mb = build(tmp_path / "d", flaky, seed=7)
    with pytest.raises(RuntimeError):
        mb.ingest(history())
    mb.close()
    mb2 = build(tmp_path / "d", flaky, seed=7)
    mb2.ingest(history())
    assert crash["n"] == 1 and forgotten_turns(mb2) == a


def test_threshold_option_keeps_the_fixed_cut_off(tmp_path):
    """forgetting=threshold: R < forget_threshold on fractional days, whatever the seed."""
    got = []
    for seed in (1, 2):
        mb = build(tmp_path / str(seed), forgetting="threshold", forget_threshold=0.3, seed=seed)
        mb.ingest(history(1))  # t = 1 day exactly: R = 0.368 >= 0.3: nothing forgotten
        got.append(forgotten_turns(mb))
    assert got == [set(), set()]
    mb = build(tmp_path / "x", forgetting="threshold", forget_threshold=0.3)
    mb.ingest(history(2))      # R = 0.135 < 0.3: every day-1 memory forgotten
    assert forgotten_turns(mb) == {f"D1:{i}" for i in range(N)}


def test_unknown_forgetting_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=re.escape("memory.forgetting' must be one of sample | threshold")):
        build(tmp_path, forgetting="random")


def test_memory_stats_count_the_summaries_held_in_state(tmp_path):
    replies = {"Update the portrait": "Alice likes facts and topics", "Write a global summary": "two days of facts"}

    def respond(messages, phase):
        return next((v for k, v in replies.items() if messages[0]["content"].startswith(k)), "a day of facts")

    mb = build(tmp_path, respond)
    mb.ingest(history(1, n=5))
    recs = mb.store.records("h")
    items, tokens = mb.memory_stats()
    assert mb.portrait and mb.global_summary
    assert items == len(recs) + 2
    assert tokens == sum(len(r.text.split()) for r in recs) + len(mb.portrait.split()) + len(mb.global_summary.split())


@pytest.mark.parametrize("experiment", ["amem_locomo_table1_memorybank", "mem0_locomo_table1_memorybank"])
def test_paper_experiments_sample_with_the_run_seed(experiment):
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose(config_name="eval", overrides=[f"experiment={experiment}", "seed=5"])
        default = compose(config_name="eval", overrides=["memory=memorybank"])
        bad = compose(config_name="eval", overrides=[f"experiment={experiment}", "memory.forgetting=random"])
    check_types(cfg, "eval")
    assert cfg.memory.forgetting == "sample" and cfg.memory.seed == 5
    assert default.memory.forgetting == "sample" and default.memory.seed == 0
    with pytest.raises(ConfigError, match=re.escape("'memory.forgetting' must be one of sample | threshold")):
        check_types(bad, "eval")
