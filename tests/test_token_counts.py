"""Token counts labelled by where they come from: the server's usage, a real tokenizer, or an estimate."""
from __future__ import annotations

import json
import math
import sqlite3
import sys
import types
from http.server import BaseHTTPRequestHandler

import pytest
from omegaconf import OmegaConf

from ctxbench.llm.base import ChatResult, UsageMeter
from ctxbench.llm.cache import CallCache, CachedLLM
from ctxbench.llm.openai_compat import OpenAIChatLLM
from ctxbench.llm.token_count import token_counts_record
from ctxbench.models.loading import ModelLoadError, smollm2_dir

from local_http import LocalServer, send_json_bytes, servers
from ctxbench.config.compose import option_config

MSGS = [{"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "Where is the Eiffel Tower, and how tall is it?"}]
REPLY = "In Paris; it is about 330 metres tall."
ESTIMATE_LINE = "no tokenizer for model"


class UsageServer(LocalServer):
    """Answers every chat call with :data:`REPLY`, with ``usage`` (a dict) or without it (None)."""

    def __init__(self, usage):
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                body = {"choices": [{"message": {"role": "assistant", "content": REPLY}, "finish_reason": "stop"}]}
                if usage is not None:
                    body["usage"] = usage
                payload = json.dumps(body).encode()
                send_json_bytes(self, payload)

        self.serve(Handler)


@pytest.fixture
def server():
    with servers(UsageServer) as make:
        yield make


@pytest.fixture
def no_tiktoken(monkeypatch):
    """A tiktoken that knows no model name and whose cl100k_base would count 1 token for anything:
    a count that used the default encoding would show."""
    fake = types.ModuleType("tiktoken")

    def encoding_for_model(name):
        raise KeyError(name)

    class One:
        name = "cl100k_base"

        def encode(self, text, **kw):
            return [0]

    fake.encoding_for_model = encoding_for_model
    fake.encoding_name_for_model = encoding_for_model
    fake.get_encoding = lambda name: One()
    monkeypatch.setitem(sys.modules, "tiktoken", fake)


def make_llm(url, model="my-served-model", **kw):
    cfg = {"name": "openai", "model": model, "base_url": url, "api_key_env": None, "cache": False,
           "max_retries": 0, "timeout_s": 5, **kw}
    return OpenAIChatLLM(option_config("llm", cfg))


def estimate_warnings(capsys) -> list[str]:
    return [ln for ln in capsys.readouterr().err.splitlines() if ESTIMATE_LINE in ln]


def test_usage_from_the_server_is_labelled_server(server, capsys):
    s = server({"prompt_tokens": 17, "completion_tokens": 9})
    llm = make_llm(s.url, tokenizer=str(smollm2_dir()))
    r = llm.chat(MSGS)
    assert (r.prompt_tokens, r.completion_tokens, r.token_source) == (17, 9, "server")
    assert llm.token_count_source() == "tokenizer"
    assert token_counts_record(llm) == {"calls_by_source": {"server": 1}, "count_tokens": "tokenizer",
                                        "tokenizer": str(smollm2_dir())}
    assert estimate_warnings(capsys) == []


def test_without_usage_llm_tokenizer_counts_and_says_so(server, capsys):
    from transformers import AutoTokenizer

    s = server(None)
    llm = make_llm(s.url, tokenizer=str(smollm2_dir()))
    r = llm.chat(MSGS)
    tok = AutoTokenizer.from_pretrained(str(smollm2_dir()))
    n = lambda t: len(tok(t, add_special_tokens=False)["input_ids"])  # noqa: E731
    assert r.token_source == "tokenizer"
    assert r.prompt_tokens == sum(n(m["content"]) for m in MSGS) and r.completion_tokens == n(REPLY)
    assert r.completion_tokens != math.ceil(len(REPLY) / 4)  # the test tells the two apart
    assert llm.count_tokens(REPLY) == n(REPLY)  # systems' context counts use the same tokenizer
    assert estimate_warnings(capsys) == []


def test_a_half_reported_usage_is_not_server(server):
    s = server({"prompt_tokens": 17})
    llm = make_llm(s.url, tokenizer=str(smollm2_dir()))
    r = llm.chat(MSGS)
    assert r.prompt_tokens == 17 and r.token_source == "tokenizer"


def test_an_unknown_model_without_usage_or_tokenizer_is_an_estimate_warned_once(server, capsys, no_tiktoken):
    s = server(None)
    llm = make_llm(s.url)
    rs = [llm.chat(MSGS), llm.chat(MSGS, phase="construction")] + llm.chat_batch([MSGS, MSGS])
    for r in rs:
        assert r.token_source == "estimate"
        assert r.prompt_tokens == sum(math.ceil(len(m["content"]) / 4) for m in MSGS)  # not cl100k's 1 a message
        assert r.completion_tokens == math.ceil(len(REPLY) / 4)
    assert llm.token_count_source() == "estimate" and llm.count_tokens("abcde") == 2
    warned = estimate_warnings(capsys)
    assert len(warned) == 1  # once, for all calls
    assert "'my-served-model'" in warned[0] and "tiktoken does not know the name" in warned[0]
    assert "llm.tokenizer=<hf id or folder of the served model's tokenizer>" in warned[0]
    assert token_counts_record(llm) == {"calls_by_source": {"estimate": 4}, "count_tokens": "estimate",
                                        "tokenizer": None}


def test_tiktoken_counts_a_model_it_knows(server, monkeypatch):
    fake = types.ModuleType("tiktoken")

    class Words:
        name = "o200k_base"

        def encode(self, text, disallowed_special=()):
            return text.split()

    def encoding_for_model(name):
        if name != "gpt-4o-mini":
            raise KeyError(name)
        return Words()

    fake.encoding_for_model = encoding_for_model
    monkeypatch.setitem(sys.modules, "tiktoken", fake)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "/nonexistent-but-named")  # offline runs read only a named cache
    s = server(None)
    llm = make_llm(s.url, model="gpt-4o-mini")
    r = llm.chat(MSGS)
    assert r.token_source == "tokenizer" and r.completion_tokens == len(REPLY.split())
    assert token_counts_record(llm)["tokenizer"] == "tiktoken:o200k_base"


def test_a_tokenizer_that_cannot_load_fails_preflight_naming_the_key(server, tmp_path):
    s = server(None)
    with pytest.raises(ModelLoadError, match=r"llm.tokenizer='.*nowhere'"):
        make_llm(s.url, tokenizer=str(tmp_path / "nowhere")).preflight()


def test_the_meter_counts_calls_per_source_and_phase():
    m = UsageMeter()
    m.add("construction", ChatResult("a", 1, 1, token_source="server"))
    m.add("construction", ChatResult("a", 1, 1, token_source="estimate"))
    m.add("answer", ChatResult("a", 1, 1, token_source="server"))
    m.add("answer", ChatResult("", 0, 0, failed=True, token_source="server"))  # no counts: not sourced
    m.add("answer", ChatResult("a", 1, 1))  # a backend that does not say
    snap = m.snapshot()
    assert snap["construction"]["by_source"] == {"server": 1, "estimate": 1}
    assert snap["answer"]["by_source"] == {"server": 1, "unknown": 1}
    assert snap["answer"]["calls"] == 3 and json.loads(json.dumps(snap)) == snap
    snap["answer"]["by_source"]["server"] = 99  # a copy, not the meter's own dict
    assert m.get("answer").by_source["server"] == 1


def test_cached_replies_keep_the_source_of_the_original_call(server, tmp_path, no_tiktoken):
    s = server(None)
    llm = CachedLLM(make_llm(s.url), tmp_path / "c.sqlite", backend="openai")
    first, again = llm.chat(MSGS), llm.chat(MSGS)
    assert (first.cached, again.cached) == (False, True)
    assert first.token_source == again.token_source == "estimate"
    assert (again.prompt_tokens, again.completion_tokens) == (first.prompt_tokens, first.completion_tokens)
    assert token_counts_record(llm)["calls_by_source"] == {"estimate": 2}  # through the cache wrapper
    assert token_counts_record(llm)["count_tokens"] == "estimate"


OLD_ROW = "INSERT INTO calls (key, text, prompt_tokens, completion_tokens, created, flags) VALUES "


def test_a_cache_row_without_a_source_says_cache(tmp_path):
    path = tmp_path / "c.sqlite"
    c = CallCache(path)
    c.put("new", ChatResult("Paris", 3, 1, truncated=True, constrained=True, token_source="tokenizer"))
    with sqlite3.connect(path) as db:  # rows as the cache wrote them before sources were stored
        db.execute(OLD_ROW + "('old', 'Paris', 3, 1, 0, 1)")
        db.execute(OLD_ROW + "('older', 'Paris', 3, 1, 0, NULL)")
        db.execute(OLD_ROW + "('bad', 'Paris', 3, 1, 0, 99)")
    new = c.get("new")
    assert (new.token_source, new.truncated, new.constrained) == ("tokenizer", True, True)
    old = c.get("old")
    assert (old.token_source, old.truncated, old.constrained) == ("cache", True, False)
    assert c.get("older").token_source == "cache"
    assert c.get("bad") is None  # not a row the cache writes: asked again


def test_hf_counts_are_tokenizer_counts():
    from ctxbench.llm.hf import HFChatLLM

    llm = HFChatLLM(option_config("llm", {"name": "hf", "model": "tiny", "context_window": 96, "batch_size": 2}))
    r = llm.chat([{"role": "user", "content": "Where is Paris?"}], max_new_tokens=3)
    assert r.token_source == "tokenizer" and llm.token_count_source() == "tokenizer"
    rec = token_counts_record(llm)
    assert rec["calls_by_source"] == {"tokenizer": 1} and rec["count_tokens"] == "tokenizer"
    assert isinstance(rec["tokenizer"], str) and rec["tokenizer"]


def test_offline_runs_never_let_tiktoken_fetch_its_encoding(monkeypatch):
    """HF_HUB_OFFLINE=1 (tests, CI) and no TIKTOKEN_CACHE_DIR: tiktoken is not asked to load an encoding
    (it would download it), and the reason says how to name a cache that holds it."""
    from ctxbench.llm.token_count import tiktoken_for

    fake = types.ModuleType("tiktoken")
    fake.encoding_name_for_model = lambda name: "o200k_base"

    def encoding_for_model(name):
        raise AssertionError("tiktoken was asked to load (and so fetch) its encoding offline")

    fake.encoding_for_model = encoding_for_model
    monkeypatch.setitem(sys.modules, "tiktoken", fake)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)
    enc, label, why = tiktoken_for("gpt-4o-mini")
    assert enc is None and label is None and "TIKTOKEN_CACHE_DIR" in why
