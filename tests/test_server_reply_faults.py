"""What comes back from an LLM server (issue 37): secrets, malformed and empty replies, the served model.

The sweep's fake server (tests/bad_input/harness.py, real HTTP on 127.0.0.1) answers each request with
the behaviour of its URL's mode (tests/bad_input/faults_server.py); ``llm=openai`` talks to it through
the call cache, as a run does. The sweep's ``faults`` cases run the same modes end to end; here is what
each class must leave in the backend, the cache and the run folder.
"""
from __future__ import annotations

import json
import sqlite3

import pytest

from bad_input.faults_server import KEY, SNAPSHOT
from bad_input.harness import FakeServer
from conftest import run_cli
from ctxbench.config.compose import option_config
from ctxbench.core.secrets import redact
from ctxbench.llm.base import ChatResult
from ctxbench.llm.cache import CachedLLM, CallCache, cache_key, storable
from ctxbench.llm.openai_compat import OpenAIChatLLM, retry_after_s
from ctxbench.llm.shared import SharedLLM
from ctxbench.metrics.health import health_line, run_health

MSGS = [{"role": "user", "content": "When did Caroline go to the LGBTQ support group?"}]
KEY_ENV = "MY_LLM_CREDS"  # a name that does not look secret: only the backend knows what it holds


@pytest.fixture(scope="module")
def fake():
    s = FakeServer()
    yield s
    s.close()


def backend(fake, mode, tmp_path, monkeypatch, **kw):
    """``llm=openai`` on ``mode``, with its key in $MY_LLM_CREDS, through a call cache in ``tmp_path``."""
    monkeypatch.setenv(KEY_ENV, KEY)
    cfg = {"name": "openai", "model": "fake", "base_url": fake.url(mode), "api_key_env": KEY_ENV, "max_retries": 1,
           "backoff_s": 0.01, "backoff_max_s": 0.05, "timeout_s": 5, "cache": False, **kw}
    return CachedLLM(OpenAIChatLLM(option_config("llm", cfg)), tmp_path / "cache.sqlite", backend="openai")


# ---- secrets in a reply -----------------------------------------------------------------------------

def test_a_key_echoed_in_a_reply_reaches_neither_the_caller_nor_the_cache(fake, tmp_path, monkeypatch):
    llm = backend(fake, "f_echo_key", tmp_path, monkeypatch)
    first, again = llm.chat(MSGS), llm.chat(MSGS)
    assert not first.failed and again.cached
    assert KEY not in first.text and KEY not in again.text and "***" in first.text
    assert KEY.encode() not in (tmp_path / "cache.sqlite").read_bytes()


def test_a_key_in_a_cached_reply_is_scrubbed_by_the_shared_backend(fake, tmp_path, monkeypatch):
    """A row written before replies were scrubbed: what a system sees holds no key all the same."""
    llm = backend(fake, "ok", tmp_path, monkeypatch)
    key = llm._key(MSGS, 64, 0.0, False)
    llm.cache.put(key, ChatResult(f"leaked {KEY}", 3, 2))
    assert llm.chat(MSGS).text == f"leaked {KEY}"  # the cache alone returns what it holds
    assert SharedLLM(llm).chat(MSGS).text == "leaked ***"


# ---- secrets in a config ----------------------------------------------------------------------------

@pytest.mark.parametrize("value, secret", [
    ("http://user:hunter2pw@host:8080/v1", "hunter2pw"),
    ("https://host/v1?api_key=abc123xyz&model=x", "abc123xyz"),
    ("https://host/v1?key=abc123xyz", "abc123xyz"),
    ("https://host/v1?x=1&token=abc123xyz", "abc123xyz"),
    ("Bearer abcdef123456789", "abcdef123456789"),
])
def test_a_config_is_redacted_by_value_whatever_key_holds_it(value, secret):
    red = redact({"llm": {"base_url": value, "headers": [value]}, "max_new_tokens": 3})
    assert secret not in json.dumps(red) and red["max_new_tokens"] == 3
    assert "?x=1" in json.dumps(redact({"u": "https://host/v1?x=1&token=t"}))  # other parameters kept


def test_a_password_in_base_url_is_in_no_run_file_and_changing_it_is_no_new_config(fake, tmp_path):
    run = tmp_path / "run"
    for pw in ("first-Secret-pw", "second-Secret-pw"):  # the second run resumes: the same config
        p = run_cli("eval", "memory=no_context", "dataset=locomo_sample", "limit=2", "progress=false", "llm=openai",
                    f"llm.base_url=http://me:{pw}@127.0.0.1:{fake.port}/ok/v1", "llm.model=fake",
                    "llm.api_key_env=null", f"hydra.run.dir={run}", f"llm.cache_path={tmp_path}/c.sqlite")
        assert p.returncode == 0, p.stderr[-2000:]
    written = [f for f in run.rglob("*") if f.is_file()]
    assert {"results.json", "run.json"} <= {f.name for f in written}
    for f in written:
        assert b"first-Secret-pw" not in f.read_bytes() and b"second-Secret-pw" not in f.read_bytes(), f
    assert json.loads((run / "results.json").read_text())["config"]["llm"]["base_url"].startswith("http://***@")


