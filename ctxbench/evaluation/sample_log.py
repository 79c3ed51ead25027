"""``log_samples=true``: every answer and every construction call of an ``eval``, as it was sent.

Like lm-evaluation-harness's ``--log_samples``, so a user sees why a system answered what it did
without a logging proxy. In the run folder:

- ``samples.jsonl``, one line per answered question: ``id``, ``history_id``, ``question``, the gold
  ``answer``, ``category``; ``calls`` — every LLM call the answer made through the shared backend,
  in order, each with the exact ``messages`` sent, its ``params`` (max_new_tokens, temperature,
  schema ...), the raw ``reply``, its token counts and flags (cached, failed, truncated); the
  retrieved ``context`` the system showed its model (``null`` for a system that reports none); the
  ``raw_prediction`` and the post-processed ``prediction``; ``failed`` when it failed.
- ``construction_calls.jsonl``, one line per LLM call made while ingesting a history, written as
  the call completes (``history_id`` + the same call fields), so a killed run keeps what it logged.

Every string is scrubbed of secrets (API keys in the environment, key-shaped strings) before it is
written. A question answered again on resume (it failed before) gets a new line: the last line
of an id is its answer. Under ``accelerate launch`` each rank writes ``samples.rank<k>.jsonl`` and
``construction_calls.rank<k>.jsonl``. A method decoding with its own model makes no backend calls:
its lines carry ``calls: []``, its context and its answer.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from ctxbench.runs.results import JsonlAppender
from ctxbench.core.secrets import scrub_text

SAMPLES, CONSTRUCTION_CALLS = "samples.jsonl", "construction_calls.jsonl"


def scrubbed(obj: Any) -> Any:
    """``obj`` with every string in it scrubbed of secrets."""
    if isinstance(obj, str):
        return scrub_text(obj)
    if isinstance(obj, dict):
        return {k: scrubbed(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [scrubbed(v) for v in obj]
    return obj


def _name(base: str, shard: int | None) -> str:
    return base if shard is None else base.replace(".jsonl", f".rank{shard}.jsonl")


class SampleLog:
    """The two log files of one run (a no-op when ``out_dir`` is None: ``log_samples=false``)."""

    def __init__(self, out_dir: str | Path | None, shard: int | None = None):
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self.shard = shard
        self._samples: JsonlAppender | None = None
        self._construction: JsonlAppender | None = None

    @property
    def enabled(self) -> bool:
        return self.out_dir is not None

    def construction_sink(self, history_id: str) -> Callable[[dict[str, Any]], None] | None:
        """What receives each construction call of ``history_id`` (None when logging is off)."""
        if self.out_dir is None:
            return None

        def sink(call: dict[str, Any]) -> None:
            if self._construction is None:
                self._construction = JsonlAppender(self.out_dir / _name(CONSTRUCTION_CALLS, self.shard))
            self._construction.append(scrubbed({"history_id": history_id, **call}))
        return sink

    def answer(self, rec: dict[str, Any], pred: Any, calls: list[dict[str, Any]]) -> None:
        """One answered question: its record's identity and answers, the calls, the context."""
        if self.out_dir is None:
            return
        if self._samples is None:
            self._samples = JsonlAppender(self.out_dir / _name(SAMPLES, self.shard))
        line = {k: rec[k] for k in ("id", "history_id", "question", "answer", "category") if k in rec}
        context = (pred.meta or {}).get("context")
        line.update(calls=calls, context=context if isinstance(context, str) else None,
                    raw_prediction=rec.get("raw_prediction"), prediction=rec.get("prediction"))
        if rec.get("failed"):
            line.update(failed=True, error=rec.get("error"))
        self._samples.append(scrubbed(line))

    def close(self) -> None:
        for f in (self._samples, self._construction):
            if f is not None:
                f.close()

    def __enter__(self) -> "SampleLog":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
