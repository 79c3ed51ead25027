"""The System contract: the one abstract base of everything ``eval`` runs (methods and memory systems).

Like lm-evaluation-harness's abstract ``LM``, it is checked when a class registers:
``register("method" | "memory", NAME)`` refuses a class that does not derive from :class:`System`
or leaves one of its abstract methods unimplemented, so the evaluator never guesses with ``hasattr``.

What a system does, and what it must leave to the evaluator:

- ``ingest(history)`` builds the state (memory slots, compressed KV, a memory store) for one history;
- ``answer(question) -> Prediction`` returns the model's *raw* text (no option mapping, no
  cleaning: the evaluator post-processes every answer exactly once, with the system's answer
  prompt's :meth:`ctxbench.qa.AnswerPrompt.postprocess`) and the :class:`Usage` of that answer;
- ``reset()`` drops per-history state before the next history (default: nothing to drop);
- ``construction_usage()`` reports what ingesting the current history cost when the system counts
  it itself (a resumable store keeps the cost of calls made by an earlier process); ``None`` lets
  the evaluator take it from the LLM meter;
- ``output_counts()`` reports the structured replies building the current history asked for, how
  many ended without a usable value (invalid or cut at the token limit: the evaluator fails a run
  whose share passes ``max_failed_fraction``), and their breakdown per phase (results.json
  ``cost.structured_output``); each answer reports its own in ``Prediction.outputs``;
- per-answer state stays in the ``answer`` call (returned with the Prediction), never on the
  instance: a history's questions may be answered side by side unless ``answer_writes_state``;
- ``close()`` releases files and connections;
- ``placement()`` says where the system's own model runs (``{"device": "cuda:0", "dtype": "bfloat16"}``,
  recorded in results.json), ``None`` for a system with no model of its own (memory systems: the
  evaluator asks their LLM backend).

Systems that show the history to a model as text render it with
:func:`ctxbench.qa.forms.render_history`, so every prompt-based system sees the same text for
the same history.

Every system answers with one answer prompt (:class:`ctxbench.qa.AnswerPrompt`): the evaluator
builds it once from ``qa_prompt=`` and hands it over with :meth:`System.use_prompt` before the
first ``ingest``; a system reads it as ``self.answer_prompt`` (LoCoMo's until told otherwise) and
its answer token cap as :meth:`System.answer_max_tokens` (its config's own cap under
``answer_cap_key`` when set, else the prompt's).

``answer_writes_state`` says whether answering changes the system's state (MemoryBank's recall
resets the forgetting clock): such systems must answer in dataset order.
"""
from __future__ import annotations

import abc
import importlib
import inspect
from typing import Any, ClassVar

from ctxbench.core.errors import CtxbenchError
from ctxbench.core.types import History, Prediction, Question, Usage

KINDS = ("method", "memory")


