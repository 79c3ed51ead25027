"""Fixed-size KV caches on the model's own attention: the runner and the system shared by every press.

A long token sequence is fed ``segment_len`` (B) tokens at a time through ``model(ids,
cache=DynamicCache)``; each segment attends to the cache (at most ``mem_size`` = M slots per layer
and KV head, or the press's per-layer budget) plus its own KV, and the press (:mod:`.press`,
applied by :mod:`.press_hooks`) brings every layer back to its budget right after that layer's
attention. Between segments the cache never holds more than M slots; the working set during a
segment is at most M + B. Answers continue from the cache with ``model.generate``.

Positions (``positions`` knob):
- ``absolute``: every token keeps the RoPE position it had in the original text. This is what the
  LoCoCo reference and H2O do (LoCoCo's compressed slots are mixes of rotated keys). Texts longer
  than the model's trained window run past its positions.
- ``cache``: positions are slot indices inside the cache (StreamingLLM, Sec. 3.2 of its paper):
  after each compression the kept keys are re-rotated to their new slot index, and the next
  segment continues at the cache length. Positions then never exceed M + B.
With no eviction both modes give identical positions, so M ≥ length reproduces the full model.

The kvpress protocol (``eval task=compression``, :meth:`FixedKVMethod.set_compression_ratio`): each
history of n tokens gets its own M = ceil((1 − r) × n) (``method.mem_size`` is not used), and by
default it is prefilled as one segment and compressed once (kvpress's protocol: the press decides
with the whole context in view, and the working set is n, as in kvpress); ``task.prefill=segments``
streams ``method.segment_len`` tokens at a time instead (working set M + B).
"""
from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import torch
import torch.nn.functional as F

from ctxbench.core.errors import ConfigError
from ctxbench.models.loading import cache_kwarg, model_device
from ctxbench.core.task_protocol import Scored, check_ratio, ratio_budget, ratio_extra
from ctxbench.core.types import History, Prediction, Question, Usage
from ctxbench.methods.base import TrainingFreeMethod
from ctxbench.methods.kv_prompt import qa_frame, stop_token_ids
from ctxbench.methods.press import LayerKV, Press, SegmentInfo
from ctxbench.methods.press_hooks import PressCall, checkpointing_on, decoder_of, dtype_seams, layers_not_checkpointed, pressed, rotate


# ---- the cache between calls --------------------------------------------------------------------

@dataclass
class KVState:
    layers: list[LayerKV] = field(default_factory=list)
    n_seen: int = 0  # tokens processed so far (absolute position of the next token)
    peak_slots: int = 0  # largest working set (cache + segment) seen during processing

    @property
    def slots(self) -> int:
        """Slots per layer and KV head (the mean over layers when a press gives layers their own budget)."""
        if not self.layers:
            return 0
        return round(sum(layer.slots for layer in self.layers) / len(self.layers))

    def kv_bytes(self) -> int:
        return sum(layer.nbytes() for layer in self.layers)

    def cache(self, config: Any) -> Any:
        """A transformers ``DynamicCache`` holding these layers (the tensors are shared, not copied:
        the cache grows by concatenation, so the state itself is never written). Every layer is a
        full layer whatever ``config`` says: ``DynamicCache(config=...)`` would build sliding-window
        layers for a model with ``sliding_window`` (Mistral-7B-v0.1: 4096) that silently drop all but
        the last window − 1 slots, while the press alone decides what the cache holds."""
        from transformers import DynamicCache

        cache = DynamicCache()  # config unused on purpose: full layers only (see above)
        for i, layer in enumerate(self.layers):
            cache.update(layer.k, layer.v, i)
        return cache


# ---- the runner ------------------------------------------------------------------------------------

