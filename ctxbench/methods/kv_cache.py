"""Segment-level processing with a fixed-size KV cache, shared by LoCoCo, StreamingLLM and H2O.

A long token sequence is fed ``segment_len`` (B) tokens at a time. Each segment attends to the
cache (at most ``mem_size`` = M slots per layer and KV head) plus its own KV; afterwards the
segment's KV is appended and, when the cache holds more than M slots, an *evictor* brings it back
to M (drop by rule, or mix with a learned compressor). Between segments the cache never holds
more than M slots; the working set during a segment is at most M + B.

The decoder is run layer by layer here (embed → [norm, q/k/v, RoPE, attention over cache+segment,
o_proj, residual, norm, MLP, residual] × L → norm → lm_head) with the model's own modules, so
any HF Llama-family checkpoint (Llama, Mistral, SmolLM2, Qwen2; q/k norms if present) works, with
eager or sdpa configured: attention is computed explicitly because eviction needs the weights.

Positions (``positions`` knob):
- ``absolute``: every token keeps the RoPE position it had in the original text; keys are stored
  rotated. This is what the LoCoCo reference and H2O do (LoCoCo's compressed slots are mixes of
  rotated keys). Texts longer than the model's trained window run past its positions.
- ``cache``: positions are slot indices inside the cache (StreamingLLM, Sec. 3.2 of its paper):
  keys are stored *unrotated* and rotated afresh every segment with positions 0..L-1, the
  segment continuing at L. Positions then never exceed M + B.
With no eviction both modes give identical positions, so M ≥ length reproduces the full model.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
import torch.nn.functional as F

from ..errors import ConfigError
from ..types import History, Prediction, Question, Sample, Usage
from .base import MethodOutput, TrainableMethod, pad_batch


# ---- model parts ------------------------------------------------------------------------------

@dataclass
class DecoderParts:
    embed: Any
    layers: Any
    norm: Any
    rotary: Any
    lm_head: Any
    n_heads: int
    n_kv: int
    head_dim: int


def decoder_parts(model: Any) -> DecoderParts:
    """The modules of a Llama-family causal LM (unwrapping a peft model)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    inner = getattr(base, "model", None)
    needed = ("embed_tokens", "layers", "norm", "rotary_emb")
    if inner is None or not all(hasattr(inner, n) for n in needed) or not hasattr(base, "lm_head"):
        raise ConfigError(f"{type(base).__name__}: segment-level KV processing needs a Llama-family decoder "
                          "(model.embed_tokens/layers/norm/rotary_emb and lm_head)")
    cfg = base.config
    n_heads = cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // n_heads
    return DecoderParts(inner.embed_tokens, inner.layers, inner.norm, inner.rotary_emb, base.lm_head,
                        n_heads, getattr(cfg, "num_key_value_heads", None) or n_heads, head_dim)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Apply RoPE to [b, h, T, d] with cos/sin [1|b, T, d]."""
    return x * cos.unsqueeze(1) + rotate_half(x) * sin.unsqueeze(1)


# ---- the cache ----------------------------------------------------------------------------------

@dataclass
class LayerKV:
    k: torch.Tensor  # [b, kv_heads, L, d] (rotated for positions=absolute, raw for positions=cache)
    v: torch.Tensor  # [b, kv_heads, L, d]
    pos: torch.Tensor  # [b, kv_heads, L] original token index of each slot; -1 for mixed slots
    score: torch.Tensor  # [b, kv_heads, L] accumulated attention received (H2O); 0 where unused


@dataclass
class KVState:
    layers: list[LayerKV] = field(default_factory=list)
    n_seen: int = 0  # tokens processed so far (absolute position of the next token)
    peak_slots: int = 0  # largest working set (cache + segment) seen during processing

    @property
    def slots(self) -> int:
        return int(self.layers[0].k.shape[-2]) if self.layers else 0

    def kv_bytes(self) -> int:
        return sum(l.k.numel() * l.k.element_size() + l.v.numel() * l.v.element_size() for l in self.layers)

    def copy(self) -> "KVState":
        return KVState([LayerKV(l.k, l.v, l.pos, l.score) for l in self.layers], self.n_seen, self.peak_slots)

    def detach(self) -> "KVState":
        return KVState([LayerKV(l.k.detach(), l.v.detach(), l.pos, l.score.detach()) for l in self.layers],
                       self.n_seen, self.peak_slots)


class Evictor(Protocol):
    """Brings one layer's cache from L > M slots back to M (given attention scores)."""

    def evict(self, layer_idx: int, kv: LayerKV, seg_score: torch.Tensor, mem_size: int) -> LayerKV: ...


