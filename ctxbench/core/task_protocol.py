"""What a method offers the intrinsic eval tasks (``eval task=perplexity|reconstruction|choice``).

A method opts in by defining the methods below; a task refuses a method that lacks what it needs,
with an error naming the method and the task. Every token count is in the method's tokenizer.

- ``score_continuation(context, target, prompt=())`` → :class:`Scored`: the summed NLL of
  ``target`` when the model reads ``context`` *compressed the method's way*, then ``prompt`` and
  ``target`` uncompressed. Every target token is scored, each given everything before it (the
  same T tokens for every method and baseline): the first from the prompt's last token, or with no
  prompt from the context alone (the last token the method reads of it: the text's last token, a
  press's last segment, ICAE's [LM] token; CCM, whose memory is COMP keys with no text after them,
  reads :func:`start_ids` after its memory, as the ``no_context`` baseline reads it with none).
  ``context`` is a list of chunks, the natural units of the data (one chunk for a text window, one
  per demonstration for MetaICL, one per turn for a dialogue); a method splits long chunks by its
  own rule (ICAE segments, CCM steps, press segments). ``perplexity`` and ``choice`` use it.
- ``plain_lm()`` → context manager yielding a causal LM that computes the *base* model (LoRA and
  gates off): the ``full_context`` and ``no_context`` rows beside the method's own.
- ``perplexity(ids, marks=[...])`` → ``{"at": [{tokens_in, nll (mean), n_tokens, kv_slots, kv_bytes,
  peak_rss_bytes, seconds}, ...]}``: a long text streamed through the method's cache, every token
  after the first scored; at each mark m what a text of m tokens gives (tokens 2..m scored, the cache
  a stream of m tokens leaves), whether or not m ends a segment (the fixed-cache methods);
  ``perplexity task.score=stream`` uses it.
- ``reconstruct_ids(context, max_new_tokens)`` → list of token ids the method decodes back from
  its compressed ``context`` (ICAE's autoencoding); ``reconstruction`` uses it.

What a system offers ``eval task=compression`` (the kvpress protocol, docs/evaluation.md):

- ``set_compression_ratio(ratio)``: from then on each ingested history is compressed so that what
  the reader holds is at most :func:`ratio_budget` ``(ratio, n)`` = ceil((1 − ratio) × n), n = the
  tokens of the history text the system ingests in its own tokenizer (KV slots per layer for the
  presses, soft slots for ICAE, kept prompt tokens for prompt pruning, retrieved tokens for RAG).
  Each answer's ``Usage.extra`` then carries ``compression_ratio`` (r) and ``budget`` (that bound).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, Sequence, runtime_checkable


@dataclass
class Scored:
    nll: float                 # summed negative log-likelihood (nats) over the target tokens
    tokens: int                # target tokens scored
    context_tokens: int        # tokens of context the method was given (before any compression)
    # what the target read in place of the context, on the held axis of Usage.held: text tokens kept
    # (method=lm), KV slots (presses, CCM's COMP tokens), soft slots (ICAE)
    memory_slots: int
    kv_bytes: int | None = None  # bytes of the compressed context as the decoder holds it (None: not measured)


@runtime_checkable
class ContextScorer(Protocol):
    def score_continuation(self, context: Sequence[Sequence[int]], target: Sequence[int],
                           prompt: Sequence[int] = ()) -> Scored: ...

    def plain_lm(self) -> Any: ...


@runtime_checkable
class Reconstructor(Protocol):
    def reconstruct_ids(self, context: Sequence[int], max_new_tokens: int) -> list[int]: ...


@runtime_checkable
class RatioCompressor(Protocol):
    def set_compression_ratio(self, ratio: float) -> None: ...


def check_ratio(ratio: Any, key: str = "task.ratio") -> float:
    """``ratio`` as a float in [0, 1), else a one-line ConfigError naming ``key``."""
    from ctxbench.core.errors import ConfigError

    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0.0 <= float(ratio) < 1.0:
        raise ConfigError(f"{key}={ratio!r}: a compression ratio is in [0, 1) (0 keeps everything; "
                          "0.75 keeps a quarter of the context)")
    return float(ratio)


BUDGET_ROUNDINGS = ("ceil", "kvpress")
_ROUNDING = ["ceil"]  # task.budget of the running eval (set_budget_rounding); one per process


def set_budget_rounding(mode: str) -> None:
    """``ceil`` (ctxbench's) or ``kvpress`` (kvpress's ``int(q_len * (1 - compression_ratio))``) for every
    :func:`ratio_budget` of this process (``task.budget``, set when the protocol prepares a system)."""
    if mode not in BUDGET_ROUNDINGS:
        raise ValueError(f"task.budget={mode!r}: use one of {', '.join(BUDGET_ROUNDINGS)}")
    _ROUNDING[0] = mode


def ratio_budget(ratio: float, n: int) -> int:
    """What a reader may hold of ``n`` ingested tokens at compression ratio ``ratio``: ceil((1 − ratio) × n).

    Computed in exact decimal arithmetic on the ratio as written, so 0.75 of 1000 is 250, never 251
    from a binary float's rounding. Under ``task.budget=kvpress`` (:func:`set_budget_rounding`) it is
    kvpress's own ``int(n * (1 - ratio))`` in binary floats instead: truncated, so one slot fewer when
    the product is not whole, and 99 for 0.9 of 1000 (1 - 0.9 is 0.09999999999999998)."""
    from decimal import Decimal
    import math

    if _ROUNDING[0] == "kvpress":
        return int(int(n) * (1 - float(ratio)))
    keep = (Decimal(1) - Decimal(repr(float(ratio)))) * int(n)
    return int(math.ceil(keep))


def ratio_extra(ratio: float | None, budget: int | None) -> dict[str, Any]:
    """``Usage.extra``'s protocol keys for an answer: ``compression_ratio`` and ``budget`` (none unset)."""
    return {} if ratio is None else {"compression_ratio": float(ratio), "budget": budget}


def start_ids(tokenizer: Any) -> list[int]:
    """What a model reads before a target when nothing else precedes it: the start token, if any
    (BOS, else EOS) — the ``no_context`` baseline's whole input, CCM's after its memory."""
    tid = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    return [] if tid is None else [int(tid)]
