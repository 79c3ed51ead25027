"""Shared-prompt-prefix KV reuse for ``llm=hf`` (``llm.prefix_cache``).

Why: ``eval memory=full_context`` asks every question of a conversation with a prompt that starts
with the same rendered history (system message + ``Conversation:\\n<history>``, 1-2k tokens) and
ends with a short question. Without reuse each call recomputes the whole prompt; with it, a call
whose token ids start with a stored prompt's ids computes only the tokens after the common prefix.

What: a small LRU (``llm.prefix_cache_entries``, default 2) of transformers ``DynamicCache``\\ s,
each the KV of one earlier prompt (its token ids are the key). :meth:`PrefixCache.lookup` finds the
entry sharing the longest common prefix with a new prompt; if that prefix is at least
``llm.prefix_cache_min_tokens`` (default 256) it hands out a deep copy cropped to it (the stored
entry is never given to ``generate``, so it is never mutated), always leaving at least one prompt
token uncached (``generate`` needs one input token to produce the first logits).
:meth:`PrefixCache.store` keeps the cache ``generate`` filled, cropped to the prompt (the generated
tokens dropped): the prompt's KV costs nothing beyond the call itself.

Only plain ``DynamicLayer`` caches are reused (:func:`reusable`): a sliding-window or other special
layer crops differently, so such a model simply never hits. Memory is bounded by ``entries`` prompts
of at most the context window each.
"""
from __future__ import annotations

import copy
from collections import OrderedDict
from typing import Any

from ctxbench.core.errors import ConfigError


def common_prefix(a: list[int] | tuple[int, ...], b: list[int] | tuple[int, ...]) -> int:
    """The number of leading token ids ``a`` and ``b`` share."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def crop_to(cache: Any, length: int) -> None:
    """Keep the first ``length`` positions of ``cache`` (``DynamicCache.crop`` takes a negative count)."""
    drop = cache.get_seq_length() - length
    if drop < 0:
        raise ValueError(f"cannot crop a cache of {cache.get_seq_length()} positions to {length}")
    if drop:
        cache.crop(-drop)


def reusable(cache: Any) -> bool:
    """True if every layer of ``cache`` is a plain ``DynamicLayer`` (cropping it is exact)."""
    from transformers.cache_utils import DynamicLayer

    layers = getattr(cache, "layers", None)
    return bool(layers) and all(type(layer) is DynamicLayer for layer in layers)


class PrefixCache:
    """The KV caches of the last ``entries`` long prompts, reused for prompts that start the same.

    Counters: ``hits`` / ``misses`` (lookups of prompts of at least ``min_tokens`` tokens) and
    ``tokens_reused`` (prompt tokens not recomputed, summed over hits).
    """

    def __init__(self, min_tokens: int = 256, entries: int = 2):
        if int(min_tokens) < 1:
            raise ConfigError(f"config key 'llm.prefix_cache_min_tokens' must be >= 1, got {min_tokens}")
        if int(entries) < 1:
            raise ConfigError(f"config key 'llm.prefix_cache_entries' must be >= 1, got {entries}")
        self.min_tokens = int(min_tokens)
        self.max_entries = int(entries)
        self._entries: OrderedDict[tuple[int, ...], Any] = OrderedDict()
        self.hits = self.misses = self.tokens_reused = 0

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, ids: list[int]) -> tuple[Any, int]:
        """(a fresh cache holding the KV of ``ids[:n]``, n) for the stored entry sharing the longest
        prefix with ``ids``, or (None, 0) when no entry shares ``min_tokens`` of them.

        ``n <= len(ids) - 1``: the last prompt token is always left for ``generate``. The copy is
        the caller's to mutate; the stored entry stays as it was.
        """
        if len(ids) <= self.min_tokens:  # n >= min_tokens and n <= len(ids) - 1 cannot both hold
            return None, 0
        best_key, best = None, 0
        for key in self._entries:
            n = common_prefix(key, ids)
            if n > best:
                best_key, best = key, n
        n = min(best, len(ids) - 1)
        if best_key is None or n < self.min_tokens:
            self.misses += 1
            return None, 0
        self._entries.move_to_end(best_key)
        cache = copy.deepcopy(self._entries[best_key])
        crop_to(cache, n)
        self.hits += 1
        self.tokens_reused += n
        return cache, n

    def shared(self, ids: list[int]) -> int:
        """How many leading tokens of ``ids`` a :meth:`lookup` would reuse now (0: it would miss);
        counts nothing."""
        if len(ids) <= self.min_tokens:
            return 0
        n = min(max((common_prefix(key, ids) for key in self._entries), default=0), len(ids) - 1)
        return n if n >= self.min_tokens else 0

    def store(self, ids: list[int], cache: Any) -> bool:
        """Keep ``cache`` (which ``generate`` filled for prompt ``ids`` and maybe some generated
        tokens) as the KV of ``ids``: cropped to ``len(ids)`` positions, the least recently used
        entry evicted beyond ``entries``. Prompts shorter than ``min_tokens`` and caches that are
        not plain dynamic ones are not stored. Returns whether it was stored."""
        if len(ids) < self.min_tokens or not reusable(cache) or cache.get_seq_length() < len(ids):
            return False
        crop_to(cache, len(ids))
        key = tuple(ids)
        self._entries.pop(key, None)
        self._entries[key] = cache
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
        return True

    def clear(self) -> None:
        self._entries.clear()