def gather_slots(kv: LayerKV, idx: torch.Tensor) -> LayerKV:
    """Keep the slots ``idx`` [b, h, n] (per head), in the given order."""
    e = idx.unsqueeze(-1).expand(*idx.shape, kv.k.shape[-1])
    return LayerKV(kv.k.gather(2, e), kv.v.gather(2, e), kv.pos.gather(2, idx), kv.score.gather(2, idx))


def heavy_hitter_indices(score: torch.Tensor, mem_size: int, n_recent: int) -> torch.Tensor:
    """Slots H2O keeps: the ``n_recent`` last + top (mem_size − n_recent) older ones by ``score``.

    ``score`` is [b, h, L]; the result [b, h, mem_size] is in cache (chronological) order.
    """
    L = score.shape[-1]
    n_recent = max(0, min(n_recent, mem_size))
    n_heavy = mem_size - n_recent
    parts = []
    if n_heavy:
        parts.append(torch.topk(score[..., : L - n_recent], n_heavy, dim=-1).indices)
    if n_recent:
        recent = torch.arange(L - n_recent, L, device=score.device)
        parts.append(recent.view(1, 1, -1).expand(score.shape[0], score.shape[1], -1))
    return torch.cat(parts, dim=-1).sort(dim=-1).values


# ---- one segment through the decoder -----------------------------------------------------------

