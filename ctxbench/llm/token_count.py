"""Where a backend's token counts come from, and the record of it for results.json.

Every :class:`~ctxbench.llm.base.ChatResult` says how its two counts were made
(``token_source``):

* ``"server"`` — the server's ``usage`` reported both counts (its own tokenizer);
* ``"tokenizer"`` — counted here with a real tokenizer of the served model: ``llm.tokenizer`` (an
  HF tokenizer id or folder), or tiktoken's ``encoding_for_model`` for a model name tiktoken knows
  (OpenAI's models), or the local model's own tokenizer (``llm=hf``);
* ``"estimate"`` — ``ceil(chars / 4)``: no tokenizer of the served model is known. A tokenizer of
  some *other* model is never used as a guess (tiktoken's ``cl100k_base`` for an unknown name
  would look exact and be wrong by 10-30% for a Llama or Qwen vocabulary);
* ``"cache"`` — a call-cache row written before the source was stored (:mod:`.cache`).

:class:`TokenCounter` is the one tokenizer choice of ``llm=openai``: its prompt fitting, the counts
of replies without ``usage``, and ``count_tokens`` (the context tokens systems report) all use it,
so they agree. :func:`token_counts_record` is what results.json stores under ``llm.token_counts``.
"""
from __future__ import annotations

import os
import math
import threading
from typing import Any

SERVER, TOKENIZER, ESTIMATE, CACHE = "server", "tokenizer", "estimate", "cache"
TOKEN_SOURCES = (SERVER, TOKENIZER, ESTIMATE, CACHE)
FIX = "set llm.tokenizer=<hf id or folder of the served model's tokenizer>"


def estimate_tokens(text: str) -> int:
    """The estimate used when no tokenizer is known: one token per 4 characters, rounded up."""
    return math.ceil(len(text) / 4)


class TokenCounter:
    """Counts tokens for the model ``model`` served over HTTP: with ``tokenizer`` (an HF tokenizer id
    or folder, loaded on first use) if given, else tiktoken's encoding for ``model`` if tiktoken is
    installed and knows the name, else :func:`estimate_tokens`. ``source`` says which."""

    def __init__(self, tokenizer: Any, model: str):
        self.tokenizer_name = str(tokenizer) if tokenizer else None
        self.model = model
        self._lock = threading.Lock()
        self._loaded = False
        self._tok: Any = None  # an HF tokenizer, a tiktoken Encoding, or None (estimate)
        self._label: str | None = None
        self.why_estimate = ""  # why no tokenizer was found (for the warning)

    def _load(self) -> None:
        if self._loaded:  # the common case, without the lock
            return
        with self._lock:
            if self._loaded:
                return
            if self.tokenizer_name:
                self._tok, self._label = load_hf_tokenizer(self.tokenizer_name), self.tokenizer_name
            else:
                self._tok, self._label, self.why_estimate = tiktoken_for(self.model)
            self._loaded = True

    @property
    def source(self) -> str:
        """``"tokenizer"`` or ``"estimate"``: how :meth:`count` counts."""
        self._load()
        return ESTIMATE if self._tok is None else TOKENIZER

    @property
    def label(self) -> str | None:
        """The tokenizer's name (``llm.tokenizer``, or ``tiktoken:<encoding>``); None for estimates."""
        self._load()
        return self._label

    def count(self, text: str) -> int:
        self._load()
        tok = self._tok
        if tok is None:
            return estimate_tokens(text)
        if hasattr(tok, "convert_tokens_to_ids"):  # an HF tokenizer
            return len(tok(text, add_special_tokens=False)["input_ids"])
        return len(tok.encode(text, disallowed_special=()))  # tiktoken: special-token text is plain text


def load_hf_tokenizer(name: str) -> Any:
    """The HF tokenizer ``llm.tokenizer`` names (a hub id or a folder); a clear error if it cannot load."""
    from transformers import AutoTokenizer

    from ctxbench.models.loading import ModelLoadError

    try:
        return AutoTokenizer.from_pretrained(name)
    except (OSError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelLoadError(f"llm.tokenizer={name!r}: cannot load this tokenizer ({first[:200]}); give an HF "
                             "tokenizer id available offline or a folder with tokenizer files, or "
                             "llm.tokenizer=null (token counts are then estimates)") from None


def offline() -> bool:
    """HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) set: nothing is fetched from the network."""
    return any(os.environ.get(k, "").strip().lower() in ("1", "true", "yes", "on")
               for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def tiktoken_for(model: str) -> tuple[Any, str | None, str]:
    """(encoding, label, why not) for ``model``: tiktoken's own encoding for a name it knows, else
    (None, None, reason) — never a default encoding for a name it does not know."""
    try:
        import tiktoken
    except ImportError:
        return None, None, "tiktoken is not installed"
    name_of = getattr(tiktoken, "encoding_name_for_model", None)  # no file read: does it know the name?
    if name_of is not None:
        try:
            name_of(model)
        except KeyError:
            return None, None, "tiktoken does not know the name"
    if offline() and not os.environ.get("TIKTOKEN_CACHE_DIR"):
        # tiktoken fetches its encoding files over the network on first use; offline runs (tests, CI,
        # HF_HUB_OFFLINE=1) never try: a folder that holds them is named by TIKTOKEN_CACHE_DIR
        return None, None, "offline (HF_HUB_OFFLINE=1) and TIKTOKEN_CACHE_DIR is not set, so tiktoken cannot fetch its encoding"
    try:
        enc = tiktoken.encoding_for_model(model)
    except KeyError:
        return None, None, "tiktoken does not know the name"
    except Exception as e:  # its encoding file could not be read or downloaded (offline)
        return None, None, f"tiktoken could not load its encoding ({type(e).__name__})"
    return enc, f"tiktoken:{enc.name}", ""


def count_source(llm: Any) -> str | None:
    """``llm.token_count_source()`` where the backend has it (through a cache wrapper too), else None."""
    fn = getattr(llm, "token_count_source", None)
    return fn() if callable(fn) else None


def token_counts_record(llm: Any) -> dict[str, Any]:
    """How ``llm``'s token counts were made, for results.json ``llm.token_counts``:
    ``calls_by_source`` (successful calls per source, over every phase), ``count_tokens`` (how its
    ``count_tokens`` counts: ``"tokenizer"``/``"estimate"``, None for a backend that does not say),
    ``tokenizer`` (the tokenizer's name, None when it estimates)."""
    by_source: dict[str, int] = {}
    meter = getattr(llm, "meter", None)
    for phase in (meter.snapshot().values() if meter is not None else ()):
        for src, n in phase.get("by_source", {}).items():
            by_source[src] = by_source.get(src, 0) + int(n)
    label = getattr(llm, "tokenizer_label", None)
    return {"calls_by_source": dict(sorted(by_source.items())), "count_tokens": count_source(llm),
            "tokenizer": label() if callable(label) else None}
