"""llm=openai fails loudly (unreachable, 401/403, 404, breaker), preflight, and keys never leak.

Every test talks to a real HTTP server on 127.0.0.1 (a thread), or to a port nobody listens on.
"""
from __future__ import annotations

import json
import socket
import time
from http.server import BaseHTTPRequestHandler

import pytest
from omegaconf import OmegaConf

from ctxbench.llm.base import LLMUnavailable, preflight
from ctxbench.llm.cache import CachedLLM
from ctxbench.llm.openai_compat import OpenAIChatLLM
from ctxbench.models.loading import ModelLoadError

from local_http import LocalServer
from ctxbench.config.compose import option_config

MSGS = [{"role": "user", "content": "Where is Paris?"}]
KEY = "sk-test-DoNotLeak-0123456789abcdef"


def reply(content, usage=True) -> bytes:
    body = {"choices": [{"message": {"role": "assistant", "content": content}, "finish_reason": "stop"}]}
    if usage:
        body["usage"] = {"prompt_tokens": 11, "completion_tokens": 3}
    return json.dumps(body).encode()


def echo_key_401() -> tuple[int, bytes]:
    msg = f"Incorrect API key provided: {KEY}. You can find your API key at https://platform.openai.com/account."
    return 401, json.dumps({"error": {"message": msg}}).encode()


class Server(LocalServer):
    """Replays a script of (status, body) per POST; GET /models answers ``models`` (status, body)."""

    def __init__(self, script, models=(404, b'{"error": "no such route"}')):
        self.script, self.models, self.requests = list(script), models, []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, status, payload):
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self):
                outer.requests.append({"method": "GET", "path": self.path,
                                       "auth": self.headers.get("Authorization")})
                if outer.models[0] == "sleep":
                    time.sleep(outer.models[1])
                    return
                self._send(*outer.models)

            def do_POST(self):
                n = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(n))
                outer.requests.append({"method": "POST", "path": self.path, "body": body})
                self._send(*(outer.script.pop(0) if outer.script else (200, reply("In France"))))

        self.serve(Handler)

    @property
    def posts(self):
        return [r for r in self.requests if r["method"] == "POST"]


@pytest.fixture
def server():
    made = []

    def make(script=(), **kw):
        s = Server(script, **kw)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def closed_port_url() -> str:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}/v1"


def make_llm(url, monkeypatch, **kw):
    monkeypatch.setenv("CTXBENCH_TEST_KEY", KEY)
    cfg = {"name": "openai", "model": "m", "base_url": url, "api_key_env": "CTXBENCH_TEST_KEY",
           "timeout_s": 2, "max_retries": 3, "backoff_s": 0.2, "backoff_max_s": 0.5, "cache": False, **kw}
    return OpenAIChatLLM(option_config("llm", cfg))


def raises_fast(fn, match):
    t = time.perf_counter()
    with pytest.raises(LLMUnavailable, match=match) as info:
        fn()
    assert time.perf_counter() - t < 2.0, "a fatal error was retried"
    msg = str(info.value)
    assert "\n" not in msg and KEY not in msg
    return msg


# ---- fatal at once ------------------------------------------------------------------------------

def test_connection_refused_is_fatal_at_once(monkeypatch):
    url = closed_port_url()
    llm = make_llm(url, monkeypatch, backoff_s=1.0)
    msg = raises_fast(lambda: llm.chat(MSGS), "connection refused")
    assert f"{url}/chat/completions" in msg and "llm.base_url" in msg


def test_unknown_host_is_fatal_at_once(monkeypatch):
    llm = make_llm("http://no-such-host.invalid:8080/v1", monkeypatch, backoff_s=1.0)
    raises_fast(lambda: llm.chat(MSGS), "cannot reach .*host not found")


def test_connection_lost_after_a_success_is_retried(server, monkeypatch):
    s = server()
    llm = make_llm(s.url, monkeypatch, max_retries=2, backoff_s=0.01, backoff_max_s=0.02)
    assert llm.chat(MSGS).text == "In France"
    s.close()  # the server goes away mid-run: retried, then a counted failure (not an abort)
    r = llm.chat(MSGS)
    assert r.failed and "connection refused" in r.error
    assert llm.meter.get("answer").failures == 1


def test_401_with_an_echoed_key_is_fatal_and_scrubbed(server, monkeypatch):
    s = server([echo_key_401()] * 5)
    msg = raises_fast(lambda: make_llm(s.url, monkeypatch).chat(MSGS), "HTTP 401 Unauthorized")
    assert "$CTXBENCH_TEST_KEY" in msg and "Incorrect API key provided" in msg
    assert len(s.posts) == 1


