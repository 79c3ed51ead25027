"""How ``eval`` builds what it evaluates: the system of ``method=`` / ``memory=``, one per history.

A method loads its model once and answers every history. A memory system is built once per history
on the one shared LLM backend (:class:`ctxbench.llm.shared.SharedLLM`) and embedder, with its
stores in ``<run>/stores/<history id>/`` — so histories can be ingested side by side
(:mod:`ctxbench.evaluation.pool`) and each resumes from its own files. Every system answers with the
answer prompt of ``qa_prompt=`` (:func:`ctxbench.qa.get_prompt`), looked up before anything loads;
under ``task=compression`` each is set to the task's ratio as it is built (:mod:`.protocol`).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from ctxbench.core.errors import ConfigError
from ctxbench.data.errors import DataError
from ctxbench.llm.base import preflight
from ctxbench.core.system import ContractError, System


class HistorySystems:
    """The systems ``eval`` answers with: a new one per history (``make(history_id)``), or one for all.

    ``first`` describes the run (answer prompt, cap, placement, ``answer_writes_state``): the
    system built first (:meth:`build_first`, before any question), which then answers its own
    history; with one system for all it is that system. A per-history instance is closed once its
    history's last question is answered, so a system is built once per history, never more.

    ``embedder``: the run's embedder (the lent backend serves it). While a run lends its backend
    (``lender``: :class:`ctxbench.evaluation.lend.Lender`, set by the run loop), every system is handed
    its address as it is built (a system whose class borrows it: :mod:`ctxbench.evaluation.lend`).
    """

    def __init__(self, make: Any, per_history: bool = True, embedder: Any = None):
        self.make, self.per_history, self.embedder = make, per_history, embedder
        self.first: System | None = None
        self.lender: Any = None
        self.lent_record: dict[str, Any] | None = None  # results.json lent_backend of the last run (if lent)
        self._built: dict[str, System] = {}  # built ahead of their history's ingest (the first)

    @classmethod
    def one(cls, system: System) -> "HistorySystems":
        systems = cls(None, per_history=False, embedder=getattr(system, "embedder", None))
        systems.first = _checked(system)
        return systems

    def build_first(self, history_id: str) -> System:
        """The first history's system, built now (a bad config fails before any question)."""
        if self.first is None:
            self.first = self._built[history_id] = _checked(self.make(history_id))
        return self._lent(self.first)

    def get(self, history_id: str) -> System:
        if not self.per_history:
            return self._lent(self.first)
        built = self._built.pop(history_id, None)
        return self._lent(built if built is not None else self.make(history_id))

    def release(self, system: System) -> None:
        if self.per_history:
            with self._task(system):
                system.close()
            if self.lender is not None:
                self.lender.release(system)

    def close_unused(self) -> None:
        """Close what was built and never ingested (the first, on a rerun with its history all answered)."""
        for system in self._built.values():
            with self._task(system):
                system.close()
        self._built.clear()

    def _lent(self, system: Any) -> Any:
        if self.lender is not None:
            self.lender.lend(system)
        return system

    def _task(self, system: Any) -> Any:
        import contextlib

        return self.lender.task(system, "construction") if self.lender is not None else contextlib.nullcontext()


def _checked(system: Any) -> System:
    if not isinstance(system, System):
        raise ContractError(f"{type(system).__qualname__} is not a ctxbench.core.system.System; eval runs Systems only")
    return system


def build_system(cfg: Any, out_dir: Path) -> tuple[System, Any, str]:
    """(system, llm or None, display name) from ``method=`` or ``memory=``, answering with ``qa_prompt=``:
    one system whose stores live in ``out_dir`` (``eval`` itself builds one per history:
    :func:`build_history_systems`).

    The answer prompt (:func:`ctxbench.qa.get_prompt`) is looked up first (a bad name fails before
    anything loads) and handed to the system with :meth:`System.use_prompt`.
    """
    maker, llm, name = system_maker(cfg)
    return maker.build(out_dir), llm, name


def build_history_systems(cfg: Any, out_dir: Path) -> tuple[HistorySystems, Any, str]:
    """``eval``'s systems: for ``memory=``, one instance per history with its stores in
    ``out_dir/stores/<history id>/`` (so histories can be ingested side by side, and each resumes
    from its own files); for ``method=``, the one model-backed instance for every history.

    Nothing is built per history yet: the run builds the first history's system before any
    question (:meth:`HistorySystems.build_first`), so a bad config still fails before one."""
    maker, llm, name = system_maker(cfg)
    if not maker.per_history:
        return HistorySystems.one(maker.build(out_dir)), llm, name
    return HistorySystems(partial(maker.for_history, out_dir), embedder=maker.embedder), llm, name


def history_dir(out_dir: Path, history_id: str) -> Path:
    """``out_dir/stores/<history id>``: the id made a safe folder name (a hash added when it had to change)."""
    import hashlib
    import re

    safe = re.sub(r"[^A-Za-z0-9._-]", "_", str(history_id))[:80] or "_"
    if safe != str(history_id) or safe in (".", ".."):
        safe += "-" + hashlib.sha1(str(history_id).encode()).hexdigest()[:8]
    return Path(out_dir) / "stores" / safe


