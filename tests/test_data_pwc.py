"""PwC loader: the shared dev rows, grouping, the shipped sample, hub ids offline, bad rows."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ctxbench.core import registry
from ctxbench.data.errors import DataError
from ctxbench.config.schemas import load_conf_file
from ctxbench.config.compose import option_config

REPO = Path(__file__).resolve().parents[1]


def load(**kw):
    return registry.build("dataset", option_config("dataset", {"name": "pwc", **kw}))


def test_shared_dev_rows(shared_data):
    path = shared_data / "pwc_dev_icae_v2.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    s = load(path=str(path))
    assert len(s) == len(rows) == 6  # the file holds 6 rows about one context
    for sample, row in zip(s, rows):
        assert sample.history.text == row["input"] and not sample.history.sessions
        (q,) = sample.questions
        assert (q.question, q.answer, q.category_name) == (row["prompt"], row["answer"], "pwc")
    assert s[0].questions[0].question == "Identify the person arrested on suspicion of spying for North Korea."
    assert len({q.id for x in s for q in x.questions}) == 6


def test_group_by_input_and_limit(shared_data):
    path = str(shared_data / "pwc_dev_icae_v2.jsonl")
    g = load(path=path, group_by_input=True)
    assert len(g) == 1 and len(g[0].questions) == 6
    assert len(load(path=path, limit=2)) == 2


def test_shipped_sample():
    s = registry.build("dataset", load_conf_file(REPO / "conf/dataset/pwc_sample.yaml"))
    assert len(s) == 6 and len({x.history.text for x in s}) == 2
    assert s[0].questions[0].answer == "Harriet Vance, a textile owner."


def test_hub_id_offline_is_clear(monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(DataError, match="sggetao/PwC: is a hub dataset but the hub is offline"):
        load(path="sggetao/PwC")


def test_default_path_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("CTXBENCH_DATA", str(tmp_path))
    with pytest.raises(DataError, match="pwc_test.jsonl: not found; download it with `python -m ctxbench data download pwc`"):
        load()


@pytest.mark.parametrize("line, field, msg", [
    ('{"input": "c", "answer": "a"}', "prompt", "missing required field"),
    ('{"input": "c", "prompt": "p", "answer": 3}', "answer", "expected a string, got int"),
    ('{"input": "c", "prompt": "p", "answer": "a"', None, "malformed JSON"),
    ('["c", "p", "a"]', None, "expected a JSON object, got list"),
])
def test_bad_rows_name_file_line_field(tmp_path, line, field, msg):
    p = tmp_path / "rows.jsonl"
    good = json.dumps({"input": "c", "prompt": "p", "answer": "a"})
    p.write_text(f"{good}\n\n{line}\n")
    with pytest.raises(DataError) as e:
        load(path=str(p))
    text = str(e.value)
    assert str(p) in text and "record line 3" in text and msg in text
    if field:
        assert f"field {field!r}" in text


def test_empty_file(tmp_path):
    p = tmp_path / "empty.jsonl"
    p.write_text("\n")
    with pytest.raises(DataError, match="no rows"):
        load(path=str(p))
