"""The call cache is trustworthy: no failed/empty replies stored, a complete key, damaged files named."""
from __future__ import annotations

import json
import random
import sqlite3
from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf

from ctxbench.data.errors import DataError
from ctxbench.llm.base import ChatResult
from ctxbench.llm.cache import CachedLLM, CallCache, maybe_cached
from ctxbench.llm.hf import model_cache_id
from ctxbench.llm.openai_compat import OpenAIChatLLM
from tests.scripted_llm import ScriptedLLM
from tests.test_llm_failures import MSGS, reply, server  # noqa: F401 - the fixture
from ctxbench.config.compose import option_config

SCHEMA = {"type": "object", "properties": {"label": {"type": "string"}}, "required": ["label"]}


def cached_openai(url, path, **kw):
    cfg = {"name": "openai", "model": "m", "base_url": url, "api_key_env": None, "timeout_s": 2,
           "max_retries": 0, "backoff_s": 0.01, "cache_path": str(path), "response_format": "json_schema", **kw}
    llm = maybe_cached(OpenAIChatLLM(option_config("llm", cfg)), option_config("llm", cfg))
    assert isinstance(llm, CachedLLM)
    return llm


def test_failed_replies_are_not_cached(server, tmp_path):  # noqa: F811
    s = server([(500, b"boom"), (200, reply(None)), (200, reply("In France"))])
    llm = cached_openai(s.url, tmp_path / "c.sqlite")
    assert llm.chat(MSGS).failed  # 500
    assert llm.chat(MSGS).failed  # content: null
    assert len(llm.cache) == 0
    r = llm.chat(MSGS)
    assert (r.text, r.cached) == ("In France", False) and len(s.posts) == 3  # the server was asked again
    assert llm.chat(MSGS).cached and len(s.posts) == 3


def test_empty_replies_are_not_cached(server, tmp_path):  # noqa: F811
    s = server([(200, reply("")), (200, reply("   \n")), (200, reply("Paris"))])
    llm = cached_openai(s.url, tmp_path / "c.sqlite")
    assert llm.chat(MSGS).text == "" and llm.chat(MSGS).text == ""
    assert len(llm.cache) == 0
    assert llm.chat(MSGS).text == "Paris" and len(s.posts) == 3
    batch = llm.chat_batch([MSGS, [{"role": "user", "content": "other"}]])
    assert [r.cached for r in batch] == [True, False] and len(s.posts) == 4


def test_empty_reply_of_any_backend_is_not_cached(tmp_path):
    inner = ScriptedLLM(["", "second"])
    llm = CachedLLM(inner, tmp_path / "c.sqlite", backend="scripted")
    assert llm.chat(MSGS).text == ""
    assert llm.chat(MSGS).text == "second" and len(inner.calls) == 2


def test_schema_is_part_of_the_key(server, tmp_path):  # noqa: F811
    s = server()
    llm = cached_openai(s.url, tmp_path / "c.sqlite")
    other = {**SCHEMA, "required": []}
    for schema in (None, SCHEMA, other):
        assert not llm.chat(MSGS, schema=schema).cached
    assert llm.chat(MSGS, schema=SCHEMA).cached and len(s.posts) == 3
    assert not llm.chat_batch([MSGS], schema={"type": "string"})[0].cached and len(s.posts) == 4
    assert "response_format" not in s.posts[0]["body"]  # no schema, no JSON mode: a plain call
    assert s.posts[1]["body"]["response_format"]["json_schema"]["schema"] == SCHEMA


@pytest.mark.parametrize("fmt,sent,constrained", [
    ("json_schema", "json_schema", True), ("json_object", "json_object", False), ("none", None, False)])
def test_response_format_switch(server, tmp_path, fmt, sent, constrained):  # noqa: F811
    s = server([(200, reply('{"label": "CORRECT"}'))])
    llm = cached_openai(s.url, tmp_path / "c.sqlite", response_format=fmt)
    r = llm.chat(MSGS, schema=SCHEMA, json_mode=True)
    got = s.posts[0]["body"].get("response_format")
    assert (got or {}).get("type") == sent and r.constrained is constrained
    if sent == "json_schema":
        assert got["json_schema"]["schema"] == SCHEMA


def test_base_url_extra_body_and_formats_are_part_of_the_key(server, tmp_path):  # noqa: F811
    a, b = server(), server()
    path = tmp_path / "c.sqlite"
    assert not cached_openai(a.url, path).chat(MSGS).cached
    assert not cached_openai(b.url, path).chat(MSGS).cached
    assert not cached_openai(a.url, path, extra_body={"top_p": 0.5}).chat(MSGS).cached
    assert cached_openai(a.url, path, response_format="none").chat(MSGS).cached  # a plain call is sent alike
    assert not cached_openai(a.url, path).chat(MSGS, schema=SCHEMA).cached
    assert not cached_openai(a.url, path, response_format="none").chat(MSGS, schema=SCHEMA).cached
    assert cached_openai(a.url, path).chat(MSGS).cached


