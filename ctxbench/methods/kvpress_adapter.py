"""NVIDIA kvpress's presses as a ctxbench method (``method=kvpress method.press=snapkv``).

Under ``task=compression`` (:meth:`KVPressMethod.set_compression_ratio`) the press's own
``compression_ratio`` is the task's ratio. Ingest: one prefill of the QA prompt's head + the rendered history under the press, into a
``DynamicCache`` (the press compresses each layer right after its attention). Answer: the question
and the greedy decode continue at the text's *true* positions (explicit ``position_ids`` starting at
the uncompressed length, as kvpress's own ``pipeline.py`` does), on a copy of the pressed cache.
``model.generate`` over placeholder ids would put the question at the compressed length instead.

kvpress is optional and imported only when this method is built (see docs/kvpress.md). Only
prefill presses are supported: a decoding-time press (DecodingPress, PrefillDecodingPress,
DMSPress, any ``*Decoding*`` class) compresses while generating, which this method never runs
under a press, so it is refused.
"""
from __future__ import annotations

import copy
import dataclasses
import time
from typing import Any

import torch

from ctxbench.config.schemas.method import KvpressMethod
from ctxbench.core.errors import ConfigError
from ctxbench.core.registry import register
from ctxbench.core.task_protocol import check_ratio, ratio_budget, ratio_extra
from ctxbench.core.types import History, Prediction, Question, Usage
from ctxbench.methods.base import TrainingFreeMethod, optional_package
from ctxbench.methods.kv_cache import peak_rss_bytes, reset_peak_rss
from ctxbench.methods.kv_prompt import qa_frame, stop_token_ids
from ctxbench.models.loading import cache_kwarg

INSTALL = "pip install --no-deps kvpress==0.5.5 'cachetools>=5.5.2,<6' 'fire>=0.6.0,<0.7' termcolor"
ALIASES = {"knorm": "KnormPress", "streamingllm": "StreamingLLMPress", "snapkv": "SnapKVPress",
           "expected_attention": "ExpectedAttentionPress", "observed_attention": "ObservedAttentionPress",
           "tova": "TOVAPress", "random": "RandomPress"}
DECODING_PRESSES = ("DecodingPress", "PrefillDecodingPress", "DMSPress")
# presses that leave layers with different cache lengths: transformers builds one causal mask for all
# layers from layer 0's length, so the question's attention fails in the other layers
PER_LAYER_PRESSES = ("PyramidKVPress", "PerLayerCompressionPress")


def import_kvpress() -> Any:
    return optional_package("kvpress", "method=kvpress needs", INSTALL, "--no-deps because kvpress pins transformers<5.3")


def bridged(hook: Any) -> Any:
    """``hook`` (a press's bound ``forward_hook``) seeing the attention kwargs under the names kvpress 0.5.5 reads.

    Why: kvpress's ``BasePress.forward_hook`` reads ``kwargs["past_key_values"]`` and
    ``kwargs["cache_position"]`` (base_press.py:140, :145). transformers ≥ 5.3 passes the cache to the
    attention layer as ``cache`` (``LlamaDecoderLayer`` → ``self_attn(..., cache=cache)``) and no
    longer creates ``cache_position`` at all (positions are only ``position_ids``). So every press
    fails with ``KeyError: 'past_key_values'`` on its first prefill. This supplies the two: the cache
    under its old name, and ``cache_position = position_ids[0]`` (what it was for batch 1, and what
    ``is_prefilling`` compares with the query length).

    Why per instance and not a patch of ``BasePress``: the wrapper is set as the press *instance's*
    ``forward_hook`` attribute, which ``BasePress.__call__`` registers on every attention layer; kvpress
    itself, other press objects and every other user of the process are left as shipped. A missing
    or new-named kwarg only ever reaches this one press's hook.
    """

    def run(module: Any, args: Any, kwargs: dict, output: Any) -> Any:
        kw = dict(kwargs)
        if "past_key_values" not in kw and "cache" in kw:
            kw["past_key_values"] = kw["cache"]
        if "cache_position" not in kw and kw.get("position_ids") is not None:
            kw["cache_position"] = kw["position_ids"][0]
        return hook(module, args, kw, output)

    return run


