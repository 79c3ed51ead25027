"""locomo_pwc: LoCoMo sessions as PwC rows, split by conversation, evidence inside the session."""
from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ctxbench.core import registry
from ctxbench.data.errors import DataError
from ctxbench.config.schemas import load_conf_file
from ctxbench.config.compose import option_config

REPO = Path(__file__).resolve().parents[1]


def load(shared_data, **kw):
    base = load_conf_file(REPO / "conf/dataset/locomo_pwc.yaml")
    return registry.build("dataset", OmegaConf.merge(base, {"path": str(shared_data / "locomo10.json"), **kw}))


def convs(samples) -> set[str]:
    return {q.meta["conversation"] for s in samples for q in s.questions}


def test_split_is_disjoint_by_conversation(shared_data):
    train, test, every = (load(shared_data, split=x) for x in ("train", "test", "all"))
    assert convs(test) == {"conv-26", "conv-30"}
    assert len(convs(train)) == 8 and not convs(train) & convs(test)
    assert {s.history.id for s in train}.isdisjoint({s.history.id for s in test})
    n = lambda xs: sum(len(s.questions) for s in xs)  # noqa: E731
    assert n(train) + n(test) == n(every) == 1649
    # what is left out is counted: 1649 kept + 333 multi-session + 4 without parseable evidence = 1986
    assert every.quirks["questions_multi_session_evidence"] == 333
    assert every.quirks["questions_without_evidence"] == 4
    other = load(shared_data, split="test", test_conversations=["conv-41"])
    assert convs(other) == {"conv-41"}


def test_rows_hold_their_evidence(shared_data):
    test = load(shared_data, split="test")
    conv26 = registry.build("dataset", option_config("dataset",
        {"name": "locomo", "path": str(shared_data / "locomo10.json"), "conversations": ["conv-26"]}))[0]
    turns = {t.id: t.text for s in conv26.history.sessions for t in s.turns}
    first = test[0]
    assert first.history.id == "conv-26-session_1" and not first.history.sessions
    assert first.history.text.startswith("DATE: 1:56 pm on 8 May, 2023\nCaroline: Hey Mel!")
    checked = 0
    for row in test:
        if not row.history.id.startswith("conv-26-"):
            continue
        session = row.history.id.rsplit("-", 1)[-1]
        for q in row.questions:
            assert q.meta["session"] == session
            for e in q.evidence:
                if e in turns:
                    assert turns[e] in row.history.text
                    checked += 1
    assert checked > 100


def test_categories_per_question_and_limit(shared_data):
    noadv = load(shared_data, split="test", categories=[1, 2, 3, 4])
    assert {q.category for s in noadv for q in s.questions} == {1, 2, 3, 4}
    rows = load(shared_data, split="test", per_question=True)
    assert all(len(s.questions) == 1 for s in rows) and len(rows) == 260
    assert rows[0].history.id == rows[0].questions[0].id
    assert len(load(shared_data, split="train", limit=5)) == 5


def test_errors(shared_data):
    with pytest.raises(DataError, match="field 'dataset.split'.*unknown split 'dev'"):
        load(shared_data, split="dev")
    with pytest.raises(DataError, match="dataset.test_conversations.*conv-99"):
        load(shared_data, test_conversations=["conv-99"])


def test_shipped_sample_offline():
    cfg = load_conf_file(REPO / "conf/dataset/locomo_pwc_sample.yaml")
    train = registry.build("dataset", cfg)
    test = registry.build("dataset", OmegaConf.merge(cfg, {"split": "test"}))
    assert convs(train) == {"demo-1"} and convs(test) == {"demo-2"}
    assert [s.history.id for s in test] == ["demo-2-session_1", "demo-2-session_2"]