def test_context_window_is_part_of_the_key(tmp_path):
    path = tmp_path / "c.sqlite"
    assert CachedLLM(ScriptedLLM("a", context_window=100), path, "s").chat(MSGS).text == "a"
    assert CachedLLM(ScriptedLLM("b", context_window=50), path, "s").chat(MSGS).text == "b"
    assert CachedLLM(ScriptedLLM("c", context_window=100), path, "s").chat(MSGS).text == "a"


def fake_bundle(commit=None, dtype=torch.float32, path="/models/x"):
    model = SimpleNamespace(config=SimpleNamespace(_commit_hash=commit), dtype=dtype)
    return SimpleNamespace(model=model, name="x", path=path)


def test_hf_revision_and_dtype_are_part_of_the_key(tmp_path):
    ids = {model_cache_id(fake_bundle("abc")), model_cache_id(fake_bundle("def")),
           model_cache_id(fake_bundle("abc", torch.bfloat16)), model_cache_id(fake_bundle("abc", path="/y"))}
    assert len(ids) == 4
    path = tmp_path / "c.sqlite"
    for i, cid in enumerate(sorted(ids)):
        inner = ScriptedLLM(f"reply {i}")
        inner.cache_id = cid
        assert CachedLLM(inner, path, "hf").chat(MSGS).text == f"reply {i}"  # never another's reply


def test_hf_local_folder_resaved_is_a_new_revision(tmp_path):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    first = model_cache_id(fake_bundle(path=str(folder)))
    (folder / "config.json").write_text('{"a": 1}')  # training saved the folder again
    import os

    os.utime(folder / "config.json", ns=(1, 10**18))
    assert model_cache_id(fake_bundle(path=str(folder))) != first


def test_hf_backend_cache_id_names_dtype():
    from ctxbench.llm.hf import HFChatLLM

    llm = HFChatLLM(option_config("llm", {"name": "hf", "model": "tiny", "context_window": 64}))
    assert "dtype=float32" in llm.cache_id and " rev=" in llm.cache_id
    llm.preflight()  # a no-op for a local model


# ---- damaged files --------------------------------------------------------------------------------

def test_a_file_that_is_not_a_database_is_named(tmp_path):
    path = tmp_path / "llm_cache.sqlite"
    path.write_bytes(random.Random(0).randbytes(5000))
    with pytest.raises(DataError, match="llm_cache.sqlite: the LLM call cache is damaged") as info:
        CachedLLM(ScriptedLLM("a"), path, backend="s")
    msg = str(info.value)
    assert str(path) in msg and "delete this file" in msg and "\n" not in msg


def test_damage_found_at_the_first_query_is_named(tmp_path):
    path = tmp_path / "c.sqlite"
    cache = CallCache(path)
    for i in range(300):
        cache.put(f"k{i}", ChatResult("x" * 200, 1, 1))
    cache._conn().execute("PRAGMA wal_checkpoint(TRUNCATE)")
    cache._conn().close()
    size = path.stat().st_size
    with open(path, "r+b") as f:  # keep page 1 (the schema), damage the rest
        f.seek(4096)
        f.write(random.Random(0).randbytes(size - 4096))
    llm = CachedLLM(ScriptedLLM("a"), path, backend="s")  # opens fine
    with pytest.raises(DataError, match="c.sqlite: the LLM call cache is damaged"):
        llm.chat(MSGS)
    with pytest.raises(sqlite3.DatabaseError):  # what the user saw before
        sqlite3.connect(path).execute("SELECT text FROM calls WHERE key='k5'").fetchone()


def test_cli_names_a_damaged_cache(cli, tmp_path):
    path = tmp_path / "bad.sqlite"
    path.write_bytes(json.dumps({"not": "a database"}).encode() * 200)
    r = cli("eval", "memory=no_context", "dataset=locomo_sample", "llm=openai", "llm.api_key_env=null",
            "llm.base_url=http://127.0.0.1:1/v1", f"llm.cache_path={path}", "limit=1", "progress=false",
            f"hydra.run.dir={tmp_path / 'run'}")
    assert r.returncode == 2, r.stderr[-2000:]
    assert f"ctxbench: error: {path}: the LLM call cache is damaged" in r.stderr


