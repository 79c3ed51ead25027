"""What ``check`` checks: a memory system, method, dataset or metric, found by name or handed over as a class.

A :class:`Target` knows how to build fresh instances the way ``eval`` builds them — a memory system as
``cls(cfg, *, llm, embedder, workdir)`` on the run's shared backend, one per history; a method as
``cls(cfg, *, bundle)`` on the tiny test model, one for every history — so each check runs the class
through the one evaluator exactly as a run would.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from omegaconf import DictConfig, OmegaConf

from ctxbench.core.errors import ConfigError

KINDS = ("memory", "method", "dataset", "metric")
SYSTEM_KINDS = ("memory", "method")


@dataclass
class Target:
    kind: str  # memory | method | dataset | metric
    name: str
    obj: Any  # the class (a system, dataset loader or metric)
    cfg: Any = None  # the system's or dataset's config node (its Settings / conf option, overrides applied)
    model_cfg: Any = None  # method: the model it is built on (model=tiny by default)
    qa_prompt: str | None = None
    scripted: dict[str, Callable[[str], str]] = field(default_factory=dict)  # a plug-in's scripted replies
    _bundle: Any = None
    _method: Any = None

    @property
    def label(self) -> str:
        return f"{self.kind}={self.name}"

    @property
    def needs_embedder(self) -> bool:
        """The class says (``needs_embedder``); a config that still carries the key overrides it."""
        own = bool(getattr(self.obj, "needs_embedder", False))
        if isinstance(self.cfg, DictConfig) and "needs_embedder" in self.cfg:
            return bool(self.cfg.needs_embedder)
        return own

    def prompt(self) -> Any:
        from ctxbench.qa import get_prompt

        return get_prompt(self.qa_prompt)

    def bundle(self) -> Any:
        """The method's model, loaded once (every run of a method check shares it, as ``eval`` does)."""
        if self._bundle is None:
            from ctxbench.models.loading import load_model

            self._bundle = load_model(self.model_cfg)
        return self._bundle

    def build(self, *, llm: Any = None, embedder: Any = None, workdir: Path | None = None) -> Any:
        """A fresh instance, built as ``eval`` builds it, answering with the run's answer prompt."""
        if self.kind == "memory":
            system = self.obj(self.cfg, llm=llm, embedder=embedder, workdir=workdir)
        else:  # one instance on the one model for every run, as eval loads a method once
            if self._method is None:
                self._method = self.obj(self.cfg, bundle=self.bundle())
                if callable(getattr(self._method, "eval", None)):
                    self._method.eval()
            system = self._method
        system.use_prompt(self.prompt())
        return system


def resolve(kind: str, name: Any, cfg: Any = None, *, overrides: dict[str, Any] | None = None,
            model: Any = None, qa_prompt: str | None = None) -> Target:
    """The :class:`Target` for ``kind`` and ``name`` (a registered name — built-in, entry point or
    ``plugins=`` — or the class itself); ``cfg``: its config node as Hydra composed it (else its
    conf option or its ``Settings`` defaults), ``overrides`` applied on top."""
    if kind not in KINDS:
        raise ConfigError(f"check: kind {kind!r}: one of {', '.join(KINDS)}")
    if isinstance(name, str):
        from ctxbench.core.registry import get

        reg_kind = kind
        obj = get(reg_kind, name)
        label = name
    else:
        obj = name
        label = getattr(obj, "name", None) if kind == "metric" else None
        label = str(label or getattr(obj, "__name__", type(obj).__name__)).lower()
    if kind == "metric":
        return Target(kind, label, obj)
    node = cfg if cfg is not None else default_config(kind, label, obj)
    node = OmegaConf.create(OmegaConf.to_container(node, resolve=True)) if isinstance(node, DictConfig) \
        else OmegaConf.create(dict(node or {}))
    OmegaConf.set_struct(node, False)
    if "name" not in node or not node.name:
        node.name = label
    if overrides:
        node = OmegaConf.merge(node, overrides)
    for quiet in ("progress",):
        if quiet in node:
            node[quiet] = False
    target = Target(kind, str(node.name), obj, node, qa_prompt=qa_prompt)
    if kind == "method":
        from ctxbench.config.compose import option_config

        target.model_cfg = model if model is not None else option_config("model", {"name": "tiny"})
    if kind in SYSTEM_KINDS:
        from ctxbench.check.doubles import scripted_replies

        target.scripted = scripted_replies(obj) if inspect.isclass(obj) else {}
    return target


def default_config(kind: str, name: str, obj: Any) -> Any:
    """``name``'s config when none is given: its conf option (a built-in), else its ``Settings`` defaults
    (:mod:`ctxbench.config.plugin_options`, as ``eval`` composes a plug-in's option)."""
    from ctxbench.core.paths import conf_dir

    if (conf_dir() / kind / f"{name}.yaml").is_file():
        from ctxbench.config.schemas import load_option

        return load_option(kind, name)
    from ctxbench.config.plugin_options import option_schema
    from ctxbench.config.setting import defaults

    node = defaults(option_schema(name, obj))
    return OmegaConf.create({"name": name, **{k: v for k, v in node.items() if k != "name"}})