class SegmentRunner:
    """Runs segments of tokens through a decoder over a :class:`KVState`, evicting to ``mem_size``."""

    def __init__(self, model: Any, mem_size: int | None, evictor: Evictor | None, positions: str = "absolute",
                 rope_scale: float = 1.0, detach_past: bool = True):
        if positions not in ("absolute", "cache"):
            raise ConfigError(f"method.positions={positions!r}: use 'absolute' or 'cache'")
        if mem_size is not None and mem_size < 1:
            raise ConfigError(f"method.mem_size={mem_size}: must be ≥ 1 (or null for a full cache)")
        self.model = model
        self.parts = decoder_parts(model)
        self.mem_size = mem_size
        self.evictor = evictor
        self.positions = positions
        self.rope_scale = float(rope_scale)
        self.detach_past = detach_past

    def _cos_sin(self, x: torch.Tensor, start: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        pos = torch.arange(start, start + n, device=x.device).unsqueeze(0)
        if self.rope_scale != 1.0:  # positional interpolation (linear RoPE scaling)
            pos = pos.float() / self.rope_scale
        return self.parts.rotary(x, pos)

    def forward(self, state: KVState, input_ids: torch.Tensor, evict: bool = True) -> torch.Tensor:
        """Process one segment [b, T]; update ``state`` in place; return logits [b, T, vocab].

        With gradient checkpointing on the model (transformers' per-layer flag, in training with
        grad enabled) each layer's attention + MLP runs under non-reentrant checkpointing: only its
        inputs are kept and it is recomputed in backward; the eviction (a learned compressor) runs
        outside the checkpoint, so its graph is kept as without checkpointing.
        """
        p = self.parts
        b, T = input_ids.shape
        x = p.embed(input_ids)
        L = state.slots
        q_start = state.n_seen if self.positions == "absolute" else L
        like = x.to(p.layers[0].self_attn.q_proj.weight.dtype)  # RoPE in the layers' dtype (x may be fp32)
        cos_q, sin_q = self._cos_sin(like, q_start, T)
        rot_all = self._cos_sin(like, 0, L + T) if self.positions == "cache" else None
        allowed = torch.ones(T, L + T, dtype=torch.bool, device=x.device)
        allowed[:, L:] = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        bias = torch.zeros(T, L + T, dtype=torch.float32, device=x.device).masked_fill(~allowed, float("-inf"))
        new_pos = torch.arange(state.n_seen, state.n_seen + T, device=x.device).view(1, 1, T).expand(b, p.n_kv, T)
        new_layers: list[LayerKV] = []
        for i, layer in enumerate(p.layers):
            old = state.layers[i] if i < len(state.layers) else None
            old_k, old_v = (old.k, old.v) if old is not None else (None, None)

            def run(x, old_k, old_v, layer=layer):
                return self._layer(layer, x, old_k, old_v, (cos_q, sin_q), rot_all, bias)

            if getattr(layer, "gradient_checkpointing", False) is True and layer.training and torch.is_grad_enabled():
                from torch.utils.checkpoint import checkpoint

                x, k_all, v_all, seg_score = checkpoint(run, x, old_k, old_v, use_reentrant=False)
            else:
                x, k_all, v_all, seg_score = run(x, old_k, old_v)
            if old is not None:
                kv = LayerKV(k_all, v_all, torch.cat([old.pos, new_pos], dim=2),
                             F.pad(old.score, (0, T)) + seg_score)
            else:
                kv = LayerKV(k_all, v_all, new_pos, seg_score)
            if self.detach_past:  # as the reference: the stored past carries no graph into later segments
                kv = LayerKV(kv.k.detach(), kv.v.detach(), kv.pos, kv.score)
            if evict and self.mem_size is not None and kv.k.shape[2] > self.mem_size and self.evictor is not None:
                # a learned compressor's output keeps its graph: the next segment's loss trains it
                kv = self.evictor.evict(i, kv, seg_score, self.mem_size)
            new_layers.append(kv)
        state.peak_slots = max(state.peak_slots, L + T)
        state.layers = new_layers
        state.n_seen += T
        return p.lm_head(p.norm(x).to(p.lm_head.weight.dtype))

    def _layer(self, layer: Any, x: torch.Tensor, old_k: torch.Tensor | None, old_v: torch.Tensor | None,
               rot_q: tuple[torch.Tensor, torch.Tensor], rot_all: tuple[torch.Tensor, torch.Tensor] | None,
               bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """One decoder layer over cache + segment: (new x, keys and values of cache + segment, the
        attention each of them received from the segment [b, kv, L+T])."""
        p = self.parts
        b, T = x.shape[:2]
        attn = layer.self_attn
        wdt = attn.q_proj.weight.dtype  # trained norms/embeddings may be fp32 over a bf16 base
        groups = p.n_heads // p.n_kv
        h = layer.input_layernorm(x).to(wdt)
        q = attn.q_proj(h).view(b, T, p.n_heads, p.head_dim).transpose(1, 2)
        k = attn.k_proj(h).view(b, T, p.n_kv, p.head_dim).transpose(1, 2)
        v = attn.v_proj(h).view(b, T, p.n_kv, p.head_dim).transpose(1, 2)
        if hasattr(attn, "q_norm"):  # Qwen3-style per-head norms
            q, k = attn.q_norm(q), attn.k_norm(k)
        q = rope(q, *rot_q)
        k_store = rope(k, *rot_q) if self.positions == "absolute" else k
        if old_k is not None:
            k_all = torch.cat([old_k, k_store.to(old_k.dtype)], dim=2)
            v_all = torch.cat([old_v, v.to(old_v.dtype)], dim=2)
        else:
            k_all, v_all = k_store, v
        k_att = k_all if rot_all is None else rope(k_all, *rot_all)
        k_rep = k_att.repeat_interleave(groups, dim=1) if groups > 1 else k_att
        v_rep = v_all.repeat_interleave(groups, dim=1) if groups > 1 else v_all
        scores = torch.matmul(q, k_rep.transpose(2, 3)) * attn.scaling + bias
        probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        out = torch.matmul(probs, v_rep).transpose(1, 2).reshape(b, T, -1)
        x = x + attn.o_proj(out)
        x = x + layer.mlp(layer.post_attention_layernorm(x).to(wdt))
        seg_score = probs.detach().sum(dim=2).view(b, p.n_kv, groups, -1).sum(2)  # [b, kv, L+T]
        return x, k_all, v_all, seg_score

    def stream(self, state: KVState, ids: torch.Tensor, segment_len: int, progress: bool = False,
               on_logits: Any = None) -> KVState:
        """Feed [b, N] tokens segment by segment; ``on_logits(start, logits)`` sees each segment's logits."""
        from tqdm.auto import tqdm

        starts = range(0, ids.shape[1], segment_len)
        for s in tqdm(starts, disable=not progress, desc="segments", leave=False):
            logits = self.forward(state, ids[:, s: s + segment_len])
            if on_logits is not None:
                on_logits(s, logits)
        return state


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

@torch.no_grad()
def stream_perplexity(runner: SegmentRunner, ids: list[int] | torch.Tensor, segment_len: int,
                      progress: bool = False, marks: list[int] | None = None) -> dict[str, Any]:
    """Next-token NLL of a long text processed segment by segment through the fixed cache.

    Every token after the first is scored, including each segment's first token (predicted from the
    previous segment's last logits). Returns nll, ppl, n_tokens, kv slots/bytes held at the end,
    peak working slots, peak RSS (reset at the start) and seconds; with ``marks`` also ``at``: the
    same numbers after the first m tokens, for each m in marks (the prefix a shorter text would be).
    """
    ids_t = torch.as_tensor(ids, dtype=torch.long).view(1, -1)
    ids_t = ids_t.to(next(runner.model.parameters()).device)
    total, count = 0.0, 0
    prev_last: list[torch.Tensor | None] = [None]
    marks_left = sorted(int(m) for m in (marks or []) if int(m) <= ids_t.shape[1])
    at: list[dict[str, Any]] = []
    state = KVState()
    t0 = time.perf_counter()

    def record(n_in: int) -> dict[str, Any]:
        nll = total / max(count, 1)
        return {"tokens_in": n_in, "nll": nll, "ppl": math.exp(nll), "n_tokens": count, "kv_slots": state.slots,
                "kv_bytes": state.kv_bytes(), "peak_slots": state.peak_slots, "peak_rss_bytes": peak_rss_bytes(),
                "seconds": time.perf_counter() - t0}

    def score(start: int, logits: torch.Tensor) -> None:
        nonlocal total, count
        seg = ids_t[:, start: start + logits.shape[1]]
        lg = logits[0].float()
        if prev_last[0] is not None:
            lg = torch.cat([prev_last[0], lg], dim=0)
            tgt = seg[0]
        else:
            tgt = seg[0, 1:]
        pred = lg[: tgt.shape[0]]
        total += float(F.cross_entropy(pred, tgt, reduction="sum"))
        count += int(tgt.shape[0])
        prev_last[0] = logits[0, -1:].float()
        end = start + logits.shape[1]
        while marks_left and marks_left[0] <= end:
            at.append(record(marks_left.pop(0)))

    reset_peak_rss()
    runner.stream(state, ids_t, segment_len, progress=progress, on_logits=score)
    out = record(int(ids_t.shape[1]))
    if marks:
        out["at"] = at
    return out


# ---- the shared method / system ----------------------------------------------------------------

class FixedKVMethod(TrainableMethod):
    """A system that streams a history through a fixed KV cache and answers from it.

    Subclasses provide :meth:`make_evictor`. Config keys: ``segment_len`` (B), ``mem_size`` (M;
    null = unbounded full cache), ``positions`` (absolute | cache), ``max_new_tokens``.
    """

    def __init__(self, cfg: Any, bundle: Any):
        super().__init__(cfg, bundle)
        self.segment_len = int(cfg.get("segment_len", 64))
        if self.segment_len < 1:
            raise ConfigError(f"method.segment_len={self.segment_len}: must be ≥ 1")
        mem = cfg.get("mem_size")
        self.mem_size = None if mem in (None, "null", 0) else int(mem)
        self.model = bundle.model  # registered, so trainable base weights (LoRA, norms) are saved
        self._state: KVState | None = None
        self._prefix: str = ""
        self._speakers: list[str] = []
        self._ingest_seconds = 0.0
        self._ingest_tokens = 0
        self._ingest_peak_rss = 0

    def make_evictor(self) -> Evictor | None:
        raise NotImplementedError

    @property
    def lm(self) -> Any:
        return self.model

    def runner(self, mem_size: int | None | str = "cfg") -> SegmentRunner:
        return SegmentRunner(self.lm, self.mem_size if mem_size == "cfg" else mem_size, self.make_evictor(),
                             positions=str(self.cfg["positions"]),  # every YAML sets it; streamingllm: cache
                             rope_scale=float(self.cfg.get("rope_scaling_factor", 1.0) or 1.0))

    # -- evaluation helpers ------------------------------------------------------------------
    def perplexity(self, ids: list[int] | torch.Tensor, progress: bool = False,
                   marks: list[int] | None = None) -> dict[str, Any]:
        """Perplexity of a long text through this method's fixed cache (see :func:`stream_perplexity`)."""
        self.eval()
        return stream_perplexity(self.runner(), ids, self.segment_len, progress=progress, marks=marks)

    # -- training-free by default ------------------------------------------------------------
    def train_examples(self, samples: list[Sample]) -> list:
        raise ConfigError(f"method={self.cfg.name} is training-free (nothing to train); use it with `eval`")

    def collate(self, examples: list) -> dict[str, torch.Tensor]:
        return pad_batch(examples, self.tokenizer.pad_token_id)

    def forward(self, batch: dict[str, torch.Tensor]) -> MethodOutput:
        raise ValueError(f"method={self.cfg.name} has no training loss")

    # -- as a system ---------------------------------------------------------------------------
    def _frame(self, question: Question | None, speakers: list[str]) -> tuple[str, str]:
        """(text before the history, text after it) of the shared QA chat prompt.

        :attr:`answer_prompt` (LoCoMo's: [intro] + context, then the question) puts the context before
        the question, so the part before the context does not depend on the question and can be
        streamed at ingest (a prompt whose head does depend on it, A-Mem's per category, is refused
        at answer time).
        """
        from ..qa import prompt_text

        marker = "\u0000CTX\u0000"
        q = question or Question(id="", question="?", answer="")
        msgs = self.answer_prompt.messages(q, marker, speakers)
        tok = self.tokenizer
        if getattr(tok, "chat_template", None):
            full = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        else:
            full = prompt_text(msgs)
        if marker not in full:
            raise ValueError("the QA prompt template dropped the context placeholder")
        before, after = full.split(marker, 1)
        return before, after

    @torch.no_grad()
    def ingest(self, history: History) -> None:
        """Stream the whole rendered history through the fixed cache (segment by segment)."""
        from ..render import render_history

        self.eval()
        t0 = time.perf_counter()
        self._speakers = list(history.speakers)
        before, _ = self._frame(None, self._speakers)
        self._prefix = before
        ids = self.tokenizer(before + render_history(history, "locomo"), add_special_tokens=False)["input_ids"]
        ids_t = torch.tensor([ids], dtype=torch.long, device=self.device)
        reset_peak_rss()
        self._state = self.runner().stream(KVState(), ids_t, self.segment_len)
        self._ingest_peak_rss = peak_rss_bytes()
        self._ingest_tokens = len(ids)
        self._ingest_seconds = time.perf_counter() - t0

    def construction_usage(self) -> Usage:
        """What ingesting the current history cost and what it keeps."""
        st = self._state
        return Usage(memory_items=st.slots if st else 0, memory_tokens=self._ingest_tokens,
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
        state = self._state.copy()
        runner = self.runner()
        held_slots, held_bytes = state.slots, state.kv_bytes()
        q_ids = tok(after, add_special_tokens=False)["input_ids"]
        # the question is the last segment: it attends to the M slots and itself, no eviction after it
        logits = runner.forward(state, torch.tensor([q_ids], device=self.device), evict=False)
        stop = {i for i in (tok.eos_token_id, tok.convert_tokens_to_ids("<|im_end|>")) if isinstance(i, int)}
        out: list[int] = []
        for _ in range(self.answer_max_tokens()):
            nxt = int(logits[0, -1].argmax())
            if nxt in stop:
                break
            out.append(nxt)
            logits = runner.forward(state, torch.tensor([[nxt]], device=self.device), evict=False)
        raw = tok.decode(out, skip_special_tokens=True).strip()
        usage = Usage(answer_prompt_tokens=len(q_ids), answer_completion_tokens=len(out), answer_calls=1,
                      context_tokens=held_slots, memory_items=held_slots, memory_tokens=self._ingest_tokens,
                      kv_bytes=held_bytes, answer_seconds=time.perf_counter() - t0,
                      extra={"kv_slots_per_layer_head": held_slots, "peak_working_slots": state.peak_slots,
                             "ingest_peak_rss_bytes": self._ingest_peak_rss, "history_tokens": self._ingest_tokens,
                             "mem_size": self.mem_size, "segment_len": self.segment_len})
        return Prediction(text=raw, usage=usage)
