"""A hub id that is not cached fails at once, in one line, offline or without network (no ~50 s of retries)."""
from __future__ import annotations

import time

import pytest
from omegaconf import OmegaConf

from ctxbench.models import hub
from ctxbench.models.loading import ModelLoadError, load_model
from ctxbench.config.compose import option_config

MISSING = "ctxbench-test/not-a-cached-model"
NO_NETWORK = {"HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "0", "HF_ENDPOINT": "http://127.0.0.1:9"}


@pytest.fixture
def empty_hf_cache(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    return tmp_path / "hub"


def test_no_network_fails_at_once_in_one_line(empty_hf_cache, monkeypatch):
    for k, v in NO_NETWORK.items():
        monkeypatch.setenv(k, v)
    t0 = time.perf_counter()
    with pytest.raises(ModelLoadError) as e:
        load_model(option_config("model", {"name": "hf", "path": MISSING}))
    assert time.perf_counter() - t0 < 5
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith(f"model.path={MISSING!r} could not be loaded: it is not in the local Hugging Face cache "
                          "and 127.0.0.1:9 cannot be reached")


def test_offline_variable_is_named(empty_hf_cache, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.setattr(hub, "reachable", lambda url, timeout=1.0: pytest.fail("offline mode needs no network check"))
    assert hub.unreachable_reason(MISSING) == ("it is not in the local Hugging Face cache and TRANSFORMERS_OFFLINE "
                                               "is set (offline mode)")


def test_cached_model_is_not_checked(empty_hf_cache, monkeypatch):
    snap = empty_hf_cache / "models--ctxbench-test--cached" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    (empty_hf_cache / "models--ctxbench-test--cached" / "refs").mkdir()
    (empty_hf_cache / "models--ctxbench-test--cached" / "refs" / "main").write_text("abc")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hub, "reachable", lambda url, timeout=1.0: pytest.fail("a cached model needs no check"))
    assert hub.unreachable_reason("ctxbench-test/cached") is None


def test_reachable_times_out_quickly(monkeypatch):
    assert hub.reachable("http://127.0.0.1:9") is False  # refused
    def hang(*a, **k):  # a DNS lookup that hangs, then fails
        time.sleep(3)
        raise OSError("timed out")

    monkeypatch.setattr(hub.socket, "create_connection", hang)
    t0 = time.perf_counter()
    assert hub.reachable("https://huggingface.co", timeout=0.5) is False
    assert time.perf_counter() - t0 < 1.5


def test_cli_without_network_is_one_line(cli, tmp_path):
    env = {**NO_NETWORK, "HF_HOME": str(tmp_path / "hf")}
    r = cli("train", "model=hf", f"model.path={MISSING}", f"hydra.run.dir={tmp_path / 'run'}", env=env, timeout=40)
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith(
        f"ctxbench: error: model.path={MISSING!r} could not be loaded: it is not in the local Hugging Face cache")