def press_class(kvpress: Any, name: str) -> type:
    """The kvpress class named by ``method.press`` (an alias or a class name); decoding presses refused."""
    cls_name = ALIASES.get(name.lower(), name)
    cls = getattr(kvpress, cls_name, None)
    if not (isinstance(cls, type) and issubclass(cls, kvpress.BasePress)):
        known = sorted(ALIASES) + sorted(n for n in kvpress.__all__ if n.endswith("Press"))
        raise ConfigError(f"method.press={name!r} is not a kvpress press; use one of {', '.join(known)}")
    decoding = tuple(getattr(kvpress, n) for n in DECODING_PRESSES if hasattr(kvpress, n))
    if "decoding" in cls.__name__.lower() or issubclass(cls, decoding):
        raise ConfigError(f"method.press={name!r} ({cls.__name__}) is a decoding-time press: it compresses while "
                          "generating, and method=kvpress applies a press only to the prefill of the history; "
                          "use a prefill press (e.g. snapkv, knorm, streamingllm)")
    per_layer = tuple(getattr(kvpress, n) for n in PER_LAYER_PRESSES if hasattr(kvpress, n))
    if issubclass(cls, per_layer):
        raise ConfigError(f"method.press={name!r} ({cls.__name__}) keeps a different number of slots per layer, and "
                          "transformers builds one attention mask from layer 0's cache length, so answering from it "
                          "fails; use method=pyramidkv (ctxbench's own, per-layer masks) instead")
    return cls


def make_press(cfg: Any) -> Any:
    """The configured press, built from ``method.press``, ``method.compression_ratio`` and ``method.press_kwargs``."""
    kvpress = import_kvpress()
    name = str(cfg.press or "")
    cls = press_class(kvpress, name)
    from omegaconf import DictConfig, OmegaConf

    extra = cfg.press_kwargs or {}
    kwargs = dict(OmegaConf.to_container(extra, resolve=True) if isinstance(extra, DictConfig) else extra)
    ratio = cfg.compression_ratio
    if ratio is not None and "compression_ratio" in {f.name for f in dataclasses.fields(cls) if f.init}:
        kwargs.setdefault("compression_ratio", float(ratio))
    try:
        press = cls(**kwargs)
    except (TypeError, AssertionError, ValueError) as e:
        raise ConfigError(f"method.press={name!r} with method.press_kwargs={kwargs}: {e}") from e
    press.forward_hook = bridged(press.forward_hook)  # instance attribute: __call__ registers this one
    return press


def cache_slots(cache: Any) -> list[int]:
    return [int(cache.get_seq_length(i)) for i in range(len(cache.layers))]


def cache_bytes(cache: Any) -> int:
    return sum(lay.keys.numel() * lay.keys.element_size() + lay.values.numel() * lay.values.element_size()
               for lay in cache.layers)