def _open_cache(path, q, barrier):
    try:
        barrier.wait(60)  # all at once
        c = CallCache(path)
        c.put("k", ChatResult(text="x", prompt_tokens=1, completion_tokens=1))
        q.put("ok")
    except Exception as e:  # noqa: BLE001 - reported to the parent
        q.put(repr(e))


@pytest.mark.process
def test_processes_opening_a_new_cache_together_all_succeed(tmp_path):
    """Rows of a board run side by side (`reproduce table=locomo_all jobs=2`) open one new cache file:
    both made the table without ``flags`` and added it ("duplicate column name"), or met a lock on WAL."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    for i in range(6):
        path, q, barrier = tmp_path / f"c{i}.sqlite", ctx.Queue(), ctx.Barrier(3)
        procs = [ctx.Process(target=_open_cache, args=(path, q, barrier)) for _ in range(3)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        assert [q.get(timeout=5) for _ in procs] == ["ok"] * 3
        assert len(CallCache(path)) == 1


def test_an_old_cache_without_flags_gains_the_column(tmp_path):
    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as c:
        c.execute("CREATE TABLE calls (key TEXT PRIMARY KEY, text TEXT NOT NULL, prompt_tokens INTEGER, "
                  "completion_tokens INTEGER, created REAL)")
        c.execute("INSERT INTO calls VALUES ('k', 'old', 1, 1, 0)")
    cache = CallCache(path)
    assert cache.get("k").text == "old"
    cache.put("k2", ChatResult(text="new", prompt_tokens=1, completion_tokens=1, truncated=True))
    assert cache.get("k2").truncated


def test_a_cache_file_cut_short_is_refused_in_one_line(tmp_path):
    """SQLite reads only the pages a query touches, so a cache cut in half would open; the header's page
    count against the file's length catches it before any use."""
    path = tmp_path / "calls.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE calls (key TEXT PRIMARY KEY, text TEXT NOT NULL)")
    conn.executemany("INSERT INTO calls VALUES (?, ?)", [(f"k{i}", "x" * 2000) for i in range(40)])
    conn.commit()
    conn.close()
    data = path.read_bytes()
    whole = tmp_path / "whole.sqlite"
    whole.write_bytes(data)
    CallCache(whole)  # whole: opens
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError, match="cut short"):
        CallCache(path)


def test_stop_is_part_of_the_key_and_stopped_is_kept(server, tmp_path):  # noqa: F811
    """A call's stop strings are sent as ``stop`` and key the cache; a call without them keeps its old key."""
    s = server([(200, reply("Paris")), (200, reply("Paris\nFrance"))])
    llm = cached_openai(s.url, tmp_path / "c.sqlite")
    r = llm.chat(MSGS, stop=["\n"])
    assert s.posts[0]["body"]["stop"] == ["\n"] and r.text == "Paris"
    plain = llm.chat(MSGS)  # no stop: another key, asked again, nothing sent as stop
    assert not plain.cached and "stop" not in s.posts[1]["body"] and plain.text == "Paris\nFrance"
    assert llm.chat(MSGS, stop=["\n"]).cached and llm.chat(MSGS).cached and len(s.posts) == 2
    assert llm._key(MSGS, 64, 0.0, False) == llm._key(MSGS, 64, 0.0, False, stop=[])  # old keys unchanged
    assert llm._key(MSGS, 64, 0.0, False) != llm._key(MSGS, 64, 0.0, False, stop=["\n"])
    inner = ScriptedLLM(["Rex\nmore"])
    cached = CachedLLM(inner, tmp_path / "d.sqlite", backend="scripted")
    first = cached.chat(MSGS, stop=["\n"])
    again = cached.chat(MSGS, stop=["\n"])
    assert (first.text, first.stopped) == ("Rex", True) and (again.cached, again.stopped) == (True, True)


def test_openai_applies_the_stop_rule_to_the_reply(server, tmp_path):  # noqa: F811
    """A server that ignores ``stop`` still gives the cut reply; one that stopped at a leading line break
    (an empty reply) is asked once more without ``stop`` and the reply cut here, both calls counted."""
    s = server([(200, reply("  Paris\nFrance")), (200, reply("")), (200, reply("\nRome\nItaly"))])
    llm = cached_openai(s.url, tmp_path / "c.sqlite").inner  # the backend itself, no cache
    r = llm.chat(MSGS, stop=["\n"])
    assert (r.text, r.stopped, r.truncated) == ("Paris", True, False)
    r = llm.chat(MSGS, stop=["\n"])
    assert (r.text, r.stopped) == ("Rome", True) and len(s.posts) == 3
    assert s.posts[1]["body"]["stop"] == ["\n"] and "stop" not in s.posts[2]["body"]
    assert (r.prompt_tokens, r.completion_tokens) == (22, 6)
