"""API keys never land in saved configs, logs, results or wandb."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from ctxbench.core.secrets import redact, scrub_text

KEY = "sk-test-DoNotLeak-0123456789abcdef"


@pytest.fixture
def fake_openai():
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):
            n = int(self.headers.get("Content-Length", 0))
            self.rfile.read(n)
            body = json.dumps({"choices": [{"message": {"content": "Not mentioned in the conversation"}}],
                               "usage": {"prompt_tokens": 11, "completion_tokens": 5}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    srv = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_port}/v1"
    srv.shutdown()


def all_text(run: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in run.rglob("*") if p.is_file())


def test_eval_with_openai_key_leaves_no_trace(cli, tmp_path, fake_openai):
    run = tmp_path / "run"
    r = cli("eval", "memory=no_context", "dataset=locomo_sample", "llm=openai", f"llm.base_url={fake_openai}",
            "llm.cache=false", "limit=3", "progress=false", f"+llm.api_key={KEY}", f"hydra.run.dir={run}",
            env={"OPENAI_API_KEY": KEY})
    assert r.returncode == 0, r.stderr[-2000:]
    assert (run / "results.json").exists() and (run / ".hydra" / "config.yaml").exists()
    text = all_text(run)
    assert KEY not in text
    assert KEY not in r.stdout + r.stderr
    assert "api_key_env: OPENAI_API_KEY" in (run / ".hydra" / "config.yaml").read_text()


def test_train_wandb_offline_config_has_no_key(cli, tmp_path):
    pytest.importorskip("wandb")
    run = tmp_path / "run"
    r = cli("train", "model=tiny", "trainer.max_steps=2", "trainer.progress=false", "logger=wandb",
            f"+logger.api_key={KEY}", f"hydra.run.dir={run}", env={"WANDB_MODE": "offline", "WANDB_API_KEY": KEY})
    assert r.returncode == 0, r.stderr[-2000:]
    assert list(run.rglob("wandb/offline-run-*")), "wandb wrote no offline run"
    assert KEY not in all_text(run)
    assert KEY not in r.stdout + r.stderr


def test_redact_and_scrub():
    cfg = {"llm": {"api_key": KEY, "api_key_env": "OPENAI_API_KEY", "max_new_tokens": 5},
           "tokenizer": {"pad_token": "<pad>"}, "nested": [{"password": "hunter2"}]}
    out = redact(cfg)
    assert out["llm"]["api_key"] == "***" and out["llm"]["api_key_env"] == "OPENAI_API_KEY"
    assert out["llm"]["max_new_tokens"] == 5 and out["tokenizer"]["pad_token"] == "<pad>"
    assert out["nested"][0]["password"] == "***"
    assert KEY not in scrub_text(f"calling with {KEY}")


def test_scrub_known_key_shapes_and_given_values():
    from ctxbench.core.secrets import scrub_text

    hf = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz012345"
    text = (f"Authorization: Bearer abc.def-ghi_123456 from https://user:hunter22@host/v1 "
            f"token {hf} custom=my-own-server-pass-42")
    out = scrub_text(text, extra=["my-own-server-pass-42"])
    for secret in ("abc.def-ghi_123456", "hunter22", hf, "my-own-server-pass-42"):
        assert secret not in out
    assert "https://***@host/v1" in out and "Bearer ***" in out
    assert scrub_text("pad_token max_new_tokens=64 gpt-4o-mini") == "pad_token max_new_tokens=64 gpt-4o-mini"


def test_check_env_name_hides_a_key_given_as_the_name():
    from ctxbench.core.secrets import check_env_name

    assert check_env_name("llm.api_key_env", "OPENAI_API_KEY") == "OPENAI_API_KEY"
    assert check_env_name("llm.api_key_env", "hf_token") == "hf_token"  # a real variable name
    for bad in (KEY, "sk_" + "a" * 30, "hf_" + "Ab1" * 11, "not a name", "1ABC"):
        with pytest.raises(ValueError, match=r"must NAME an environment variable .*\(value hidden\)") as info:
            check_env_name("llm.api_key_env", bad)
        assert bad not in str(info.value)
