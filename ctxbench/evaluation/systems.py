"""How ``eval`` builds what it evaluates: the system of ``method=`` / ``memory=``, one per history.

A method loads its model once and answers every history. A memory system is built once per history
on the one shared LLM backend (:class:`ctxbench.llm.shared.SharedLLM`) and embedder, with its
stores in ``<run>/stores/<history id>/`` — so histories can be ingested side by side
(:mod:`ctxbench.evaluation.pool`) and each resumes from its own files. Every system answers with the
answer prompt of ``qa_prompt=`` (:func:`ctxbench.qa.get_prompt`), looked up before anything loads.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from ctxbench.data.errors import DataError
from ctxbench.llm.base import preflight
from ctxbench.core.system import System


class HistorySystems:
    """The systems ``eval`` answers with: a new one per history (``make(history_id)``), or one for all.

    ``prototype`` describes the run (answer prompt, config, placement, ``answer_writes_state``);
    with one system for all it is that system. A per-history instance is closed once its
    history's last question is answered.
    """

    def __init__(self, make: Any, prototype: System, per_history: bool = True):
        self.make, self.prototype, self.per_history = make, prototype, per_history

    @classmethod
    def one(cls, system: System) -> "HistorySystems":
        return cls(lambda hid: system, system, per_history=False)

    def get(self, history_id: str) -> System:
        return self.make(history_id) if self.per_history else self.prototype

    def release(self, system: System) -> None:
        if self.per_history:
            system.close()


def build_system(cfg: Any, out_dir: Path) -> tuple[System, Any, str]:
    """(system, llm or None, display name) from ``method=`` or ``memory=``, answering with ``qa_prompt=``:
    one system whose stores live in ``out_dir`` (``eval`` itself builds one per history:
    :func:`build_history_systems`).

    The answer prompt (:func:`ctxbench.qa.get_prompt`) is looked up first (a bad name fails before
    anything loads) and handed to the system with :meth:`System.use_prompt`.
    """
    make, llm, name, _ = _system_maker(cfg, out_dir)
    return make(out_dir), llm, name


def build_history_systems(cfg: Any, out_dir: Path) -> tuple[HistorySystems, Any, str]:
    """``eval``'s systems: for ``memory=``, one instance per history with its stores in
    ``out_dir/stores/<history id>/`` (so histories can be ingested side by side, and each resumes
    from its own files); for ``method=``, the one model-backed instance for every history.

    A memory system is built once at once, in a temporary folder, and closed: a bad config fails
    before any question, and that instance describes the run (answer prompt, cap, placement)."""
    import shutil
    import tempfile

    make, llm, name, per_history = _system_maker(cfg, out_dir)
    if not per_history:
        return HistorySystems.one(make(out_dir)), llm, name
    probe_dir = Path(tempfile.mkdtemp(prefix="ctxbench-probe-"))
    try:
        probe = make(probe_dir)
        probe.close()
    finally:
        shutil.rmtree(probe_dir, ignore_errors=True)
    return HistorySystems(lambda hid: make(history_dir(out_dir, hid)), probe), llm, name


def history_dir(out_dir: Path, history_id: str) -> Path:
    """``out_dir/stores/<history id>``: the id made a safe folder name (a hash added when it had to change)."""
    import hashlib
    import re

    safe = re.sub(r"[^A-Za-z0-9._-]", "_", str(history_id))[:80] or "_"
    if safe != str(history_id) or safe in (".", ".."):
        safe += "-" + hashlib.sha1(str(history_id).encode()).hexdigest()[:8]
    return Path(out_dir) / "stores" / safe


def _system_maker(cfg: Any, out_dir: Path) -> tuple[Any, Any, str, bool]:
    """(make(workdir) → System answering with ``qa_prompt=``, llm, name, one per history?)."""
    from ctxbench.qa import get_prompt
    from ctxbench.runs.guard import forced

    prompt = get_prompt(cfg.get("qa_prompt"))
    build_one, llm, name, per_history = _build_system(cfg, out_dir)

    def make(workdir: Path) -> System:
        system = build_one(workdir)
        system.use_prompt(prompt)
        system.force_resume = forced(workdir)
        return system
    return make, llm, name, per_history


def qa_prompt_record(system: System) -> dict[str, Any]:
    """results.json ``qa_prompt``: the prompt's name, version, source and rules, and the answer cap used."""
    explicit = system.explicit_answer_cap() is not None
    return {**system.answer_prompt.record(), "answer_max_tokens": system.answer_max_tokens(),
            "answer_cap_from": system.answer_cap_key if explicit else "qa_prompt"}