class PressRunner:
    """Runs segments of tokens through a model over a :class:`KVState`, under a press.

    ``mem_size`` None = unbounded (full cache). ``detach_past``: the stored cache carries no graph
    into later segments except through a compression (LoCoCo's reference). With the model's
    gradient checkpointing on (transformers' per-layer flag), in training with grad enabled, each
    segment runs under non-reentrant checkpointing as a whole (transformers' layers would drop the
    cache): only its inputs are kept, and it is recomputed in backward.
    """

    def __init__(self, model: Any, mem_size: int | None, press: Press | None, positions: str = "absolute",
                 rope_scale: float = 1.0, detach_past: bool = True):
        if positions not in ("absolute", "cache"):
            raise ConfigError(f"method.positions={positions!r}: use 'absolute' or 'cache'")
        if mem_size is not None and mem_size < 1:
            raise ConfigError(f"method.mem_size={mem_size}: must be ≥ 1 (or null for a full cache)")
        self.model = model
        decoder = decoder_of(model)
        self.layers = decoder.layers
        self.attn = [layer.self_attn for layer in decoder.layers]
        self.rotary = decoder.rotary_emb
        self.mem_size = mem_size
        self.press = press
        self.positions = positions
        self.rope_scale = float(rope_scale)
        self.detach_past = detach_past
        self.cache_kwarg = cache_kwarg(model)
        self.seams = dtype_seams(model)
        self.rope_dtype = self.attn[0].q_proj.weight.dtype
        self._slot_rope: tuple[torch.Tensor, torch.Tensor] | None = None  # :meth:`unit_rope`'s table
        self.score_calls = 0  # attention-score computations over this runner's life (one per voting layer)

    def budget(self, layer_idx: int) -> int | None:
        if self.mem_size is None or self.press is None:
            return None
        return int(self.press.budget(layer_idx, len(self.attn), self.mem_size))

    def rope_positions(self, pos: torch.Tensor) -> torch.Tensor:
        """The position RoPE reads for token position ``pos`` (linear interpolation by ``rope_scale``)."""
        return pos.float() / self.rope_scale if self.rope_scale != 1.0 else pos

    def rope(self, like: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """RoPE cos/sin [1, n, d] for token positions ``pos`` [1, n], in the projections' dtype (the
        model's rotary module called directly: the hooks on it are for the model's own call)."""
        cos, sin = self.rotary.forward(like, self.rope_positions(pos))
        return cos.to(self.rope_dtype), sin.to(self.rope_dtype)

    def unit_rope(self, n: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """RoPE cos/sin [1, n, d] in fp32 for slot indices 0..n−1, as pure rotations (the rotary
        module's ``attention_scaling`` divided out, so the inverse is the transpose); computed once
        per runner for the longest n asked and sliced."""
        table = self._slot_rope
        if table is None or table[0].shape[1] < n or table[0].device != device:
            pos = torch.arange(n, device=device).view(1, -1)
            cos, sin = self.rotary.forward(torch.zeros(1, dtype=torch.float32, device=device), self.rope_positions(pos))
            scale = float(getattr(self.rotary, "attention_scaling", 1.0) or 1.0)
            table = self._slot_rope = (cos.float() / scale, sin.float() / scale)
        return table[0][:, :n], table[1][:, :n]

    def unrotate(self, k: torch.Tensor) -> torch.Tensor:
        """Keys [b, h, n, d] stored rotated at slot indices 0..n−1, rotated back to position 0 in fp32
        (returned in fp32: the press acts on them there, and :meth:`to_slots` rounds once)."""
        cos, sin = self.unit_rope(k.shape[-2], k.device)
        return rotate(k.float(), cos, -sin)

    def to_slots(self, k: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """fp32 keys at position 0 rotated to slot indices 0..n−1, then cast to the cache's ``dtype``.
        With :meth:`unrotate` this is one rotation by the change of slot in fp32 and one rounding: a
        slot that did not move comes back as it was (to fp32 rounding, far below the cache dtype's)."""
        cos, sin = self.unit_rope(k.shape[-2], k.device)
        return rotate(k.float(), cos, sin).to(dtype)

    def squeeze(self, kv: LayerKV, info: SegmentInfo, budget: int) -> LayerKV:
        """The press on one layer over its budget. ``positions=cache``: the press sees the keys at
        position 0 in fp32 and the kept ones go back rotated at their new slot indices, rounded once."""
        dtype = kv.k.dtype
        if self.positions == "cache":
            kv = LayerKV(self.unrotate(kv.k), kv.v, kv.pos, kv.score)
        kv = self.press.compress(kv, info, budget)
        if kv.slots > budget:
            raise RuntimeError(f"{type(self.press).__name__} left {kv.slots} slots in layer {info.layer_idx}, "
                               f"over its budget {budget}")
        if self.positions == "cache":
            kv = LayerKV(self.to_slots(kv.k, dtype), kv.v, kv.pos, kv.score)
        return kv

    def forward(self, state: KVState, input_ids: torch.Tensor, phase: str = "ingest",
                compress: bool = True, logits_to_keep: int | None = 0) -> torch.Tensor | None:
        """Process one segment [b, T]; update ``state`` in place; return logits [b, T, vocab] (with
        ``logits_to_keep`` = k > 0 only the last k tokens' [b, k, vocab]: the LM head, a fifth of a
        SmolLM2 forward's work, runs on those rows only; None: no LM head at all, the decoder alone,
        as kvpress's pipeline prefills, and None is returned; the cache is the same)."""
        args = (state.layers, state.n_seen, input_ids, phase, compress, logits_to_keep)
        if self.model.training and torch.is_grad_enabled() and checkpointing_on(self.layers):
            from torch.utils.checkpoint import checkpoint

            logits, layers = checkpoint(self._step, *args, use_reentrant=False)
        else:
            logits, layers = self._step(*args)
        T = input_ids.shape[1]
        state.peak_slots = max(state.peak_slots, state.slots + T)
        state.layers = layers
        state.n_seen += T
        return logits

    def _step(self, layers: list[LayerKV], n_seen: int, input_ids: torch.Tensor, phase: str,
              compress: bool, logits_to_keep: int | None = 0) -> tuple[torch.Tensor | None, list[LayerKV]]:
        """One segment as a function of its inputs (what segment checkpointing recomputes)."""
        cache = KVState(layers).cache(self.model.config)
        call = PressCall(self, cache, layers, n_seen, input_ids.shape[1], phase=phase, compress=compress)
        keep = {"logits_to_keep": int(logits_to_keep)} if logits_to_keep else {}
        with layers_not_checkpointed(self.layers), pressed(call):
            if logits_to_keep is None:  # the decoder alone: one token's LM head reads all its weights (SmolLM2: 113 MB)
                decoder_of(self.model)(input_ids=input_ids, **{self.cache_kwarg: cache}, use_cache=True)
                logits = None
            else:
                logits = self.model(input_ids=input_ids, **{self.cache_kwarg: cache}, use_cache=True, **keep).logits
        self.score_calls += call.score_calls
        return logits, call.layers_out

    def stream(self, state: KVState, ids: torch.Tensor, segment_len: int, progress: bool = False,
               on_logits: Any = None, logits_to_keep: int | None = None) -> KVState:
        """Feed [b, N] tokens segment by segment; ``on_logits(start, logits)`` sees each segment's logits
        (the last ``logits_to_keep`` of them; None = all with ``on_logits``; without ``on_logits`` no
        LM head runs at all, since ingestion reads no logits)."""
        from tqdm.auto import tqdm

        keep = logits_to_keep if logits_to_keep is not None else (0 if on_logits is not None else None)
        starts = range(0, ids.shape[1], segment_len)
        for s in tqdm(starts, disable=not progress, desc="segments", leave=False):
            logits = self.forward(state, ids[:, s: s + segment_len], logits_to_keep=keep)
            if on_logits is not None:
                on_logits(s, logits)
        return state

    @torch.no_grad()
    def generate(self, state: KVState, prompt_ids: list[int], max_new_tokens: int, stop_ids: list[int],
                 pad_id: int | None, min_new_tokens: int = 0) -> tuple[list[int], KVState]:
        """Greedy continuation of ``state`` with ``prompt_ids`` (the question): all but its last token go
        through :meth:`forward` as the question segment (a question-aware press acts there), then
        ``model.generate`` decodes from the cache. ``state`` is not modified; returns the new tokens
        (stop token dropped) and the state the answer read (after the question)."""
        st = KVState(list(state.layers), state.n_seen, state.peak_slots)
        dev = model_device(self.model)
        if len(prompt_ids) > 1:
            self.forward(st, torch.tensor([prompt_ids[:-1]], device=dev), phase="question")
        if max_new_tokens <= 0:
            return [], st
        cache = st.cache(self.model.config)
        base = st.layers[0].slots if st.layers else 0
        filler = pad_id if pad_id is not None else prompt_ids[-1]
        ids = torch.tensor([[filler] * base + [prompt_ids[-1]]], device=dev)  # the cached part is skipped
        call = PressCall(self, cache, st.layers, st.n_seen, 1, compress=False, track=False)
        with pressed(call):
            out = self.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), **{self.cache_kwarg: cache},
                                      max_new_tokens=max_new_tokens, min_new_tokens=min_new_tokens or None,
                                      do_sample=False, eos_token_id=stop_ids or None,
                                      pad_token_id=pad_id if pad_id is not None else (stop_ids[0] if stop_ids else 0),
                                      temperature=None, top_p=None, top_k=None)
        new = out[0, ids.shape[1]:].tolist()
        for j, t in enumerate(new):
            if t in stop_ids:
                new = new[:j]
                break
        st.peak_slots = max(st.peak_slots, base + 1 + len(new))
        return new, st


# ---- memory measurement --------------------------------------------------------------------------

def reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark for this process (Linux ≥ 4.0); False when not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss_bytes() -> int:
    """Peak resident memory of this process since the last reset (VmHWM), or ru_maxrss."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


# ---- perplexity ---------------------------------------------------------------------------------

def nll_sum(logits: torch.Tensor, targets: torch.Tensor) -> float:
    """Summed NLL (nats) of ``targets`` [n] under next-token ``logits`` [n, vocab] (softmax in fp32)."""
    return float(F.cross_entropy(logits.float(), targets, reduction="sum"))


@torch.no_grad()
def stream_perplexity(runner: PressRunner, ids: list[int] | torch.Tensor, segment_len: int,
                      progress: bool = False, marks: list[int] | None = None) -> dict[str, Any]:
    """Next-token NLL of a long text processed segment by segment through the fixed cache.

    Every token after the first is scored, including each segment's first token (predicted from the
    previous segment's last logits). Returns nll, ppl, n_tokens, kv slots/bytes held at the end,
    peak working slots, peak RSS (reset at the start) and seconds; with ``marks`` also ``at``: the
    same numbers for the first m tokens, for each m in marks, as a text of m tokens would give them:
    the NLL of its tokens 2..m (m − 1 scored, the tokens the base model scores over that prefix) and
    the cache a stream of m tokens leaves. A mark inside a segment (m not a multiple of
    ``segment_len``) takes the NLL of the segment's tokens up to m (each token reads only what
    precedes it) and runs the segment's first tokens up to m once more from the cache before it, for
    the cache; that extra run is not counted in ``seconds``.
    """
    from tqdm.auto import tqdm

    ids_t = torch.as_tensor(ids, dtype=torch.long).view(1, -1)
    ids_t = ids_t.to(next(runner.model.parameters()).device)
    n = int(ids_t.shape[1])
    marks_left = sorted(int(m) for m in (marks or []) if int(m) <= n)
    at: list[dict[str, Any]] = []
    state = KVState()
    total, count, aside = 0.0, 0, 0.0
    prev_last: torch.Tensor | None = None
    t0 = time.perf_counter()
    reset_peak_rss()
    for start in tqdm(range(0, n, segment_len), disable=not progress, desc="segments", leave=False):
        before = KVState(list(state.layers), state.n_seen, state.peak_slots)
        seg = ids_t[:, start: start + segment_len]
        logits = runner.forward(state, seg)[0].float()
        lg = logits if prev_last is None else torch.cat([prev_last, logits], dim=0)
        tgt = seg[0, 1:] if prev_last is None else seg[0]
        losses = F.cross_entropy(lg[: tgt.shape[0]], tgt, reduction="none")  # tokens count+1 .. end−1
        prev_last = logits[-1:]
        end = start + int(seg.shape[1])
        while marks_left and marks_left[0] <= end:
            m = marks_left.pop(0)
            held = state
            if m < end:  # the cache a text of m tokens leaves: its last segment is the first m − start tokens
                t = time.perf_counter()
                held = KVState(list(before.layers), before.n_seen, before.peak_slots)
                runner.forward(held, ids_t[:, start:m])
                aside += time.perf_counter() - t
            part = max(m - 1 - count, 0)
            at.append(stream_record(m, total + float(losses[:part].sum()), count + part, held, t0 + aside))
        total += float(losses.sum())
        count += int(tgt.shape[0])
    out = stream_record(n, total, count, state, t0 + aside)
    if marks:
        out["at"] = at
    return out


def stream_record(n_in: int, summed: float, n_scored: int, state: KVState, t0: float) -> dict[str, Any]:
    """What :func:`stream_perplexity` reports for the first ``n_in`` tokens: mean NLL over the
    ``n_scored`` tokens, the cache ``state`` they leave, the peak RSS so far and seconds since ``t0``."""
    nll = summed / max(n_scored, 1)
    return {"tokens_in": n_in, "nll": nll, "ppl": math.exp(nll), "n_tokens": n_scored, "kv_slots": state.slots,
            "kv_bytes": state.kv_bytes(), "peak_slots": state.peak_slots, "peak_rss_bytes": peak_rss_bytes(),
            "seconds": time.perf_counter() - t0}


@dataclass
class Continuation:
    """What :func:`continuation_nll` measured: the summed NLL of the target, the cache the target read
    (history slots + the prompt's, before the target's own) and how many of its slots are the prompt's."""

    nll: float
    read: KVState
    prompt_slots: int

    @property
    def history_slots(self) -> int:
        return self.read.slots - self.prompt_slots

    def history_kv_bytes(self) -> int:
        """Bytes of the history's KV the target read (every layer holds the prompt's slots last)."""
        q = self.prompt_slots
        return sum(layer.nbytes() * (layer.slots - q) // layer.slots for layer in self.read.layers if layer.slots)


@torch.no_grad()
def continuation_nll(ingest: PressRunner, read: PressRunner, context: Sequence[int], prompt: Sequence[int],
                     target: Sequence[int], segment_len: int) -> Continuation:
    """The summed NLL of ``target`` read on top of ``context`` streamed through a fixed cache.

    ``context`` goes through ``ingest`` segment by segment, as :meth:`FixedKVMethod.ingest` does; then,
    as :meth:`PressRunner.generate` answers, all but the last token of ``prompt`` go through ``read``
    as the question segment (a question-aware press cuts the history to M there, voting with the
    prompt's queries only); the last prompt token and the target are read on top of that cache with
    no compression, in one segment. Every target token is scored: the first from the last prompt
    token, or from the context's last logits when there is no prompt."""
    target = [int(t) for t in target]
    prompt = [int(t) for t in prompt]
    if not target:
        raise ValueError("score_continuation: the target is empty (nothing to score)")
    if not context and not prompt:
        raise ValueError("score_continuation: no context and no prompt, so nothing precedes the first target token")
    dev = model_device(read.model)
    last: list[torch.Tensor] = []
    state = KVState()

    def keep_last(start: int, logits: torch.Tensor) -> None:
        last[:] = [logits[0, -1:]]

    if context:
        ids = torch.tensor([list(context)], dtype=torch.long, device=dev)
        ingest.stream(state, ids, segment_len, on_logits=keep_last, logits_to_keep=1)
    st = KVState(list(state.layers), state.n_seen, state.peak_slots)
    if len(prompt) > 1:
        read.forward(st, torch.tensor([prompt[:-1]], device=dev), phase="question")
    seen = KVState(list(st.layers), st.n_seen, st.peak_slots)
    feed = prompt[-1:] + target[:-1]
    logits = [] if prompt else [last[0]]
    if feed:
        logits.append(read.forward(st, torch.tensor([feed], device=dev), phase="question", compress=False)[0])
    nll = nll_sum(torch.cat(logits, dim=0), torch.tensor(target, device=dev))
    return Continuation(nll, seen, max(len(prompt) - 1, 0))


@contextlib.contextmanager
def base_weights(pairs: list[tuple[torch.nn.Parameter, torch.Tensor]]) -> Iterator[None]:
    """Each parameter holds the given base tensor inside the ``with`` (the tuned one again after)."""
    tuned = [p.data for p, _ in pairs]
    try:
        for p, base in pairs:
            p.data = base
        yield
    finally:
        for (p, _), t in zip(pairs, tuned):
            p.data = t


# ---- the shared method / system ----------------------------------------------------------------

class FixedKVMethod(TrainingFreeMethod):
    """A system that streams a history through a fixed KV cache under a press and answers from it.

    Subclasses provide :meth:`make_press` (training-free unless they define a loss, as LoCoCo). Config keys: ``segment_len`` (B), ``mem_size`` (M;
    null = unbounded full cache), ``positions`` (absolute | cache), ``max_new_tokens``; a
    question-aware press may hold ``ingest_size`` slots until the question cuts them to M.
    """

    def __init__(self, cfg: Any, bundle: Any):
        super().__init__(cfg, bundle)
        self.segment_len = cfg.segment_len
        if self.segment_len < 1:
            raise ConfigError(f"method.segment_len={self.segment_len}: must be ≥ 1")
        mem = cfg.mem_size
        self.mem_size = None if mem in (None, "null", 0) else int(mem)
        self.model = bundle.model  # registered, so trainable base weights (LoRA, norms) are saved
        self._state: KVState | None = None
        self._prefix: str = ""
        self._speakers: list[str] = []
        self._ingest_seconds = 0.0
        self._ingest_tokens = 0
        self._ingest_peak_rss = 0
        self._ratio: float | None = None  # task=compression: M per history from the ratio
        self._prefill = "whole"
        self._budget: int | None = None  # this history's M under the ratio

    def make_press(self) -> Press | None:
        raise NotImplementedError

    # -- the kvpress protocol (task=compression; core/task_protocol.py) --------------------------------
    def set_compression_ratio(self, ratio: float) -> None:
        """From now on each history of n tokens is kept in M = ceil((1 − ratio) × n) slots per layer and
        KV head (the press's per-layer budgets average M), whatever ``method.mem_size`` says."""
        self._ratio = check_ratio(ratio, "compression ratio")

    def set_compression_prefill(self, mode: str) -> None:
        """``whole``: one prefill of the history, then one compression (kvpress); ``segments``:
        ``method.segment_len`` tokens at a time (this method's own streaming)."""
        if mode not in ("whole", "segments"):
            raise ConfigError(f"task.prefill={mode!r}: use whole or segments")
        self._prefill = mode

    def history_budget(self, n: int) -> int | None:
        """The slots a history of ``n`` tokens keeps under the ratio (None = unbounded: the full cache)."""
        return ratio_budget(self._ratio, n)

    def slot_budget(self) -> int | None:
        """M now: this history's under the ratio, else ``method.mem_size``."""
        return self._budget if self._ratio is not None and self._budget is not None else self.mem_size

    # the base tensors of base-model weights a method tunes in place (LoCoCo's train_embed_norm),
    # swapped in by plain_lm
    _base_weights: list[tuple[torch.nn.Parameter, torch.Tensor]] = []

    @property
    def lm(self) -> Any:
        return self.model

    def positions(self) -> str:
        pos = self.cfg.positions
        if pos is None:
            raise ConfigError(f"method.positions is required for method={self.cfg.name}: absolute | cache")
        return str(pos)

    def rope_factor(self) -> float:
        """Linear positional interpolation: none here (LoCoCo's ``rope_scaling_factor`` overrides it)."""
        return 1.0

    def runner(self, mem_size: int | None | str = "cfg") -> PressRunner:
        """A runner at ``mem_size`` ("cfg": :meth:`slot_budget`, M under a ratio or ``method.mem_size``)."""
        return PressRunner(self.lm, self.slot_budget() if mem_size == "cfg" else mem_size, self.make_press(),
                           positions=self.positions(), rope_scale=self.rope_factor())

    # -- evaluation helpers ------------------------------------------------------------------
    def perplexity(self, ids: list[int] | torch.Tensor, progress: bool = False,
                   marks: list[int] | None = None) -> dict[str, Any]:
        """Perplexity of a long text through this method's fixed cache (see :func:`stream_perplexity`)."""
        self.eval()
        return stream_perplexity(self.runner(), ids, self.segment_len, progress=progress, marks=marks)

    # -- the eval-task protocol (core/task_protocol.py) ---------------------------------------------
    def score_continuation(self, context: Sequence[Sequence[int]], target: Sequence[int],
                           prompt: Sequence[int] = ()) -> Scored:
        """Summed NLL of ``target`` after the context chunks (concatenated) streamed through the
        fixed cache and ``prompt`` read on top (a question-aware press votes with the prompt, as with
        a question): :func:`continuation_nll`. ``memory_slots``: history slots the target read."""
        self.eval()
        flat = [int(t) for chunk in context for t in chunk]
        out = continuation_nll(self.ingest_runner(), self.runner(), flat, prompt, target, self.segment_len)
        return Scored(nll=out.nll, tokens=len(target), context_tokens=len(flat), memory_slots=out.history_slots,
                      kv_bytes=out.history_kv_bytes())

    @contextlib.contextmanager
    def plain_lm(self) -> Iterator[Any]:
        """The base causal LM: no press (presses act only inside a runner's call), LoRA off, and
        base-model weights a method tuned in place (LoCoCo's embeddings/norms) swapped back."""
        model = self.lm
        with contextlib.ExitStack() as stack:
            if hasattr(model, "disable_adapter"):
                stack.enter_context(model.disable_adapter())
            stack.enter_context(base_weights(self._base_weights))
            yield model

    # -- as a system ---------------------------------------------------------------------------
    def _frame(self, question: Question | None, speakers: list[str]) -> tuple[str, str]:
        """(text before the history, text after it) of the shared QA chat prompt (:func:`.kv_prompt.qa_frame`)."""
        return qa_frame(self.tokenizer, self.answer_prompt, question, speakers)

    def ingest_runner(self) -> PressRunner:
        """The runner ingestion uses: M slots (a question-aware press may hold more: :class:`QuestionAwareKVMethod`)."""
        return self.runner()

    def ingest_plan(self, n: int) -> tuple[PressRunner, int]:
        """The runner and segment length that ingest a history of ``n`` tokens: under a ratio (the
        kvpress protocol) this history's M, in one prefill unless ``task.prefill=segments``."""
        segment = self.segment_len
        if self._ratio is not None:
            self._budget = self.history_budget(n)
            segment = max(n, 1) if self._prefill == "whole" else self.segment_len
        return self.ingest_runner(), segment

    @torch.no_grad()
    def ingest(self, history: History) -> None:
        """Stream the whole rendered history through the fixed cache (segment by segment)."""
        from ctxbench.core.render import render_history

        self.eval()
        t0 = time.perf_counter()
        self._speakers = list(history.speakers)
        before, _ = self._frame(None, self._speakers)
        self._prefix = before
        ids = self.tokenizer(before + render_history(history, "locomo"), add_special_tokens=False)["input_ids"]
        ids_t = torch.tensor([ids], dtype=torch.long, device=self.device)
        runner, segment = self.ingest_plan(len(ids))
        reset_peak_rss()
        self._state = runner.stream(KVState(), ids_t, segment)
        self._ingest_peak_rss = peak_rss_bytes()
        self._ingest_tokens = len(ids)
        self._ingest_seconds = time.perf_counter() - t0

    def construction_usage(self) -> Usage:
        """What ingesting the current history cost and what it keeps."""
        st = self._state
        # construction = the history tokens the model read to build the cache, one forward per segment
        # (as ICAE's encoder tokens and CCM's compressed steps count), so a board compares like with like
        whole = self._ratio is not None and self._prefill == "whole"
        return Usage(construction_prompt_tokens=self._ingest_tokens,
                     construction_calls=(1 if whole else -(-self._ingest_tokens // self.segment_len)) if st else 0,
                     memory_items=st.slots if st else 0, memory_tokens=self._ingest_tokens,
                     kv_bytes=st.kv_bytes() if st else 0, ingest_seconds=self._ingest_seconds,
                     extra={"peak_working_slots": st.peak_slots if st else 0,
                            "ingest_peak_rss_bytes": self._ingest_peak_rss})

    @torch.no_grad()
    def answer(self, question: Question) -> Prediction:
        """Continue from the ingested cache with the question, then decode greedily (raw text)."""
        if self._state is None:
            raise RuntimeError("answer() called before ingest()")
        t0 = time.perf_counter()
        tok = self.tokenizer
        before, after = self._frame(question, self._speakers)
        if before != self._prefix:
            raise ValueError("the QA prompt's text before the context depends on the question; cannot stream it")
        held_slots, held_bytes = self._state.slots, self._state.kv_bytes()
        q_ids = tok(after, add_special_tokens=False)["input_ids"]
        # the question is the last segment: it attends to the cache and itself; only a question-aware
        # press compresses there, and nothing is evicted while decoding
        out, read = self.runner().generate(self._state, q_ids, self.answer_max_tokens(question), stop_token_ids(tok),
                                           tok.pad_token_id)
        raw = tok.decode(out, skip_special_tokens=True).strip()
        context = read.slots - (len(q_ids) - 1)  # cache slots of the history the answer read
        usage = Usage(answer_prompt_tokens=len(q_ids), answer_completion_tokens=len(out), answer_calls=1,
                      held_kv_slots=context, memory_items=held_slots, memory_tokens=self._ingest_tokens,
                      kv_bytes=held_bytes, answer_seconds=time.perf_counter() - t0,
                      extra={"kv_slots_per_layer_head": held_slots, "peak_working_slots": read.peak_slots,
                             "ingest_peak_rss_bytes": self._ingest_peak_rss, "history_tokens": self._ingest_tokens,
                             "mem_size": self.slot_budget(), "segment_len": self.segment_len,
                             **ratio_extra(self._ratio, self._budget)})
        return Prediction(text=raw, usage=usage)


class QuestionAwareKVMethod(FixedKVMethod):
    """A press that chooses again when the question arrives (SnapKV, PyramidKV): ingestion may hold
    ``method.ingest_size`` slots until the question cuts them to M."""

    def ingest_runner(self) -> PressRunner:
        """``method.ingest_size`` slots until the question, except under a ratio: there the history is
        ingested at its M (query-agnostic means the question never chooses what the history keeps)."""
        size = self.cfg.ingest_size
        if self._ratio is not None or size in (None, "null"):
            return self.runner()
        return self.runner(int(size))
