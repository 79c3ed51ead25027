"""LLM backends: OpenAI-compatible HTTP (against a local server), the SQLite cache, local HF."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler

import pytest
from omegaconf import OmegaConf

from ctxbench.llm.cache import CachedLLM, maybe_cached
from ctxbench.llm.openai_compat import OpenAIChatLLM
from ctxbench.models.loading import ModelLoadError
from tests.scripted_llm import ScriptedLLM

from local_http import LocalServer, servers
from ctxbench.config.compose import option_config

MSGS = [{"role": "user", "content": "Where is Paris?"}]


def ok_body(text: str = "In France", usage: bool = True) -> bytes:
    body = {"choices": [{"message": {"role": "assistant", "content": text}}]}
    if usage:
        body["usage"] = {"prompt_tokens": 11, "completion_tokens": 3}
    return json.dumps(body).encode()


class Server(LocalServer):
    """A local server replaying a script of actions, one per request: (status, body) or ('sleep', s)."""

    def __init__(self, script):
        self.script, self.requests, self.active, self.max_active = list(script), [], 0, 0
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                n = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(n))
                with outer.lock:
                    outer.requests.append({"path": self.path, "auth": self.headers.get("Authorization"),
                                           "body": body})
                    action = outer.script.pop(0) if outer.script else (200, ok_body())
                    outer.active += 1
                    outer.max_active = max(outer.max_active, outer.active)
                try:
                    if action[0] == "sleep":
                        time.sleep(action[1])
                        action = (200, ok_body())
                    status, payload = action
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass
                finally:
                    with outer.lock:
                        outer.active -= 1

        self.serve(Handler)


@pytest.fixture
def server():
    with servers(Server) as make:
        yield make


def client(url, monkeypatch, **kw):
    monkeypatch.setenv("CTXBENCH_TEST_KEY", "sk-test-123456789")
    cfg = {"name": "openai", "model": "m", "base_url": url, "api_key_env": "CTXBENCH_TEST_KEY",
           "timeout_s": 0.5, "max_retries": 2, "backoff_s": 0.01, "backoff_max_s": 0.05, "cache": False, **kw}
    return OpenAIChatLLM(option_config("llm", cfg))


def test_openai_retries_429_then_succeeds(server, monkeypatch):
    s = server([(429, b'{"error": "slow down"}'), (200, ok_body())])
    llm = client(s.url, monkeypatch)
    r = llm.chat(MSGS, max_new_tokens=7, phase="answer")
    assert (r.text, r.prompt_tokens, r.completion_tokens, r.failed) == ("In France", 11, 3, False)
    assert len(s.requests) == 2 and s.requests[0]["path"] == "/v1/chat/completions"
    assert s.requests[0]["auth"] == "Bearer sk-test-123456789"
    assert s.requests[0]["body"]["max_tokens"] == 7 and s.requests[0]["body"]["messages"] == MSGS
    assert llm.meter.get("answer").calls == 1 and llm.meter.get("answer").failures == 0


def test_openai_500s_end_in_a_counted_failure(server, monkeypatch):
    s = server([(500, b"boom")] * 3)
    llm = client(s.url, monkeypatch)
    r = llm.chat(MSGS, phase="construction")
    assert r.failed and "HTTP 500" in r.error and len(s.requests) == 3  # 1 + max_retries
    c = llm.meter.get("construction")
    assert (c.calls, c.failures, c.prompt_tokens) == (1, 1, 0)


def test_openai_malformed_json_is_retried(server, monkeypatch):
    s = server([(200, b"{not json"), (200, b'{"choices": []}'), (200, ok_body("ok", usage=False))])
    llm = client(s.url, monkeypatch)
    r = llm.chat(MSGS)
    assert r.text == "ok" and not r.failed and len(s.requests) == 3
    assert r.completion_tokens == 1 and r.prompt_tokens == 4  # no usage field: ~4 chars per token


def test_openai_timeout_is_retried(server, monkeypatch):
    s = server([("sleep", 1.5), (200, ok_body())])
    llm = client(s.url, monkeypatch, timeout_s=0.3)
    t = time.perf_counter()
    r = llm.chat(MSGS)
    assert not r.failed and r.text == "In France" and len(s.requests) == 2
    assert time.perf_counter() - t < 1.4  # did not wait for the slow reply


def test_openai_client_errors_fail_at_once(server, monkeypatch):
    s = server([(400, b'{"error": "bad model"}')])
    r = client(s.url, monkeypatch).chat(MSGS)
    assert r.failed and "HTTP 400" in r.error and len(s.requests) == 1


def test_openai_batch_runs_concurrently(server, monkeypatch):
    s = server([("sleep", 0.3)] * 4)
    llm = client(s.url, monkeypatch, concurrency=4, timeout_s=2)
    t = time.perf_counter()
    rs = llm.chat_batch([MSGS] * 4)
    assert [r.text for r in rs] == ["In France"] * 4
    assert s.max_active >= 2 and time.perf_counter() - t < 1.1


def test_openai_key_comes_from_the_named_env_var(monkeypatch):
    monkeypatch.delenv("CTXBENCH_MISSING_KEY", raising=False)
    with pytest.raises(ModelLoadError, match="CTXBENCH_MISSING_KEY"):
        OpenAIChatLLM(option_config("llm", {"name": "openai", "model": "m", "api_key_env": "CTXBENCH_MISSING_KEY"}))
    llm = OpenAIChatLLM(option_config("llm", {"name": "openai", "model": "m", "api_key_env": None, "base_url": "http://127.0.0.1:1"}))
    assert llm._api_key is None


def test_openai_json_mode_sends_response_format(server, monkeypatch):
    s = server([(200, ok_body('{"label": "CORRECT"}'))])
    client(s.url, monkeypatch, response_format="json_schema").chat(MSGS, json_mode=True)  # no probe
    assert s.requests[0]["body"]["response_format"] == {"type": "json_object"}


# ---- cache -------------------------------------------------------------------------------------

def test_cache_hits_skip_the_backend_and_keep_token_counts(tmp_path):
    inner = ScriptedLLM(["first", "second", "third"])
    llm = CachedLLM(inner, tmp_path / "c.sqlite", backend="scripted")
    a = llm.chat(MSGS, max_new_tokens=5)
    b = llm.chat(MSGS, max_new_tokens=5)
    assert (a.text, a.cached, b.text, b.cached) == ("first", False, "first", True)
    assert b.prompt_tokens == a.prompt_tokens == 3 and len(inner.calls) == 1
    assert llm.chat(MSGS, max_new_tokens=6).text == "second"  # other params: a miss
    assert llm.meter.get("answer").calls == 3 and llm.meter.get("answer").cached == 1
    again = CachedLLM(ScriptedLLM(["never"]), tmp_path / "c.sqlite", backend="scripted")  # persisted
    assert again.chat(MSGS, max_new_tokens=5).text == "first"


def test_cache_does_not_store_failures_and_batches_mix_hits(tmp_path):
    inner = ScriptedLLM(["x", "y", "z"], fail_on={0})
    llm = CachedLLM(inner, tmp_path / "c.sqlite", backend="scripted")
    assert llm.chat(MSGS).failed
    assert llm.chat(MSGS).text == "x"  # retried, now cached
    other = [{"role": "user", "content": "other"}]
    rs = llm.chat_batch([MSGS, other])
    assert [r.text for r in rs] == ["x", "y"] and [r.cached for r in rs] == [True, False]


def test_maybe_cached_respects_the_flag(tmp_path):
    inner = ScriptedLLM("a")
    assert maybe_cached(inner, option_config("llm", {"name": "hf", "cache": False})) is inner
    wrapped = maybe_cached(inner, option_config("llm", {"name": "hf", "cache_path": str(tmp_path / "x.sqlite")}))
    assert isinstance(wrapped, CachedLLM) and wrapped.context_window == inner.context_window


# ---- local HF backend (tiny random model) -------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_llm():
    from ctxbench.llm.hf import HFChatLLM

    return HFChatLLM(option_config("llm", {"name": "hf", "model": "tiny", "context_window": 96, "batch_size": 2}))


def test_hf_counts_tokens_with_the_tokenizer(tiny_llm):
    r = tiny_llm.chat(MSGS, max_new_tokens=5)
    assert r.prompt_tokens == len(tiny_llm.encode_chat(MSGS))
    assert 1 <= r.completion_tokens <= 5 and not r.failed
    assert tiny_llm.count_tokens("abc") == 3  # byte-level tokenizer
    assert tiny_llm.meter.get("answer").prompt_tokens >= r.prompt_tokens


def test_hf_batch_matches_single_calls(tiny_llm):
    batch = [MSGS, [{"role": "user", "content": "A much longer question about Paris and France?"}]]
    singles = [tiny_llm.chat(m, max_new_tokens=4) for m in batch]
    rs = tiny_llm.chat_batch(batch, max_new_tokens=4)
    assert [r.prompt_tokens for r in rs] == [r.prompt_tokens for r in singles]
    assert [r.text for r in rs] == [r.text for r in singles]


def test_hf_cuts_prompts_longer_than_the_window(tiny_llm):
    before = tiny_llm.truncated_calls
    r = tiny_llm.chat([{"role": "user", "content": "x" * 300}], max_new_tokens=6)
    assert r.prompt_tokens <= 96 - 6 and tiny_llm.truncated_calls == before + 1
