"""Grammar-constrained decoding for ``llm=hf``: a schema becomes a mask on the next-token logits.

We use xgrammar (mlc-ai/xgrammar), the structured-generation engine vLLM, SGLang and TensorRT-LLM
ship: it compiles a JSON Schema against the tokenizer's vocabulary once (cached here by schema),
then fills a token bitmask per step in C++ with a pushdown automaton, so masking costs far less
than a forward pass (measured by ``bench suite=structured``). lm-format-enforcer walks a Python
character-level parser per token (slower per step on CPU); outlines compiles regex automata per
schema (slow to compile for the per-call schemas we build: enums of the ids just shown).

The grammar is compact JSON (no free whitespace) so replies spend tokens on content. Once the
value is complete, only the model's stop tokens are allowed, so a reply either closes or is cut at
``max_new_tokens`` (then :class:`~.base.ChatResult` says ``truncated``).
"""
from __future__ import annotations

import json
from typing import Any

from ctxbench.core.errors import MissingDependency
from ctxbench.llm.schema import Schema

CACHE_BYTES = 256 * 2**20  # xgrammar's own cache of compiled grammars (per backend); a compile takes ms


class GrammarConstraint:
    """Compiles schemas for one tokenizer and hands out a logits processor per ``generate`` call."""

    def __init__(self, tokenizer: Any, vocab_size: int, stop_ids: list[int]) -> None:
        try:
            import xgrammar as xgr
        except ImportError:
            raise MissingDependency("llm=hf structured output needs xgrammar (pip install xgrammar), "
                                    "or set llm.constrained=false") from None
        self._xgr = xgr
        info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=int(vocab_size), stop_token_ids=list(stop_ids))
        self._compiler = xgr.GrammarCompiler(info, max_threads=2, cache_limit_bytes=CACHE_BYTES)

    def compiled(self, schema: Schema | None) -> Any:
        """The compiled grammar of ``schema`` (``None``: any JSON value), from xgrammar's cache when seen."""
        if schema is None:
            return self._compiler.compile_builtin_json_grammar()
        # the schema's own key order (not sorted): a reply's keys come in the order they are declared
        # (MemGPT's "function" before its "args"); xgrammar caches by this text
        return self._compiler.compile_json_schema(json.dumps(schema, ensure_ascii=False), any_whitespace=False,
                                                  strict_mode=True)

    def processor(self, schema: Schema | None) -> Any:
        """A fresh logits processor (one per ``generate`` call; each row of the batch gets a matcher)."""
        from xgrammar.contrib.hf import LogitsProcessor

        return LogitsProcessor(self.compiled(schema))