def _build_system(cfg: Any, out_dir: Path) -> tuple[Any, Any, str, bool]:
    """(build(workdir) → the system of ``method=`` or ``memory=``, llm, name, one per history?).

    A method is built once (it loads its model): ``build`` returns that instance. A memory
    system is built per workdir on the one shared LLM (:class:`ctxbench.llm.shared.SharedLLM`)
    and embedder.

    The cheap checks run first: an OpenAI-compatible server is asked whether it is there, knows
    the key and the model (``preflight``) before the embedder loads.
    """
    from ctxbench.core.registry import build

    if cfg.get("checkpoint") and not cfg.get("method"):  # never evaluate memory=... with a checkpoint ignored
        from ctxbench.training.checkpoint import CheckpointError, resolve_checkpoint, saved_configs

        name = saved_configs(resolve_checkpoint(cfg.checkpoint))["method"]["name"]
        raise CheckpointError(f"checkpoint={cfg.checkpoint} is a trained method: pass method={name} to evaluate it")
    if cfg.get("method"):
        import torch

        from ctxbench.models.loading import load_for_eval, model_device

        if cfg.get("checkpoint"):  # its method and model config, checked before the model loads
            from ctxbench.training.checkpoint import apply_checkpoint_config, hydra_overrides

            apply_checkpoint_config(cfg, cfg.checkpoint, hydra_overrides())
        bundle = load_for_eval(cfg.model)  # on model.device, in model.dtype
        system = build("method", cfg.method, bundle=bundle)
        if cfg.get("checkpoint"):
            from ctxbench.training.checkpoint import load_trained

            load_trained(system, cfg.checkpoint)
        if isinstance(system, torch.nn.Module):  # what the method added on the CPU joins its model
            system.to(model_device(bundle.model))
        system.eval()
        return (lambda workdir: system), None, f"method={cfg.method.name}", False
    mem = cfg.get("memory")
    if not mem:
        raise DataError("eval", "choose a system: memory=NAME or method=NAME", field="memory")
    from ctxbench.llm.shared import SharedLLM

    llm = SharedLLM(build("llm", cfg.llm))
    preflight(llm.inner)
    embedder = None
    if mem.get("needs_embedder", False):
        if not cfg.get("embedder"):
            raise DataError("eval", f"memory={mem.name} needs an embedder (embedder=minilm)", field="embedder")
        embedder = build("embedder", cfg.embedder)

    if "progress" in mem and not cfg.get("progress", True):  # progress=false silences every bar
        mem = OmegaConf.merge(mem, {"progress": False})

    def build_memory(workdir: Path) -> System:
        return build("memory", mem, llm=llm, embedder=embedder, workdir=workdir)
    return build_memory, llm, f"memory={mem.name}", True


def resolve_concurrency(value: Any, llm: Any) -> tuple[int, str]:
    """(workers, where the number came from) for ``concurrency=``: ``auto`` takes the shared backend's
    (``llm.concurrency`` of ``llm=openai``, ``llm.batch_size`` of ``llm=hf``); a method decoding with
    its own model (no shared backend) answers one question at a time."""
    if llm is None or not callable(getattr(llm, "concurrency", None)):
        return 1, "method (its own model: one question at a time)"
    if value is None or str(value) == "auto":
        n = llm.concurrency()
        return n, "llm.batch_size" if llm.batch_size() > 1 else "llm.concurrency"
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise DataError("eval", f"concurrency={value!r}: expected auto or an integer >= 1", field="concurrency")
    return int(value), "concurrency"