class System(abc.ABC):
    """Abstract base of every evaluated system; see the module docstring for the contract."""

    answer_writes_state: ClassVar[bool] = False
    # the evaluator builds the embedder (embedder=...) and hands it to the constructor only where this is true
    needs_embedder: ClassVar[bool] = False
    # its config schema: the dataclass of its keys (ctxbench/config/schemas/<kind>.py, or a plug-in's own)
    Settings: ClassVar[Any] = None
    answer_cap_key: ClassVar[str] = "max_new_tokens"  # the config key of the system's own answer cap
    # a baseline that answers from the whole history (full_context, method=lm, full_cache): a held context
    # near the history's size is what it is for, labelled expected in health.warnings, not a fault
    whole_history_baseline: ClassVar[bool] = False
    _answer_prompt: Any = None
    # the run was claimed with force_resume=true: state kept across runs (a memory store) may be
    # reused although it was built under another config (set by the evaluator when it builds the system)
    force_resume: bool = False
    # the system speaks only OpenAI (a library it wraps, a process of its own): the evaluator serves the run's
    # LLM backend and embedder on 127.0.0.1 and hands it the address with use_backend() before the first ingest
    borrows_backend: ClassVar[bool] = False
    lent: Any = None  # the ctxbench.core.lent.LentBackend handed over by use_backend()

    def use_prompt(self, prompt: Any) -> None:
        """Answer with ``prompt`` (a :class:`ctxbench.qa.AnswerPrompt`) from now on."""
        self._answer_prompt = prompt

    def use_backend(self, lent: Any) -> None:
        """Call the run's backend at ``lent`` (a :class:`ctxbench.core.lent.LentBackend`) from now on."""
        self.lent = lent

    @property
    def answer_prompt(self) -> Any:
        """The prompt this system answers with (the default prompt until :meth:`use_prompt`)."""
        if self._answer_prompt is None:
            # the prompts are found by name, as the registry finds its packages: the contract sits
            # beneath the qa package (ctxbench.qa imports the contract's types, never the reverse)
            return importlib.import_module("ctxbench.qa").get_prompt(None)
        return self._answer_prompt

    def explicit_answer_cap(self) -> Any:
        """The system config's own answer cap (``cfg[answer_cap_key]``), None when unset or null."""
        cfg = getattr(self, "cfg", None)
        # any system's config: its cap key (max_new_tokens, answer_max_tokens) is its schema's, or absent
        return cfg.get(self.answer_cap_key) if cfg is not None and hasattr(cfg, "get") else None

    def answer_max_tokens(self, question: Question | None = None) -> int:
        """The answer cap: :meth:`explicit_answer_cap` when set, else the question's own
        (``meta["max_new_tokens"]``: ``dataset=ruler`` with ``dataset.answer_tokens=ruler``, RULER's per-task
        cap), else the prompt's ``max_new_tokens``."""
        explicit = self.explicit_answer_cap()
        own = (question.meta or {}).get("max_new_tokens") if question is not None and explicit is None else None
        return self.answer_prompt.cap(explicit if own is None else own)

    @abc.abstractmethod
    def ingest(self, history: History) -> None:
        """Build the state for ``history`` (replacing any previous history's)."""

    @abc.abstractmethod
    def answer(self, question: Question) -> Prediction:
        """The raw model reply to ``question`` from the ingested state, with its usage."""

    def reset(self) -> None:
        """Drop per-history state; called by the evaluator before each history."""

    def construction_usage(self) -> Usage | None:
        """What ingesting the current history cost, when the system counts it itself."""
        return None

    def construction_stopped(self) -> dict[str, int] | None:
        """``{"step", "steps", "failed_calls"}`` when building the current history stopped at ``step``
        (1-based) of ``steps`` after a failed LLM call, or with ``"error"`` (one line) when it stopped for
        another reason (memory=http: its remote failed): the history is not answered in this run (a
        half-built memory publishes nothing) and a rerun resumes at that step. None: it was built."""
        return None

    def output_counts(self) -> dict[str, Any]:
        """Structured replies building the current history asked for and those without a usable value
        (an answer's own come back in ``Prediction.outputs``):
        ``{"structured_calls": n, "invalid_outputs": m, "structured_output": {phase: {calls, valid,
        invalid, truncated, failed, retried, retries_saved, normalised, unenforced, normalised_by,
        by_kind}}}`` (``{}`` for a system that asks for none)."""
        return {}

    def close(self) -> None:
        """Release files and connections."""

    def estimate_calls(self, history: History, questions: list[Question]) -> Any:
        """What building ``history`` and answering ``questions`` will call (``eval estimate=true``,
        :mod:`ctxbench.core.plan`); a system that does not say raises :class:`~ctxbench.core.plan.CannotEstimate`."""
        from ctxbench.core.plan import CannotEstimate

        raise CannotEstimate(f"{type(self).__name__} declares no estimate_calls: it cannot say before it runs what "
                             "it will call (docs/plugins.md: estimate_calls)")

    def placement(self) -> dict[str, str] | None:
        """``{"device", "dtype"}`` of the system's own model; None when it has none."""
        return None


class ContractError(CtxbenchError, TypeError):
    """A class registered as a method or memory system that does not implement :class:`System`."""


def check_system(kind: str, name: str, obj: Any) -> None:
    """Raise :class:`ContractError` unless ``obj`` is a concrete subclass of :class:`System`."""
    if not inspect.isclass(obj):
        raise ContractError(f"{kind} {name!r}: register a System subclass, not {type(obj).__name__} "
                            f"{getattr(obj, '__qualname__', obj)!r}")
    if not issubclass(obj, System):
        raise ContractError(f"{kind} {name!r}: {obj.__qualname__} does not derive from ctxbench.core.system.System")
    missing = sorted(getattr(obj, "__abstractmethods__", ()))
    if missing:
        raise ContractError(f"{kind} {name!r}: {obj.__qualname__} does not implement {', '.join(missing)}")
