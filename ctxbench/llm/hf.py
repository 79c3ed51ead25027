"""``llm=hf``: a local transformers chat model (default: the packaged SmolLM2-135M-Instruct).

``llm.model`` names a model config (``conf/model/<name>.yaml``, e.g. ``smollm2_135m``, ``tiny``),
or is a hub id / local folder loaded as ``model=hf``. Prompts go through the tokenizer's chat
template; generation is greedy (``temperature=0``) or sampled, batched with left padding in
``chat_batch`` (the prompts sorted by length, neighbours batched, the replies in the callers' order).
A greedy call without a grammar runs ctxbench's own decode loop (:mod:`.decode`): each row ends at
its stop token, at one of the call's ``stop`` strings (:mod:`.stop`; ``ChatResult.stopped``) or at
``max_new_tokens`` and leaves the batch then, so a batch no longer runs to its longest reply; each
row's reply is the one it gets alone. Sampled and grammar-constrained calls go through ``generate``,
stopped per row at their ``stop`` strings by a stopping criterion. Prompt and completion tokens are counted with the model's tokenizer
(``token_source="tokenizer"``, :mod:`.token_count`).

A call with a ``schema`` (or ``json_mode``) is decoded under that grammar (:mod:`.grammar`,
xgrammar; ``llm.constrained=false`` turns it off), batched like any other call. A reply that hit
``max_new_tokens`` without a stop token is marked ``truncated``. A prompt longer than
``context_window - max_new_tokens`` keeps its system message and loses the middle of its longest
message (:mod:`.fit`); only if that cannot make room are its oldest tokens dropped. Either is
counted in ``truncated_calls``: systems should fit their prompts, this is the last guard.
The call cache key (``cache_id``) names the model, its path, its revision and its dtype, so a
different checkpoint or precision never reuses another's replies.

With ``llm.prefix_cache`` (default true) a single-conversation call whose prompt starts with the
same ``llm.prefix_cache_min_tokens`` tokens as one of the last ``llm.prefix_cache_entries`` prompts
reuses their KV cache and computes only the rest (:mod:`.prefix_cache`; ``eval memory=full_context``
sends every question of a conversation after the same history). Greedy replies are the same as
without it (tests/test_llm_prefix_cache.py); ``prompt_tokens`` still counts the whole prompt.
Counted in ``prefix_hits`` / ``prefix_tokens_reused``. In a batch (``chat_batch``, or the
evaluator's batched calls) the prompts that share such a prefix, with a stored prompt or with each
other, are generated one at a time from the cache; the others are batched with left padding.

The model loads on ``llm.device`` in ``llm.dtype`` (null: the model config's ``device`` / ``dtype``;
``auto``: accelerate's device for this process, bfloat16 there if it is a GPU, float32 on the CPU;
:mod:`ctxbench.models.loading`), and every input tensor is made on the model's device.
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from ctxbench.core.paths import conf_dir
from ctxbench.core.registry import register
from ctxbench.llm.base import ChatResult, Message, UsageMeter
from ctxbench.llm.cache import maybe_cached
from ctxbench.llm.chat_template import chat_text
from ctxbench.llm.decode import stop_strings
from ctxbench.llm.fit import fit_messages
from ctxbench.llm.prefix_cache import PrefixCache
from ctxbench.llm.stop import apply_stop, find_stop, stop_list
from ctxbench.llm.token_count import TOKENIZER

CONF_MODEL_DIR = conf_dir() / "model"


def model_config(spec: Any) -> Any:
    """A model config from a name of conf/model/*.yaml, a hub id / folder, or a mapping (filled from its schema)."""
    from omegaconf import DictConfig

    from ctxbench.config.compose import option_config

    if isinstance(spec, (dict, DictConfig)):
        return option_config("model", spec)
    name = str(spec)
    yaml = CONF_MODEL_DIR / f"{name}.yaml"
    if yaml.exists():
        from ctxbench.config.schemas import load_option

        return load_option("model", name)  # the file keeps only what differs from its schema
    # a hub id / folder: transformers picks the attention kernel, dtype auto (as before the schema)
    return option_config("model", {"name": "hf", "path": name, "dtype": "auto", "attn_implementation": None})


def model_cache_id(bundle: Any) -> str:
    """name@path plus the revision and the weights' dtype.

    The revision is the hub commit when known, else the time the local folder's config.json was
    written (a folder re-saved by training is a new revision).
    """
    model = bundle.model
    revision = getattr(model.config, "_commit_hash", None)
    if not revision:
        config_json = Path(str(bundle.path)).expanduser() / "config.json"
        revision = f"local-{config_json.stat().st_mtime_ns}" if config_json.is_file() else "local"
    dtype = getattr(model, "dtype", None)
    if dtype is None:
        dtype = next(model.parameters()).dtype
    return f"{bundle.name}@{bundle.path} rev={revision} dtype={str(dtype).replace('torch.', '')}"


def llm_model_config(cfg: Any) -> tuple[Any, Any]:
    """(model config, device) of ``llm=hf``: ``llm.model``'s config with ``llm.dtype`` / ``llm.device``
    over its own ``dtype`` / ``device`` where they are set, and the device resolved."""
    from ctxbench.models.loading import resolve_device

    mcfg = model_config(cfg.model)
    for key in ("dtype", "device"):
        if cfg[key]:
            mcfg[key] = cfg[key]
    key = "llm.device" if cfg.device else "model.device"
    return mcfg, resolve_device(mcfg.device, key=key)


class HFChatLLM:
    def __init__(self, cfg: Any, bundle: Any = None):
        import torch

        from ctxbench.models.loading import load_model, model_device

        if bundle is None:
            bundle = load_model(*llm_model_config(cfg))
        self.bundle = bundle
        self.model = bundle.model.eval()
        self.device = model_device(self.model)
        self.tokenizer = bundle.tokenizer
        self.tokenizer.padding_side = "left"
        self.model_name = str(bundle.name)
        self.cache_id = model_cache_id(bundle)
        self._window = cfg.context_window
        self.batch_size = cfg.batch_size
        self.meter = UsageMeter()
        self.truncated_calls = 0
        self._lock = threading.Lock()
        self._torch = torch
        eos = {self.tokenizer.eos_token_id}
        im_end = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        if isinstance(im_end, int) and im_end != self.tokenizer.unk_token_id:
            eos.add(im_end)
        self.eos_ids = sorted(i for i in eos if i is not None)
        self.constrained = cfg.constrained
        self._grammar: Any = None  # GrammarConstraint, built on the first structured call
        if self.constrained:
            self.cache_id += " constrained"
        # a model whose generation config asks for its own cache class (static, sliding) keeps generate's
        own_cache = getattr(getattr(self.model, "generation_config", None), "cache_implementation", None)
        self.prefix_cache: PrefixCache | None = None
        if cfg.prefix_cache and own_cache in (None, "dynamic"):
            self.prefix_cache = PrefixCache(cfg.prefix_cache_min_tokens, cfg.prefix_cache_entries)
        from ctxbench.models.loading import cache_kwarg

        self._cache_kwarg = cache_kwarg(self.model)  # generate's keyword for a given cache
        self._own_loop = own_cache in (None, "dynamic")  # greedy calls decode in :mod:`.decode`
        import inspect

        base = self.model.get_base_model() if hasattr(self.model, "get_base_model") else self.model
        self._keep_last = "logits_to_keep" in inspect.signature(base.forward).parameters

    @property
    def prefix_hits(self) -> int:
        """Calls that reused a stored prompt prefix's KV cache."""
        return self.prefix_cache.hits if self.prefix_cache is not None else 0

    @property
    def prefix_tokens_reused(self) -> int:
        """Prompt tokens taken from the prefix cache instead of recomputed, over all hits."""
        return self.prefix_cache.tokens_reused if self.prefix_cache is not None else 0

    @property
    def context_window(self) -> int:
        return self._window

    def placement(self) -> dict[str, str]:
        """``{"device", "dtype"}`` the model runs in (results.json ``provenance.placement``)."""
        from ctxbench.models.loading import placement

        return placement(self.model)

    def preflight(self) -> None:
        """Nothing to check before loading: the model is local (and already loaded)."""

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def token_count_source(self) -> str:
        """Always ``"tokenizer"``: the model's own tokenizer counts everything."""
        return TOKENIZER

    def tokenizer_label(self) -> str | None:
        """The tokenizer's hub id or folder (results.json ``llm.token_counts.tokenizer``)."""
        return str(getattr(self.tokenizer, "name_or_path", "") or self.model_name)

    def encode_chat(self, messages: list[Message]) -> list[int]:
        """The prompt's token ids: the chat template, continuing a final assistant message (a reply prefix)."""
        text = chat_text(self.tokenizer, messages)
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def chat(self, messages: list[Message], *, max_new_tokens: int = 64, temperature: float = 0.0,
             phase: str = "answer", json_mode: bool = False, schema: dict[str, Any] | None = None,
             seed: int | None = None, stop: list[str] | None = None) -> ChatResult:
        return self.chat_batch([messages], max_new_tokens=max_new_tokens, temperature=temperature,
                               phase=phase, json_mode=json_mode, schema=schema, seed=seed, stop=stop)[0]

    def chat_batch(self, batch: list[list[Message]], *, max_new_tokens: int = 64, temperature: float = 0.0,
                   phase: str = "answer", json_mode: bool = False,
                   schema: dict[str, Any] | None = None, seed: int | None = None,
                   stop: list[str] | None = None) -> list[ChatResult]:
        """Generate for many conversations, ``batch_size`` at a time (longest first), all under
        ``schema``'s grammar when one is given (or any JSON with ``json_mode``). With ``seed``, each
        ``generate`` samples from a generator seeded with it (the global RNG is left as it was)."""
        structured = self.constrained and (schema is not None or json_mode)
        stops = stop_list(stop)
        encoded = [self._fit(m, max_new_tokens) for m in batch]
        results: list[ChatResult | None] = [None] * len(batch)

        def run(idx: list[int]) -> None:
            grammar = self.grammar().processor(schema) if structured else None
            for i, r in zip(idx, self._generate([encoded[i] for i in idx], max_new_tokens, temperature, grammar,
                                                seed, stops)):
                r.constrained = structured and schema is not None
                results[i] = r
                self.meter.add(phase, r)

        for i in self._prefix_first(encoded):  # a shared history: computed once, then reused one by one
            run([i])
        rest = [i for i in range(len(batch)) if results[i] is None]
        order = sorted(rest, key=lambda i: -len(encoded[i]))
        for s in range(0, len(order), self.batch_size):
            run(order[s:s + self.batch_size])
        return [r for r in results if r is not None]

    def _prefix_first(self, encoded: list[list[int]]) -> list[int]:
        """The prompts of a batch to generate one at a time from the prefix cache: those sharing a
        stored prefix, and those sharing ``prefix_cache_min_tokens`` with another prompt of the batch
        (the first of them computes and stores it, the others reuse it). Reusing a ~2k-token history
        costs a few tokens' compute; batching it recomputes it for every row."""
        pc = self.prefix_cache
        if pc is None or len(encoded) < 2:
            return []
        from ctxbench.llm.prefix_cache import common_prefix

        alone = []
        for i, ids in enumerate(encoded):
            if pc.shared(ids) or any(common_prefix(ids, other) >= pc.min_tokens and len(ids) > pc.min_tokens
                                     for j, other in enumerate(encoded) if j != i):
                alone.append(i)
        return alone

    def grammar(self) -> Any:
        if self._grammar is None:
            from ctxbench.llm.grammar import GrammarConstraint

            vocab = max(int(getattr(self.model.config, "vocab_size", 0) or 0), len(self.tokenizer))
            self._grammar = GrammarConstraint(self.tokenizer, vocab, self.eos_ids)
        return self._grammar

    def _seeded(self, seed: int | None) -> Any:
        """A context in which sampling draws from ``seed`` (torch's RNG forked, restored after); no-op for None."""
        import contextlib

        if seed is None:
            return contextlib.nullcontext()
        torch = self._torch
        device = torch.device(self.device)
        devices = [device.index or 0] if device.type == "cuda" else []

        @contextlib.contextmanager
        def forked() -> Any:
            with torch.random.fork_rng(devices=devices):
                torch.manual_seed(int(seed))
                yield
        return forked()

    def _fit(self, messages: list[Message], max_new_tokens: int) -> list[int]:
        """The prompt's token ids within ``context_window - max_new_tokens`` (see the module doc)."""
        budget = max(1, self._window - max_new_tokens)
        ids = self.encode_chat(messages)
        if len(ids) <= budget:
            return ids
        self.truncated_calls += 1
        ids = self.encode_chat(self._cut(messages, budget))
        return ids if len(ids) <= budget else ids[-budget:]

    def _cut(self, messages: list[Message], budget: int) -> list[Message]:
        return fit_messages(messages, budget, lambda m: len(self.encode_chat(m)), self.count_tokens)[0]

    def fitted(self, messages: list[Message], max_new_tokens: int) -> list[Message]:
        """``messages`` as :meth:`chat` sends them: the middle of the longest cut to fit the window (:mod:`.fit`)."""
        budget = max(1, self._window - max_new_tokens)
        return messages if len(self.encode_chat(messages)) <= budget else self._cut(messages, budget)

    def _generate(self, seqs: list[list[int]], max_new_tokens: int, temperature: float,
                  grammar: Any = None, seed: int | None = None, stops: list[str] | None = None) -> list[ChatResult]:
        stops = stops or []
        if temperature <= 0 and grammar is None and self._own_loop:
            rows = self._greedy(seqs, max_new_tokens, stops)
        else:
            rows = self._generate_hf(seqs, max_new_tokens, temperature, grammar, seed, stops)
        results = []
        for row, s in zip(rows, seqs):
            n, ended = len(row), False
            for j, t in enumerate(row):
                if t in self.eos_ids:
                    n, ended = j + 1, True
                    break
            text, stopped = apply_stop(self.tokenizer.decode(row[:n], skip_special_tokens=True), stops)
            results.append(ChatResult(text=text.strip(), prompt_tokens=len(s), completion_tokens=n,
                                      truncated=not (ended or stopped) and n >= max_new_tokens, stopped=stopped,
                                      token_source=TOKENIZER, served_model=self.model_name))
        return results

    def _greedy(self, seqs: list[list[int]], max_new_tokens: int, stops: list[str]) -> list[list[int]]:
        """Greedy replies from :func:`.decode.greedy_rows` (one prompt: from the prefix cache, stored after)."""
        from transformers import DynamicCache

        from ctxbench.llm.decode import greedy_rows

        tok = self.tokenizer

        def done(_: int, row: list[int]) -> bool:
            return bool(stops) and find_stop(tok.decode(row, skip_special_tokens=True), stops) is not None

        reuse = len(seqs) == 1 and self.prefix_cache is not None
        cache = self.prefix_cache.lookup(seqs[0])[0] if reuse else None
        if cache is None:
            cache = DynamicCache(config=self.model.config)
        with self._lock, self._torch.no_grad():
            rows = greedy_rows(self.model, seqs, pad_id=tok.pad_token_id, eos_ids=self.eos_ids,
                               max_new_tokens=max_new_tokens, done=done, cache=cache, cache_kwarg=self._cache_kwarg,
                               device=self.device, logits_to_keep=self._keep_last)
            if reuse:
                self.prefix_cache.store(seqs[0], cache)
        return rows

    def _generate_hf(self, seqs: list[list[int]], max_new_tokens: int, temperature: float, grammar: Any,
                     seed: int | None, stops: list[str]) -> list[list[int]]:
        """The generated tokens of each prompt from ``generate`` (sampling, a grammar, a model's own cache class)."""
        from transformers import GenerationConfig

        torch = self._torch
        width = max(len(s) for s in seqs)
        pad = self.tokenizer.pad_token_id
        device = self.device
        ids = torch.tensor([[pad] * (width - len(s)) + s for s in seqs], dtype=torch.long, device=device)
        mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in seqs], dtype=torch.long, device=device)
        sample = temperature > 0
        gen = GenerationConfig(max_new_tokens=max_new_tokens, do_sample=sample,
                               temperature=temperature if sample else None, top_p=None, top_k=None,
                               pad_token_id=pad, eos_token_id=self.eos_ids)
        processors = [grammar] if grammar else None
        criteria = {"stopping_criteria": stop_strings(self.tokenizer, stops, width)} if stops else {}
        with self._lock, torch.no_grad(), self._seeded(seed):
            if len(seqs) == 1 and self.prefix_cache is not None:
                out = self._generate_reusing(seqs[0], ids, mask, gen, processors, criteria)
            else:
                out = self.model.generate(input_ids=ids, attention_mask=mask, generation_config=gen,
                                          logits_processor=processors, **criteria)
        return out[:, width:].tolist()

    def _generate_reusing(self, seq: list[int], ids: Any, mask: Any, gen: Any, processors: Any,
                          criteria: dict[str, Any]) -> Any:
        """``generate`` for one prompt from the prefix cache's copy of its longest stored prefix (a
        fresh empty cache on a miss); the filled cache is stored as this prompt's KV afterwards.
        ``generate`` gets the full ``input_ids`` and mask and skips the cached positions."""
        from transformers import DynamicCache

        cache, _ = self.prefix_cache.lookup(seq)
        if cache is None:
            cache = DynamicCache(config=self.model.config)
        out = self.model.generate(input_ids=ids, attention_mask=mask, **{self._cache_kwarg: cache},
                                  generation_config=gen, logits_processor=processors, **criteria)
        self.prefix_cache.store(seq, cache)
        return out


@register("llm", "hf")
def build_hf(cfg: Any, bundle: Any = None) -> Any:
    return maybe_cached(HFChatLLM(cfg, bundle=bundle), cfg)
