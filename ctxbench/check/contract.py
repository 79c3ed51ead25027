"""``contract``: the class is what ``eval`` can run — the checks ``register`` makes, then one history by hand.

A system derives from :class:`ctxbench.api.System` and implements ``ingest`` / ``answer``; it builds
as ``eval`` builds it (``cls(cfg, *, llm, embedder, workdir)``, a method ``cls(cfg, *, bundle)``);
``answer`` returns a :class:`Prediction` whose ``text`` is a str and whose ``usage`` is a
:class:`Usage`; ``reset`` and ``close`` run. A dataset builds a list of samples of the shared types
with unique question ids, the same on a second build; a metric has a name, version and reference
and scores in [0, 1] or None.
"""
from __future__ import annotations

import dataclasses
import inspect
import math
from typing import Any

from ctxbench.check.harness import prediction_problem
from ctxbench.check.result import Fail, Skip
from ctxbench.core.types import History, Question, Sample, Usage

CALL = ("prompt_tokens", "completion_tokens", "calls")


def system(ctx: Any) -> str:
    from ctxbench.core.system import ContractError, check_system

    t = ctx.target
    try:
        check_system(t.kind, t.name, t.obj)
    except ContractError as e:
        raise Fail(str(e).split(": ", 1)[-1]) from None
    settings = getattr(t.obj, "Settings", None)
    if settings is not None and not dataclasses.is_dataclass(settings):
        raise Fail(f"{t.obj.__qualname__}.Settings is not a dataclass (decorate it with @dataclass)")
    llm = embedder = None
    if t.kind == "memory":
        from ctxbench.check.doubles import CheckLLM, WordHashEmbedder
        from ctxbench.llm.shared import SharedLLM

        llm = SharedLLM(CheckLLM(t.scripted))
        embedder = WordHashEmbedder() if t.needs_embedder else None
    how = "cls(cfg, *, llm, embedder, workdir)" if t.kind == "memory" else "cls(cfg, *, bundle)"
    try:
        instance = t.build(llm=llm, embedder=embedder, workdir=ctx.out / "contract")
    except Exception as e:  # noqa: BLE001 - whatever the class raises is the finding
        raise Fail(f"building it as eval does, {how}, raised {type(e).__name__}: {_line(e)}") from None
    if getattr(t.obj, "borrows_backend", False):  # its calls go to the lent backend, which only a run serves
        instance.close()
        return f"derives from System, builds as {how}; borrows_backend: ingest/answer run by the eval check"

    sample = ctx.samples[0]
    direct: list[tuple[Usage, tuple[int, ...]]] = []
    try:
        _step("reset()", instance.reset)
        _step("ingest(history)", instance.ingest, sample.history)
        for q in sample.questions[:2]:
            before = _meter(llm, "answer")
            pred = _step("answer(question)", instance.answer, q)
            problem = prediction_problem(pred)
            if problem:
                raise Fail(problem)
            after = _meter(llm, "answer")
            direct.append((pred.usage, tuple(a - b for a, b in zip(after, before))))
    finally:
        try:
            instance.close()
        except Exception as e:  # noqa: BLE001
            raise Fail(f"close() raised {type(e).__name__}: {_line(e)}") from None
    ctx.cache["direct"] = direct
    return f"derives from System, builds as {how}; answer() returns Prediction(text: str, usage: Usage)"


def _meter(llm: Any, phase: str) -> tuple[int, ...]:
    if llm is None:
        return (0, 0, 0)
    c = llm.meter.total(phase)
    return tuple(int(getattr(c, k)) for k in CALL)


def _step(what: str, fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Fail:
        raise
    except Exception as e:  # noqa: BLE001
        raise Fail(f"{what} raised {type(e).__name__}: {_line(e)}") from None


def _line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else repr(e)


def dataset(ctx: Any) -> str:
    """The loader gives samples of the shared types, unique question ids, the same on a second build."""
    first = ctx.samples
    if not isinstance(first, (list, tuple)) and not hasattr(first, "__iter__"):
        raise Fail(f"the loader returned {type(first).__name__}, not a list of ctxbench.api.Sample")
    first = list(first)
    if not first:
        raise Fail("the loader returned no samples")
    ids: set[str] = set()
    n_q = 0
    for i, s in enumerate(first):
        if not isinstance(s, Sample):
            raise Fail(f"item {i} is {type(s).__name__}, not a ctxbench.api.Sample")
        if not isinstance(s.history, History):
            raise Fail(f"sample {i}: history is {type(s.history).__name__}, not a ctxbench.api.History")
        if not s.history.sessions and not s.history.text:
            raise Fail(f"history {s.history.id!r} has neither sessions nor text")
        for q in s.questions:
            if not isinstance(q, Question):
                raise Fail(f"history {s.history.id!r}: a question is {type(q).__name__}, not a ctxbench.api.Question")
            if q.id in ids:
                raise Fail(f"question id {q.id!r} appears twice (ids must be unique across the dataset)")
            if not str(q.question).strip():
                raise Fail(f"question {q.id!r} has no text")
            ids.add(q.id)
            n_q += 1
    again = list(ctx.load_samples())
    if again != first:
        raise Fail("a second build gives other samples (loading must be deterministic)")
    return f"{len(first)} histories, {n_q} questions, unique ids, the same on a second build"


def metric(ctx: Any) -> str:
    """name / version / reference, built with no argument, scores in [0, 1] or None, deterministic."""
    cls = ctx.target.obj
    for attr in ("name", "version", "reference"):
        if not isinstance(getattr(cls, attr, None), str) or not getattr(cls, attr):
            raise Fail(f"{getattr(cls, '__qualname__', cls)} has no {attr} (a str class attribute)")
    if getattr(cls, "needs_llm", False):
        raise Skip("needs_llm metrics are built on the judge LLM: scored by the eval check only")
    m = _step("building it (cls())", cls) if inspect.isclass(cls) else cls
    qs = [q for s in ctx.samples for q in s.questions]
    scored = 0
    for q in qs:
        for pred in (str(q.answer), "something else entirely"):
            v = _step(f"score({pred!r}, question {q.id})", m.score, pred, q)
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(float(v)) or not 0 <= v <= 1:
                raise Fail(f"score({pred!r}, question {q.id}) = {v!r}: expected a number in [0, 1] or None")
            if m.score(pred, q) != v:
                raise Fail(f"score({pred!r}, question {q.id}) differs on a second call (must be deterministic)")
            scored += 1
    if not scored:
        raise Fail(f"scored None for every one of {len(qs)} questions")
    return f"name, version, reference set; {scored} scores in [0, 1], deterministic"