# ---- malformed replies --------------------------------------------------------------------------------

@pytest.mark.parametrize("mode, error", [  # the sweep's faults.* cases run the other modes of the class
    ("f_content_surrogate", "not valid Unicode"),
    ("f_retry_after_superscript", "HTTP 429"),
])
def test_a_malformed_reply_is_a_failed_call_and_never_cached(fake, tmp_path, monkeypatch, mode, error):
    llm = backend(fake, mode, tmp_path, monkeypatch)
    r = llm.chat(MSGS)
    assert r.failed and error in r.error and "\n" not in r.error
    assert len(llm.cache) == 0


@pytest.mark.parametrize("value, seconds", [
    ("12", 12.0), (" 5 ", 5.0), ("1.5", 1.5), ("١٢", None), ("²", None), ("1e3", None), ("inf", None),
    ("nan", None), ("-5", None), ("", None), (None, None), ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0),
])
def test_retry_after_takes_plain_seconds_or_a_date_only(value, seconds):
    assert retry_after_s(value) == seconds


def test_absurd_usage_counts_are_not_believed_and_the_reply_is_cached(fake, tmp_path, monkeypatch, capsys):
    llm = backend(fake, "f_usage_huge", tmp_path, monkeypatch)
    r = llm.chat(MSGS)
    assert not r.failed and r.prompt_tokens < 1 << 31 and r.token_source != "server"
    assert llm.chat(MSGS).cached and "not token counts" in capsys.readouterr().err


def test_the_cache_refuses_what_sqlite_cannot_hold():
    assert not storable(ChatResult("a \ud800", 1, 1)) and not storable(ChatResult("a", 1 << 70, 1))
    assert not storable(ChatResult("a", 1, 1, served_model="\udc80")) and storable(ChatResult("a", 1, 1))


# ---- empty replies ------------------------------------------------------------------------------------

def test_empty_replies_fail_the_run_saying_so(fake, tmp_path):
    p = run_cli("eval", "memory=no_context", "dataset=locomo_sample", "limit=2", "progress=false", "llm=openai",
                f"llm.base_url={fake.url('f_empty_content')}", "llm.model=fake", "llm.api_key_env=null",
                f"hydra.run.dir={tmp_path}/run", f"llm.cache_path={tmp_path}/c.sqlite")
    last = p.stderr.strip().splitlines()[-1]
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert last.startswith("ctxbench: error:") and "2 of 2 LLM calls failed (2 empty replies)" in last
    health = json.loads((tmp_path / "run" / "results.json").read_text())["health"]
    assert (health["status"], health["failed_calls"], health["empty_replies"]) == ("failed", 2, 2)


def test_health_counts_empty_construction_calls_too():
    records = [{"history_id": "h", "usage": {"answer_calls": 1, "extra": {"failed_calls": 0}},
                "construction": {"calls": 9, "failed_calls": 0, "empty_calls": 4}}]
    h = run_health(records, 0.1)
    assert (h["status"], h["failed_calls"], h["llm_calls"]) == ("failed", 4, 10)
    assert "(4 empty replies)" in h["reason"] and "(4 empty replies)" in health_line(h)


# ---- the served model ---------------------------------------------------------------------------------

@pytest.mark.parametrize("mode, served, warned", [("f_served_snapshot", SNAPSHOT, False),
                                                  ("f_served_other", "some-other-model", True)])
def test_the_served_model_is_recorded_cached_and_warned_about_once(fake, tmp_path, monkeypatch, capsys,
                                                                   mode, served, warned):
    llm = backend(fake, mode, tmp_path, monkeypatch)
    rs = [llm.chat(MSGS), llm.chat(MSGS), llm.chat(MSGS + [{"role": "user", "content": "again"}])]
    assert [r.served_model for r in rs] == [served] * 3 and rs[1].cached
    assert llm.meter.served_models() == {served: 3}
    assert capsys.readouterr().err.count("the server answered with") == int(warned)


def test_a_cache_made_before_served_models_gains_the_column_and_says_cache(tmp_path):
    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as c:
        c.execute("CREATE TABLE calls (key TEXT PRIMARY KEY, text TEXT NOT NULL, prompt_tokens INTEGER, "
                  "completion_tokens INTEGER, created REAL, flags INTEGER)")
        c.execute("INSERT INTO calls VALUES (?, 'old reply', 3, 2, 0, 4)", (cache_key("openai", "m", MSGS),))
    cache = CallCache(path)
    assert cache.get(cache_key("openai", "m", MSGS)).served_model == "cache"
    cache.put("new", ChatResult("new reply", 1, 1, served_model="m-2024"))
    assert cache.get("new").served_model == "m-2024"