def test_403_is_fatal(server, monkeypatch):
    s = server([(403, b'{"error": "forbidden"}')] * 5)
    raises_fast(lambda: make_llm(s.url, monkeypatch).chat(MSGS), "HTTP 403 Forbidden")
    assert len(s.posts) == 1


def test_404_names_the_model_and_the_url(server, monkeypatch):
    s = server([(404, b'{"error": {"message": "The model `gpt-5-nope` does not exist"}}')] * 5)
    llm = make_llm(s.url, monkeypatch, model="gpt-5-nope")
    msg = raises_fast(lambda: llm.chat(MSGS), "HTTP 404")
    assert "model 'gpt-5-nope' not found" in msg and f"{s.url}/chat/completions" in msg
    assert "llm.model" in msg and "llm.base_url" in msg and len(s.posts) == 1


def test_batch_stops_at_the_first_fatal_error(server, monkeypatch):
    s = server([echo_key_401()] * 40)
    llm = make_llm(s.url, monkeypatch, concurrency=2)
    raises_fast(lambda: llm.chat_batch([MSGS] * 40), "HTTP 401")
    assert len(s.posts) < 10  # the queued calls were not sent


# ---- retried, then counted ----------------------------------------------------------------------

def test_500_then_200_is_retried(server, monkeypatch):
    s = server([(500, b"boom"), (200, reply("ok"))])
    r = make_llm(s.url, monkeypatch, backoff_s=0.01).chat(MSGS)
    assert (r.text, r.failed) == ("ok", False) and len(s.posts) == 2


def test_content_null_is_a_failed_call(server, monkeypatch):
    s = server([(200, reply(None)), (200, json.dumps({"choices": [{"finish_reason": "length"}]}).encode())])
    llm = make_llm(s.url, monkeypatch)
    r = llm.chat(MSGS)
    assert r.failed and r.text == "" and "content: null" in r.error
    r2 = llm.chat(MSGS)
    assert r2.failed and "content: null" in r2.error and "length" in r2.error
    assert llm.meter.get("answer").failures == 2


def test_breaker_stops_after_consecutive_failures(server, monkeypatch):
    s = server([(400, b'{"error": "bad request"}')] * 10)
    llm = make_llm(s.url, monkeypatch, max_consecutive_failures=3)
    assert llm.chat(MSGS).failed and llm.chat(MSGS).failed
    with pytest.raises(LLMUnavailable, match=r"3 calls in a row failed.*last error: HTTP 400"):
        llm.chat(MSGS)


def test_breaker_counts_only_failures_in_a_row(server, monkeypatch):
    s = server([(400, b"x"), (400, b"x"), (200, reply("ok")), (400, b"x"), (400, b"x"), (400, b"x")])
    llm = make_llm(s.url, monkeypatch, max_consecutive_failures=3)
    results = [llm.chat(MSGS) for _ in range(5)]
    assert [r.failed for r in results] == [True, True, False, True, True]
    with pytest.raises(LLMUnavailable, match="3 calls in a row"):
        llm.chat(MSGS)


# ---- secrets ------------------------------------------------------------------------------------

def test_a_key_echoed_in_a_failed_call_never_reaches_the_result(server, monkeypatch):
    body = json.dumps({"error": "x" * 280 + f" bad request for key {KEY}"}).encode()
    s = server([(400, body), (500, json.dumps({"error": f"upstream said {KEY}"}).encode())] + [(500, b"e")] * 5)
    llm = make_llm(s.url, monkeypatch, max_retries=0)
    for r in (llm.chat(MSGS), llm.chat(MSGS)):
        assert r.failed and "HTTP" in r.error and KEY not in r.error


LOCAL_KEY = "local-secret-0123456789abcdef"  # a self-hosted server's key: no known key shape


def test_the_configured_key_is_scrubbed_even_without_a_known_shape(server, monkeypatch):
    cut = json.dumps({"error": "x" * 268 + f" key {LOCAL_KEY}"}).encode()  # the 300-char detail ends mid-key
    s = server([(400, cut), (401, json.dumps({"error": f"Incorrect API key provided: {LOCAL_KEY}"}).encode())])
    monkeypatch.setenv("MY_SERVER_PASS", LOCAL_KEY)
    llm = make_llm(s.url, monkeypatch, api_key_env="MY_SERVER_PASS", max_retries=0)
    r = llm.chat(MSGS)
    assert r.failed and "xxxx" in r.error and LOCAL_KEY[:10] not in r.error
    with pytest.raises(LLMUnavailable, match="HTTP 401 .*check the key in \\$MY_SERVER_PASS") as info:
        llm.chat(MSGS)
    assert LOCAL_KEY not in str(info.value) and "***" in str(info.value)