@register("method", "kvpress")
class KVPressMethod(TrainingFreeMethod):
    """A kvpress press compressing the prefill of the history; answers greedily from the pressed cache."""
    Settings = KvpressMethod  # its config schema (ctxbench/config/schemas/method.py)

    def __init__(self, cfg: Any, bundle: Any):
        super().__init__(cfg, bundle)
        self.model = bundle.model
        self._cache_kw = cache_kwarg(self.model)  # the forward's keyword for a KV cache (transformers version)
        self.press = make_press(cfg)
        attn = getattr(self.model.config, "_attn_implementation", None)
        if "ObservedAttention" in type(self.press).__name__ and attn != "eager":
            raise ConfigError(f"method.press={cfg.press!r} reads the attention weights, which only eager "
                              f"attention returns: set model.attn_implementation=eager (it is {attn!r})")
        self._cache: Any = None
        self._prefix = ""
        self._speakers: list[str] = []
        self._n_text = 0
        self._ingest_seconds = 0.0
        self._ingest_peak_rss = 0
        self._ratio: float | None = None  # task=compression

    def set_compression_ratio(self, ratio: float) -> None:
        """The press's own ``compression_ratio`` set to ``ratio`` (kvpress keeps int((1 − r) × n) ≤ the budget)."""
        ratio = check_ratio(ratio, "compression ratio")
        if not hasattr(self.press, "compression_ratio"):
            raise ConfigError(f"task=compression: method.press={self.cfg.press!r} ({type(self.press).__name__}) has no "
                              "compression_ratio; use a press that compresses to a ratio (e.g. snapkv, knorm)")
        self.press.compression_ratio = ratio
        self._ratio = ratio

    # -- as a system -----------------------------------------------------------------------------
    @torch.no_grad()
    def ingest(self, history: History) -> None:
        """Prefill the QA head + rendered history once, under the press."""
        from transformers import DynamicCache

        from ctxbench.core.render import render_history

        self.eval()
        t0 = time.perf_counter()
        self._speakers = list(history.speakers)
        before, _ = qa_frame(self.tokenizer, self.answer_prompt, None, self._speakers)
        self._prefix = before
        ids = self.tokenizer(before + render_history(history, "locomo"), add_special_tokens=False)["input_ids"]
        cache = DynamicCache()
        reset_peak_rss()
        with self.press(self.model):
            self.model.model(input_ids=torch.tensor([ids], device=self.device), **{self._cache_kw: cache}, use_cache=True)
        self._ingest_peak_rss = peak_rss_bytes()
        if len(set(cache_slots(cache))) > 1:  # a press not in PER_LAYER_PRESSES that still budgets per layer
            raise ConfigError(f"method.press={self.cfg.press!r} left layers with different cache lengths "
                              f"{sorted(set(cache_slots(cache)))}; method=kvpress needs one length for all layers")
        self._cache, self._n_text = cache, len(ids)
        self._ingest_seconds = time.perf_counter() - t0

    def construction_usage(self) -> Usage:
        c = self._cache
        slots = cache_slots(c) if c is not None else [0]
        return Usage(construction_prompt_tokens=self._n_text, construction_calls=1 if c is not None else 0,
                     memory_items=max(slots), memory_tokens=self._n_text, kv_bytes=cache_bytes(c) if c else 0,
                     ingest_seconds=self._ingest_seconds,
                     extra={"kv_slots_per_layer": slots, "ingest_peak_rss_bytes": self._ingest_peak_rss})

    @torch.no_grad()
    def answer(self, question: Question) -> Prediction:
        """The question and a greedy decode at the text's true positions, on a copy of the pressed cache."""
        if self._cache is None:
            raise RuntimeError("answer() called before ingest()")
        t0 = time.perf_counter()
        tok = self.tokenizer
        before, after = qa_frame(tok, self.answer_prompt, question, self._speakers)
        if before != self._prefix:
            raise ValueError("the QA prompt's text before the context depends on the question; cannot prefill it")
        cache = copy.deepcopy(self._cache)  # the ingested cache stays as pressed
        slots, held_bytes = cache_slots(cache), cache_bytes(cache)
        q_ids = tok(after, add_special_tokens=False)["input_ids"]
        pos = self._n_text  # the question continues at the text's true positions, not the cache length
        stop = set(stop_token_ids(tok))
        step = torch.tensor([q_ids], device=self.device)
        out: list[int] = []
        cap = self.answer_max_tokens(question)
        while len(out) < cap:
            position_ids = torch.arange(pos, pos + step.shape[1], device=self.device).unsqueeze(0)
            logits = self.model(input_ids=step, **{self._cache_kw: cache}, position_ids=position_ids,
                                use_cache=True, logits_to_keep=1).logits
            pos += step.shape[1]
            nxt = int(logits[0, -1].argmax())
            if nxt in stop:
                break
            out.append(nxt)
            step = torch.tensor([[nxt]], device=self.device)
        raw = tok.decode(out, skip_special_tokens=True).strip()
        usage = Usage(answer_prompt_tokens=len(q_ids), answer_completion_tokens=len(out), answer_calls=1,
                      held_kv_slots=max(slots), memory_items=max(slots), memory_tokens=self._n_text,
                      kv_bytes=held_bytes, answer_seconds=time.perf_counter() - t0,
                      extra={"kv_slots_per_layer": slots, "history_tokens": self._n_text,
                             "ingest_peak_rss_bytes": self._ingest_peak_rss, "press": type(self.press).__name__,
                             "compression_ratio": getattr(self.press, "compression_ratio", None),
                             **ratio_extra(self._ratio, None if self._ratio is None
                                           else ratio_budget(self._ratio, self._n_text))})
        return Prediction(text=raw, usage=usage)