@dataclass
class SystemMaker:
    """Builds the system of ``method=`` / ``memory=`` in a folder, answering with ``qa_prompt=``.

    ``build_one(workdir)`` is the bare system (a method: its one loaded instance whatever the
    folder); ``per_history`` says whether ``eval`` builds one per history.
    """

    build_one: Any
    prompt: Any
    per_history: bool
    protocol: Any = None  # task=compression's Protocol: every system set to its ratio before any ingest
    name: str = ""
    embedder: Any = None  # the run's embedder (memory=), which a lent backend serves

    def build(self, workdir: Path) -> System:
        from ctxbench.evaluation.protocol import prepare
        from ctxbench.runs.guard import forced

        system = self.build_one(workdir=workdir)
        system.use_prompt(self.prompt)
        system.force_resume = forced(workdir)
        return prepare(system, self.protocol, self.name)

    def for_history(self, out_dir: Path, history_id: str) -> System:
        return self.build(history_dir(out_dir, history_id))


def system_maker(cfg: Any) -> tuple[SystemMaker, Any, str]:
    """(the maker of ``cfg``'s system, llm or None, display name); the answer prompt and ``task=compression``'s
    ratio are checked first."""
    from ctxbench.evaluation.protocol import check_chosen, protocol_of
    from ctxbench.qa import get_prompt

    prompt = get_prompt(cfg.qa_prompt)
    protocol = protocol_of(cfg)
    if protocol is not None:
        check_chosen(cfg)
    build_one, llm, name, per_history, embedder = _build_system(cfg)
    return SystemMaker(build_one, prompt, per_history, protocol, name, embedder), llm, name


def qa_prompt_record(system: System) -> dict[str, Any]:
    """results.json ``qa_prompt``: the prompt's name, version, source and rules, and the answer cap used."""
    explicit = system.explicit_answer_cap() is not None
    return {**system.answer_prompt.record(), "answer_max_tokens": system.answer_max_tokens(),
            "answer_cap_from": system.answer_cap_key if explicit else "qa_prompt"}


def chosen(cfg: Any, group: str) -> Any:
    """The config of a config group that can be left out of a composed config (``method: null`` in the
    defaults, ``~embedder``): None when it is."""
    return cfg[group] if group in cfg else None


def _build_system(cfg: Any) -> tuple[Any, Any, str, bool, Any]:
    """(build(workdir) → the bare system of ``method=`` or ``memory=``, llm, name, one per history?, embedder)."""
    method, memory = chosen(cfg, "method"), chosen(cfg, "memory")
    if cfg.checkpoint and not method:  # never evaluate memory=... with a checkpoint ignored
        from ctxbench.training.checkpoint import CheckpointError, resolve_checkpoint, saved_configs

        name = saved_configs(resolve_checkpoint(cfg.checkpoint))["method"]["name"]
        raise CheckpointError(f"checkpoint={cfg.checkpoint} is a trained method: pass method={name} to evaluate it")
    if method:
        return partial(_the, _load_method(cfg)), None, f"method={method.name}", False, None
    if not memory:
        raise DataError("eval", "choose a system: memory=NAME or method=NAME", field="memory")
    build_memory, llm, embedder = _memory_builder(cfg, memory)
    return build_memory, llm, f"memory={memory.name}", True, embedder


def _the(system: System, workdir: Path) -> System:
    """A method's one instance, whatever the folder (it loaded its model once)."""
    return system


def _load_method(cfg: Any) -> System:
    """The ``method=`` system on its model (``model.device``, ``model.dtype``), trained weights loaded."""
    import torch

    from ctxbench.core.registry import build
    from ctxbench.models.loading import load_for_eval, model_device

    if cfg.checkpoint:  # its method and model config, checked before the model loads
        from ctxbench.training.checkpoint import apply_checkpoint_config, hydra_overrides

        apply_checkpoint_config(cfg, cfg.checkpoint, hydra_overrides())
    bundle = load_for_eval(cfg.model)  # on model.device, in model.dtype
    system = build("method", cfg.method, bundle=bundle)
    if cfg.checkpoint:
        from ctxbench.training.checkpoint import load_trained

        load_trained(system, cfg.checkpoint)
    if isinstance(system, torch.nn.Module):  # what the method added on the CPU joins its model
        system.to(model_device(bundle.model))
    system.eval()
    return system


def _memory_builder(cfg: Any, mem: Any) -> tuple[Any, Any, Any]:
    """(build(workdir) → a ``memory=`` system, the llm, the embedder or None): every one on the one shared LLM
    (:class:`ctxbench.llm.shared.SharedLLM`) and embedder.

    The cheap checks run first: an OpenAI-compatible server is asked whether it is there, knows
    the key and the model (``preflight``) before the embedder loads.
    """
    from ctxbench.core.registry import build, get
    from ctxbench.llm.shared import SharedLLM

    missing = sorted(OmegaConf.missing_keys(mem))  # memory=http's url: said before the LLM loads
    if missing:
        keys = [k if k.startswith("memory.") else f"memory.{k}" for k in missing]
        raise ConfigError(f"memory={mem.name}: set {', '.join(keys)} (it has no default)")
    llm = SharedLLM(build("llm", cfg.llm))
    preflight(llm.inner)
    embedder = None
    if get("memory", str(mem.name)).needs_embedder:
        embedder_cfg = chosen(cfg, "embedder")
        if not embedder_cfg:
            raise DataError("eval", f"memory={mem.name} needs an embedder (embedder=minilm)", field="embedder")
        embedder = build("embedder", embedder_cfg)
    if "progress" in mem and not cfg.progress:  # progress=false silences every bar
        mem = OmegaConf.merge(mem, {"progress": False})
    return partial(build, "memory", mem, llm=llm, embedder=embedder), llm, embedder


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
