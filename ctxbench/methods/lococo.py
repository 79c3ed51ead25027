"""``method=lococo``: LoCoCo — convolutional KV-cache compression at a fixed cache size.

Cai et al., "LoCoCo: Dropping In Convolutions for Long Context Compression" (ICML 2024, arXiv
2406.05317), following the reference code (VITA-Group/LoCoCo, ``llama/memory_compressor.py``):

Text is processed in segments of B tokens over a cache of M slots per layer and KV head
(machinery in :mod:`.kv_cache`; the compressors are a press, :mod:`.press`, applied on the model's own
attention and cache). When the cache overflows (old M slots + the segment's B):

1. the ``keep = M − ⌊M·(1 − hh_keep_rate)⌋`` heavy hitters are kept — the slots that received the
   most attention from the segment's queries (the reference scores with the current segment
   only; ``accumulate_scores: true`` uses H2O's running sum), optionally plus a local window of the
   ``local_len`` most recent slots (0 in the reference; 32 in the CPU config, where without it the
   rule loses recency and StreamingLLM wins — README, LoCoCo section);
2. the other n slots are mixed into ``mc = M − keep`` slots: a 1-D convolution (kernel 21, one
   per layer, shared by heads) over the sequence of their concatenated [K;V] gives mc channels,
   ReLU, then a softmax over the n positions → mixing weights W_conv [mc, n]; these are blended
   with one-hot weights on the top-mc remaining slots by a learned scalar λ (init 0.5; clamped to
   [0, 1] by default so repeated compression stays convex — see ConvCompressor.forward;
   ``clamp_lambda: false`` leaves it free, as the reference):
   W = (1 − λ)·W_top + λ·W_conv, and the new slots are W·K and W·V.

Calibration (``train method=lococo``) trains only the compressors (optionally embeddings/norms and
LoRA, with linear positional interpolation via ``rope_scaling_factor``). The reference takes one
backward per segment with the past KV detached (and accumulates 128 of them per optimizer step);
here one training example is ``n_segments`` segments and ``forward`` returns the token-mean loss of
all of them, each segment's graph reaching back only through the compression that produced the
cache it reads (the stored past is detached). The gradient of that mean is the mean of the
reference's per-segment gradients, so with accumulation it is the same update.

The compressors (and LoRA, embeddings/norms when trained) are float32 under any base dtype: the
mixing runs in their dtype and the new slots go back to the cache's. With gradient checkpointing
(``trainer.gradient_checkpointing``) every segment's layers are recomputed in backward
(:class:`.kv_cache.PressRunner`); ``rope_scaling_factor: auto`` never goes below 1.

Under ``task=compression`` (a ratio r, M = ceil((1 − r) × n) per history) the compressor calibrated at
``method.mem_size`` runs at another budget: its conv has exactly mc output channels (one mixing row
per mixed slot), so at a budget b it mixes into the first min(mc, ⌊b·(1 − hh_keep_rate)⌋) of those
rows and keeps the rest of b as heavy hitters (:meth:`ConvCompressor.split`). Only at b = M is that
the calibrated compressor; elsewhere its rows mix more (or fewer) slots than they were trained on,
and above M the extra budget goes to heavy hitters (LoCoCo degrades towards H2O there).
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from ctxbench.config.schemas.method import LococoMethod
from ctxbench.core.errors import ConfigError
from ctxbench.core.registry import register
from ctxbench.core.types import Sample
from ctxbench.methods.base import MethodOutput, fp32_trainables
from ctxbench.methods.kv_cache import FixedKVMethod, KVState
from ctxbench.methods.press import LayerKV, Press, SegmentInfo, gather_slots, top_with_recent
from ctxbench.methods.lora import add_lora

ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU, "silu": nn.SiLU, None: None, "none": None}


@contextlib.contextmanager
def denormals_flushed(on: bool) -> Iterator[None]:
    """CPU float denormals read and written as 0 inside the ``with`` (when ``on``), as they were before
    after it. The conv's softmax puts ~1/5 of its mixing weights below 1.2e-38 (weights ~N(0, 1) give
    logits tens apart), and x86 multiplies those ~30× slower (measured: 1.5 ms → 0.05 ms for one
    [3, 64, 128] × [3, 128, 64] mix); a weight below 1e-38 times a key adds nothing a sum of weights
    summing to 1 can hold in fp32, so the mixed slots are the same."""
    if not on:
        yield
        return
    was = float(torch.tensor([1e-39]).mul(1.0)) == 0.0  # torch has no getter for the flag
    torch.set_flush_denormal(True)
    try:
        yield
    finally:
        torch.set_flush_denormal(was)


class ConvCompressor(nn.Module):
    """One layer's compressor: keeps heavy hitters, mixes the rest into the remaining slots."""

    def __init__(self, head_dim: int, mem_size: int, hh_keep_rate: float = 0.5, kernel_size: int = 21,
                 n_convlayer: int = 1, expand: int = 1, hidden_act: str | None = "relu",
                 normalizer_init: float = 0.5, local_len: int = 0, accumulate_scores: bool = False,
                 conv_init_std: float | None = 1.0, clamp_lambda: bool = True):
        super().__init__()
        if not 0.0 <= hh_keep_rate < 1.0:
            raise ConfigError(f"method.hh_keep_rate={hh_keep_rate}: must be in [0, 1)")
        if hidden_act not in ACTIVATIONS:
            raise ConfigError(f"method.hidden_act={hidden_act!r}: use one of {[k for k in ACTIVATIONS if k]}")
        self.mem_size = int(mem_size)
        self.hh_keep_rate = float(hh_keep_rate)
        self.mem_compress = int(mem_size * (1 - hh_keep_rate))
        self.keep = self.mem_size - self.mem_compress
        self.local_len = int(local_len)
        if self.local_len > self.keep:
            raise ConfigError(f"method.local_len={local_len} exceeds the heavy-hitter slots ({self.keep})")
        self.accumulate_scores = bool(accumulate_scores)
        self.clamp_lambda = bool(clamp_lambda)
        layers: list[nn.Module] = []
        in_ch, hidden = 2 * head_dim, self.mem_compress * int(expand)
        for i in range(int(n_convlayer)):
            out_ch = self.mem_compress if i == n_convlayer - 1 else hidden
            layers.append(nn.Conv1d(in_ch, out_ch, kernel_size, padding=(kernel_size - 1) // 2))
            if ACTIVATIONS[hidden_act] is not None:
                layers.append(ACTIVATIONS[hidden_act]())
            in_ch = out_ch
        self.layers = nn.Sequential(*layers)
        self.normalizer = nn.Parameter(torch.full((1,), float(normalizer_init)))
        for m in self.layers:
            # the reference initialises conv weights ~ N(0, 1) (conv_init_std=1.0); null keeps PyTorch's
            # fan-in scaled default, whose softmax starts soft instead of one-hot
            if isinstance(m, nn.Conv1d) and conv_init_std is not None:
                with torch.no_grad():
                    m.weight.copy_(torch.randn(m.weight.shape) * float(conv_init_std))

    def compress(self, kv: LayerKV, info: SegmentInfo, budget: int) -> LayerKV:
        score = kv.score if self.accumulate_scores else info.seg_score
        return self(LayerKV(kv.k, kv.v, kv.pos, score), budget)

    def split(self, budget: int) -> tuple[int, int]:
        """(heavy hitters kept, mixed slots) at ``budget``: at the calibrated M its (keep, mc); at another
        budget (``task=compression``'s per-example M) the first min(mc, ⌊budget·(1 − hh_keep_rate)⌋)
        of the calibrated mixing rows and the rest heavy hitters."""
        if budget == self.mem_size:
            return self.keep, self.mem_compress
        mc = min(self.mem_compress, int(budget * (1 - self.hh_keep_rate)))
        return budget - mc, mc

    def forward(self, kv: LayerKV, budget: int | None = None) -> LayerKV:
        b, h, L, d = kv.k.shape
        keep, n_mix = self.split(self.mem_size if budget is None else int(budget))
        hh_idx = top_with_recent(kv.score, keep, min(self.local_len, keep))  # [b, h, keep], in order
        kept = gather_slots(kv, hh_idx)
        if n_mix == 0:
            return kept
        is_hh = torch.zeros(b, h, L, dtype=torch.int8, device=kv.k.device).scatter(2, hh_idx, 1)
        rest_idx = torch.argsort(is_hh, dim=-1, stable=True)[..., : L - keep]  # non-HH, in order
        rest = gather_slots(kv, rest_idx)
        n = L - keep
        # one-hot weights on the top-mc remaining slots (what dropping would keep), in order
        top = torch.topk(rest.score, n_mix, dim=-1).indices.sort(dim=-1).values
        # the mixing runs in the compressor's dtype (fp32 master weights; bf16 under autocast) and
        # the new slots go back to the cache's dtype (the base model's)
        wd = self.normalizer.dtype
        x = torch.cat([rest.k, rest.v], dim=-1).reshape(b * h, n, 2 * d).transpose(1, 2).to(wd)  # [(b h), 2d, n]
        rows = self.layers(x)[:, :n_mix]  # the calibrated mixing rows (all of them at M)
        # ingestion (no grad, CPU) mixes with denormals flushed; calibration's graph is left as it was
        with denormals_flushed(kv.k.device.type == "cpu" and not torch.is_grad_enabled()):
            return self.mixed(kv, kept, rest, top, rows)

    def mixed(self, kv: LayerKV, kept: LayerKV, rest: LayerKV, top: torch.Tensor, rows: torch.Tensor) -> LayerKV:
        """The kept heavy hitters + the mixed slots: W = (1 − λ)·W_top + λ·softmax(rows) over ``rest``."""
        b, h, n_mix = top.shape
        n, wd = rest.slots, self.normalizer.dtype
        w_top = torch.zeros(b, h, n_mix, n, dtype=wd, device=kv.k.device).scatter(-1, top.unsqueeze(-1), 1.0)
        w_conv = F.softmax(rows, dim=-1).view(b, h, n_mix, n)
        # λ is clamped to [0, 1] (clamp_lambda, the default) so every new slot stays a convex mix of old
        # ones. The reference leaves it free (clamp_lambda: false); calibrated on 8 segments, several
        # layers went to λ≈1.1 or −0.05, and re-compressing 100+ times over an 8k text then
        # extrapolates K/V until perplexity explodes (measured: 5e5).
        lam = self.normalizer.clamp(0.0, 1.0) if self.clamp_lambda else self.normalizer
        w = w_top * (1 - lam) + w_conv.to(wd) * lam
        k_c = torch.matmul(w, rest.k.to(wd)).to(kv.k.dtype)
        v_c = torch.matmul(w, rest.v.to(wd)).to(kv.v.dtype)
        s_c = torch.matmul(w.detach(), rest.score.unsqueeze(-1).to(w.dtype)).squeeze(-1).to(kv.score.dtype)
        pos_c = torch.full((b, h, n_mix), -1, dtype=kv.pos.dtype, device=kv.pos.device)
        return LayerKV(torch.cat([kept.k, k_c], 2), torch.cat([kept.v, v_c], 2),
                       torch.cat([kept.pos, pos_c], 2), torch.cat([kept.score, s_c], 2))


class LayerCompressors(nn.Module, Press):
    """LoCoCo's press: one :class:`ConvCompressor` per decoder layer, dispatched by layer index."""

    needs_scores = True

    def __init__(self, n_layers: int, **kw: Any):
        super().__init__()
        self.per_layer = nn.ModuleList([ConvCompressor(**kw) for _ in range(n_layers)])

    def compress(self, kv: LayerKV, info: SegmentInfo, budget: int) -> LayerKV:
        return self.per_layer[info.layer_idx].compress(kv, info, budget)


@register("method", "lococo")
class LoCoCo(FixedKVMethod):
    Settings = LococoMethod  # its config schema (ctxbench/config/schemas/method.py)

    def __init__(self, cfg: Any, bundle: Any):
        super().__init__(cfg, bundle)
        if self.mem_size is None:
            raise ConfigError("method.mem_size is required for lococo (the fixed cache size M)")
        for p in bundle.model.parameters():
            p.requires_grad_(False)
        conf = bundle.model.config
        n_heads = conf.num_attention_heads
        head_dim = getattr(conf, "head_dim", None) or conf.hidden_size // n_heads
        torch.manual_seed(cfg.seed)
        self.compressors = LayerCompressors(
            conf.num_hidden_layers, head_dim=head_dim, mem_size=self.mem_size,
            hh_keep_rate=float(cfg.hh_keep_rate), kernel_size=cfg.kernel_size,
            n_convlayer=cfg.n_convlayer, expand=cfg.expand,
            hidden_act=cfg.hidden_act, normalizer_init=float(cfg.normalizer_init),
            local_len=cfg.local_len, accumulate_scores=cfg.accumulate_scores,
            conv_init_std=cfg.conv_init_std, clamp_lambda=cfg.clamp_lambda,
        ).to(device=next(bundle.model.parameters()).device)  # fp32 master weights, any base dtype
        lora = cfg.lora
        if lora and lora.enabled:
            self.model = add_lora(bundle.model, lora)
        if cfg.train_embed_norm:  # the reference also tunes embeddings and norms
            tuned = [p for n, p in self.model.named_parameters() if "embed" in n or "norm" in n]
            self._base_weights = [(p, p.detach().clone()) for p in tuned]  # plain_lm's base model
            for p in tuned:
                p.requires_grad_(True)
        fp32_trainables(self)  # compressors, LoRA and (train_embed_norm) embeddings/norms: fp32 master weights

    def make_press(self) -> LayerCompressors:
        return self.compressors

    def rope_factor(self) -> float:
        f = self.cfg.rope_scaling_factor
        if f == "auto":  # the reference's --rope_change: training length / trained window, never below 1
            window = getattr(self.lm.config, "max_position_embeddings", 0) or 1
            # a window longer than the training length needs no interpolation: < 1 would stretch positions
            return max(1.0, self.segment_len * self.cfg.n_segments / window)
        return float(f or 1.0)

    # -- calibration -----------------------------------------------------------------------------
    def train_examples(self, samples: list[Sample]) -> list[list[int]]:
        """Windows of ``segment_len × n_segments`` tokens (the reference's block_size × clean_period)."""
        n_seg = self.cfg.n_segments
        size = self.segment_len * n_seg
        out: list[list[int]] = []
        longest = 0
        for s in samples:
            ids = self.tokenizer(s.history.render(), add_special_tokens=False)["input_ids"]
            longest = max(longest, len(ids))
            out.extend(ids[i: i + size] for i in range(0, len(ids) - size + 1, size))
        if not out:
            raise self.too_short(size, n_seg, longest)
        return out

    def too_short(self, size: int, n_seg: int, longest: int) -> Exception:
        """The one-line error when no document fills one training window."""
        from ctxbench.data.errors import DataError

        fits = longest // self.segment_len
        fix = (f"method.n_segments={fits}" if fits >= 1 else "a smaller method.segment_len") + \
            " or a dataset of longer texts (dataset=shakespeare_sample)"
        return DataError(f"method={self.cfg.name}", f"no training document has {size} tokens (method.segment_len="
                                                    f"{self.segment_len} × method.n_segments={n_seg}); the longest has "
                                                    f"{longest}: use {fix}")

    def collate(self, examples: list[list[int]]) -> dict[str, torch.Tensor]:
        n = min(len(e) for e in examples)
        return {"input_ids": torch.tensor([e[:n] for e in examples], dtype=torch.long)}

    def forward(self, batch: dict[str, torch.Tensor]) -> MethodOutput:
        """Mean next-token loss over all segments; the past is detached between segments."""
        ids = batch["input_ids"]
        runner = self.runner()
        state = KVState()
        total = ids.new_zeros((), dtype=torch.float32)
        n_tok, seg_losses = 0, []
        for s in range(0, ids.shape[1], self.segment_len):
            seg = ids[:, s: s + self.segment_len]
            if seg.shape[1] < 2:
                break
            logits = runner.forward(state, seg)
            loss_sum = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), seg[:, 1:].flatten(), reduction="sum")
            total = total + loss_sum
            n = seg[:, 1:].numel()
            n_tok += n
            seg_losses.append(float(loss_sum.detach()) / n)
        loss = total / max(n_tok, 1)
        if not loss.requires_grad:  # nothing was compressed (text ≤ M): keep the graph well-formed
            loss = loss + 0.0 * sum(p.sum() for p in self.parameters() if p.requires_grad)
        lam = torch.stack([c.normalizer.detach() for c in self.compressors.per_layer]).mean()
        stats = {"normalizer": float(lam), "last_segment_loss": seg_losses[-1] if seg_losses else 0.0,
                 "first_segment_loss": seg_losses[0] if seg_losses else 0.0}
        return MethodOutput(loss=loss, n_tokens=n_tok, stats=stats)

    def state_summary(self) -> dict[str, Any]:
        """What the compressor learned, for results.json (``method_state``): λ per layer (min / mean / max;
        with ``clamp_lambda`` the mixing uses it clamped to [0, 1])."""
        lam = [float(c.normalizer.detach()) for c in self.compressors.per_layer]
        return {"normalizer_min": min(lam), "normalizer_mean": sum(lam) / len(lam), "normalizer_max": max(lam),
                "clamp_lambda": self.cfg.clamp_lambda}

    def optimizer_param_groups(self, lr: float, weight_decay: float = 0.0) -> list[dict[str, Any]]:
        """Parameter groups with the reference's learning-rate scales (memory_lr_scale etc.)."""
        comp, other, lora = [], [], []
        for n, p in self.named_parameters():
            if not p.requires_grad:
                continue
            (comp if n.startswith("compressors.") else lora if "lora_" in n else other).append(p)
        groups = [{"params": comp, "lr": lr * float(self.cfg.memory_lr_scale), "weight_decay": weight_decay},
                  {"params": other, "lr": lr * float(self.cfg.norm_lr_scale), "weight_decay": weight_decay},
                  {"params": lora, "lr": lr * float(self.cfg.lora_lr_scale), "weight_decay": weight_decay}]
        return [g for g in groups if g["params"]]

    def load_trainable(self, state: dict[str, torch.Tensor]) -> None:
        """Load compressor (and LoRA/norm) weights; a shape mismatch names the settings to match."""
        own = dict(self.named_parameters())
        for k, v in state.items():
            if k in own and own[k].shape != v.shape:
                raise ValueError(
                    f"checkpoint weight {k} has shape {tuple(v.shape)} but this lococo has {tuple(own[k].shape)}: "
                    f"build it with the checkpoint's settings (method.mem_size={self.mem_size}, hh_keep_rate, "
                    "kernel_size, n_convlayer, expand must match the run's method.json)")
        super().load_trainable(state)
