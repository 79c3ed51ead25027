"""``needs_embedder`` lives on the system's class only (issue 52): no config key says it, and the evaluator
builds an embedder only for a class that asks for one."""
from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from ctxbench.__main__ import check_overrides
from ctxbench.core import registry
from ctxbench.core.system import System
from ctxbench.evaluation import systems

CONF = Path(__file__).resolve().parents[1] / "conf"


def test_needs_embedder_is_an_unknown_config_key(capsys):
    with pytest.raises(SystemExit) as e:
        check_overrides("eval", ["memory=rag", "memory.needs_embedder=false"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("ctxbench: error: unknown config key 'memory.needs_embedder'"), err


def test_the_classes_say_whether_they_need_an_embedder():
    assert System.needs_embedder is False  # the default of every system
    needs = {n: registry.get("memory", n).needs_embedder for n in registry.names("memory")}
    assert needs["rag"] and needs["mem0"] and needs["amem"]
    assert not needs["readagent"] and not needs["no_context"] and not needs["full_context"]


@pytest.mark.parametrize("name,embedded", [("readagent", False), ("no_context", False), ("rag", True)])
def test_only_a_class_that_needs_one_gets_an_embedder(monkeypatch, name, embedded):
    built: list[str] = []

    def fake_build(kind, cfg, **deps):
        built.append(kind)
        return f"a {kind}"

    monkeypatch.setattr(registry, "build", fake_build)
    monkeypatch.setattr(systems, "preflight", lambda llm: None)
    monkeypatch.setattr("ctxbench.llm.shared.SharedLLM", lambda inner: type("Shared", (), {"inner": inner})())
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose(config_name="eval", overrides=[f"memory={name}", "embedder=minilm"])
    make, _, _ = systems._memory_builder(cfg, cfg.memory)
    assert make.keywords["embedder"] == ("a embedder" if embedded else None)
    assert ("embedder" in built) == embedded


def test_a_store_recorded_with_the_old_key_still_resumes(tmp_path):
    """A store built when the config still held needs_embedder resumes under the config without it; another
    change is still refused."""
    from omegaconf import OmegaConf

    from ctxbench.memory.stores.records import RecordStore, StoreError, store_config

    cfg = OmegaConf.create({"name": "rag", "k": 3})
    store = RecordStore(tmp_path / "rag.sqlite")
    old = store_config(OmegaConf.merge(cfg, {"needs_embedder": True}), "m")
    old["config"]["memory"]["needs_embedder"] = True  # as written before the key left the config
    from ctxbench.core.plain import fingerprint

    old["fingerprint"] = fingerprint(old["config"])
    store.set_state("h", "_config", old)
    store.set_progress("h", 1)
    store.commit()
    store.check_resume("h", 2, cfg, "m")  # no error
    with pytest.raises(StoreError, match="k 3 → 4"):
        store.check_resume("h", 2, OmegaConf.merge(cfg, {"k": 4}), "m")