def test_api_key_env_holding_the_key_is_refused_without_printing_it(monkeypatch):
    for value in (KEY, "hf_" + "a1B2c3D4e5F6g7H8i9J0kLmNoPqRsT", "my key with spaces"):
        with pytest.raises(ModelLoadError, match=r"llm.api_key_env must NAME an environment variable") as info:
            OpenAIChatLLM(option_config("llm", {"name": "openai", "model": "m", "api_key_env": value}))
        assert value not in str(info.value) and "value hidden" in str(info.value)


def test_cli_prints_one_line_without_the_key(cli, tmp_path):
    r = cli("eval", "memory=no_context", "dataset=locomo_sample", "llm=openai", f"llm.api_key_env={KEY}",
            "limit=1", "progress=false", f"hydra.run.dir={tmp_path / 'run'}")
    assert r.returncode == 2, r.stderr[-2000:]
    assert "ctxbench: error: llm.api_key_env must NAME an environment variable" in r.stderr
    assert KEY not in r.stdout + r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_cli_dead_server_is_one_line(cli, tmp_path):
    url = closed_port_url()
    r = cli("eval", "memory=no_context", "dataset=locomo_sample", "llm=openai", f"llm.base_url={url}",
            "llm.api_key_env=null", "llm.cache=false", "limit=1", "progress=false",
            f"hydra.run.dir={tmp_path / 'run'}")
    assert r.returncode == 2, r.stderr[-2000:]
    assert f"ctxbench: error: llm=openai: cannot reach {url}" in r.stderr and "connection refused" in r.stderr


# ---- preflight ----------------------------------------------------------------------------------

def models(*ids) -> tuple[int, bytes]:
    return 200, json.dumps({"object": "list", "data": [{"id": i, "object": "model"} for i in ids]}).encode()


def test_preflight_passes_when_the_model_is_listed(server, monkeypatch):
    s = server(models=models("gpt-4o-mini", "m"))
    make_llm(s.url, monkeypatch).preflight()
    assert s.requests[0]["path"] == "/v1/models" and s.requests[0]["auth"] == f"Bearer {KEY}"


def test_preflight_404_and_500_are_not_fatal(server, monkeypatch):
    s = server()  # GET /models → 404
    make_llm(s.url, monkeypatch).preflight()
    assert [r["method"] for r in s.requests] == ["GET"]
    make_llm(server(models=(500, b"loading")).url, monkeypatch).preflight()


def test_preflight_no_reply_in_time_is_fatal(server, monkeypatch):
    s = server(models=("sleep", 1.5))
    llm = make_llm(s.url, monkeypatch, preflight_timeout_s=0.3)
    msg = raises_fast(llm.preflight, "no reply from .* within 0.3 s")
    assert "llm.preflight_timeout_s" in msg


def test_preflight_unlisted_model_suggests_the_served_ones(server, monkeypatch):
    s = server(models=models("gpt-4o-mini", "gpt-4o", "o3-mini"))
    llm = make_llm(s.url, monkeypatch, model="gpt-4o-mnii")
    msg = raises_fast(llm.preflight, "model 'gpt-4o-mnii' is not served")
    assert "Did you mean 'gpt-4o-mini'" in msg and "o3-mini" in msg
    make_llm(s.url, monkeypatch, model="gpt-4o-mnii", check_model_listed=False).preflight()  # llama-server


def test_preflight_refused_and_bad_key(server, monkeypatch):
    raises_fast(make_llm(closed_port_url(), monkeypatch).preflight, "cannot reach .*connection refused")
    s = server(models=echo_key_401())
    raises_fast(make_llm(s.url, monkeypatch).preflight, "HTTP 401 Unauthorized")


def test_preflight_through_the_cache_wrapper(server, monkeypatch, tmp_path):
    wrapped = CachedLLM(make_llm(closed_port_url(), monkeypatch), tmp_path / "c.sqlite", backend="openai")
    raises_fast(wrapped.preflight, "connection refused")
    raises_fast(lambda: preflight(wrapped), "connection refused")
