"""Pile loader: JSONL shards with meta, subset filter, folders, .zst without zstandard, bad rows."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ctxbench.core import registry
from ctxbench.data.errors import DataError
from ctxbench.config.schemas import load_conf_file
from ctxbench.config.compose import option_config

REPO = Path(__file__).resolve().parents[1]


def load(**kw):
    return registry.build("dataset", option_config("dataset", {"name": "pile", "limit": None, **kw}))


def shard(path: Path, docs: list[tuple[str, str | None]]) -> Path:
    with open(path, "w") as f:
        for text, subset in docs:
            rec = {"text": text} if subset is None else {"text": text, "meta": {"pile_set_name": subset}}
            f.write(json.dumps(rec) + "\n")
    return path


def test_jsonl_documents_and_subsets(tmp_path):
    p = shard(tmp_path / "00.jsonl", [("web page one", "Pile-CC"), ("a theorem", "ArXiv"), ("no meta here", None),
                                      ("x", "Pile-CC")])
    s = load(path=str(p))
    assert [x.history.text for x in s] == ["web page one", "a theorem", "no meta here", "x"]
    assert all(not x.questions and not x.history.sessions for x in s)
    assert s.quirks["missing_meta"] == 1
    cc = load(path=str(p), subsets=["Pile-CC"], min_chars=2)
    assert [x.history.text for x in cc] == ["web page one"]
    assert cc.quirks["other_subsets"] == 2 and cc.quirks["too_short"] == 1
    assert cc[0].history.id == "pile-0-Pile-CC"
    assert len(load(path=str(p), limit=2)) == 2
    assert load(path=str(p), max_chars=3)[0].history.text == "web"


def test_folder_of_shards(tmp_path):
    shard(tmp_path / "00.jsonl", [("a", "ArXiv")])
    shard(tmp_path / "01.jsonl", [("b", "Github")])
    (tmp_path / "notes.txt").write_text("ignored")
    assert [x.history.text for x in load(path=str(tmp_path))] == ["a", "b"]


def test_zst_needs_zstandard(tmp_path, monkeypatch):
    p = tmp_path / "00.jsonl.zst"
    p.write_bytes(b"\x28\xb5\x2f\xfd")
    monkeypatch.setitem(sys.modules, "zstandard", None)  # import fails as if not installed
    with pytest.raises(DataError, match=r"00.jsonl.zst: is zstandard-compressed; install the reader with `pip install zstandard`"):
        load(path=str(p))


def test_zst_roundtrip_when_available(tmp_path):
    zstd = pytest.importorskip("zstandard")
    raw = b'{"text": "compressed doc", "meta": {"pile_set_name": "ArXiv"}}\n'
    p = tmp_path / "00.jsonl.zst"
    p.write_bytes(zstd.ZstdCompressor().compress(raw))
    assert load(path=str(p))[0].history.text == "compressed doc"


def test_bad_rows(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"text": "ok"}\n{"text": 7}\n')
    with pytest.raises(DataError, match=r"bad.jsonl, record line 2, field 'text': expected a string, got int"):
        load(path=str(p))
    p.write_text('{"text": "ok", "meta": "Pile-CC"}\n')
    with pytest.raises(DataError, match=r"record line 1, field 'meta': expected an object"):
        load(path=str(p))
    p.write_text('{"text": "ok", "meta": {"pile_set_name": 3}}\n')
    with pytest.raises(DataError, match=r"field 'meta.pile_set_name'"):
        load(path=str(p))
    p.write_text('{"text": "ok", "meta": {"pile_set_name": "A"}}\n')
    with pytest.raises(DataError, match=r"no documents left \(subsets=\['B'\]"):
        load(path=str(p), subsets=["B"])


def test_shipped_sample_and_hub_offline(monkeypatch):
    s = registry.build("dataset", load_conf_file(REPO / "conf/dataset/pile_sample.yaml"))
    assert len(s) == 4 and s.quirks["missing_meta"] == 0
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DataError, match="monology/pile-uncopyrighted: is a hub dataset but the hub is offline"):
        load(path="monology/pile-uncopyrighted")
