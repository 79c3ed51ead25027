"""Applying a :class:`.press.Press` on the model's own attention layers and cache.

:func:`pressed` registers three hooks for the length of one model call (a segment, the question,
or a whole ``generate``) and removes them on exit:

- on the rotary embedding (pre-hook): the rotary positions. transformers numbers new tokens from
  the cache's length; with ``positions=absolute`` a token keeps its place in the original text, so
  the positions are shifted by (tokens seen − cache length); ``rope_scale`` divides them (linear
  positional interpolation). The model's own position ids, mask and cache logic are untouched.
- on every attention module (pre-hook): the attention mask for *this* layer's cache length (all
  cached slots, causal within the new tokens), since a press may leave layers with different
  lengths (PyramidKV); none for one new token (it sees everything), none for FlashAttention
  (bottom-right causal is the same rule). With ``positions=cache`` also the rotary embedding of
  this layer's slot indices.
- on every attention module (forward hook, after the model's attention ran and ``cache.update``
  appended the new KV): the press. It reads the layer's [cache + segment] KV from the cache,
  computes the segment's attention scores when the press needs them (the output of the layer's own
  q projection in this call, kept by a hook on ``q_proj`` rather than run again; q norm and rotary
  embedding on the window's rows only; the model's attention kernel is not asked for weights),
  and writes the compressed layer back into the cache.
- with no cache before the segment and SDPA, no mask: SDPA's own causal kernel, as the plain model.

The stored past is detached before a press compresses it (as LoCoCo's reference: a segment's
gradient reaches only the compression that built the cache it reads). ``positions=cache``
(StreamingLLM's positions inside the cache) stores keys rotated at their slot index: before a
press runs they are rotated back to position 0 and afterwards to their new slot index, so a
mixing press (LoCoCo) mixes unrotated keys. Both rotations run in fp32 with fp32 cos/sin and the
keys go back to the cache dtype once, so a kept key is its first rotation moved by the change of
slot, rounded once per move, and a slot that did not move (the sinks) comes back unchanged; in
bf16 a round trip through bf16 cos/sin would add a rounding and a non-orthogonal rotation per
segment to every slot (docs/compression-methods.md has the measurement).
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch
import torch.nn.functional as F
from transformers.models.llama.modeling_llama import rotate_half

from ctxbench.core.errors import ConfigError
from ctxbench.methods.base import additive, past_then_causal
from ctxbench.methods.press import LayerKV, Press, SegmentInfo


def decoder_of(model: Any) -> Any:
    """The decoder stack (``.layers``, ``.rotary_emb``) of a Llama-family causal LM, through peft."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    inner = getattr(base, "model", None)
    if inner is None or not hasattr(inner, "layers") or not hasattr(inner, "rotary_emb"):
        raise ConfigError(f"{type(base).__name__}: a KV press needs a decoder with model.layers and a "
                          "shared model.rotary_emb (Llama, Mistral, Qwen2/3, SmolLM2)")
    return inner


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE on [b, h, n, d] with cos/sin [b|1, n, d], as transformers' ``apply_rotary_pos_emb`` (with
    its ``rotate_half``) does for one tensor."""
    return x * cos.unsqueeze(1) + rotate_half(x) * sin.unsqueeze(1)


class PressCall:
    """One model call under a press: the cache it reads and writes, and the per-slot bookkeeping.

    ``layers_in`` are the layers the call starts from (their ``pos``/``score``); the forward hook
    fills ``layers_out``. ``track=False`` (generation) only shifts positions and masks.
    """

    def __init__(self, runner: Any, cache: Any, layers_in: list[LayerKV], n_seen: int, n_new: int,
                 phase: str = "ingest", compress: bool = True, track: bool = True):
        self.runner, self.cache, self.layers_in = runner, cache, layers_in
        self.n_seen, self.n_new, self.phase = n_seen, n_new, phase
        self.compress, self.track = compress, track
        self.layers_out: list[LayerKV | None] = [None] * len(runner.attn)
        base = layers_in[0].slots if layers_in else 0
        self.offset = n_seen - base if runner.positions == "absolute" else 0
        press = runner.press
        self.acts = track and press is not None and compress and (phase == "ingest" or press.question_aware)
        self.wants_scores = self.acts and press.needs_scores
        self.queries: dict[int, torch.Tensor] = {}  # layer → its q projection's output in this call
        self._masks: dict[tuple[int, int], torch.Tensor] = {}
        self.score_calls = 0  # attention-score computations (one per layer that votes): counted work

    def mask(self, T: int, L: int, device: torch.device) -> torch.Tensor:
        """:func:`past_then_causal` for T new tokens over L cached slots, built once per call and shape."""
        m = self._masks.get((T, L))
        if m is None:
            m = self._masks[(T, L)] = past_then_causal(T, L, device)
        return m

    # -- the hooks --------------------------------------------------------------------------------
    def on_rotary(self, module: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        pid = kwargs["position_ids"] if "position_ids" in kwargs else args[1]
        pid = self.runner.rope_positions(pid + self.offset)
        if "position_ids" in kwargs:
            kwargs["position_ids"] = pid
        else:
            args = (args[0], pid, *args[2:])
        return args, kwargs

    def on_query(self, layer_idx: int) -> Any:
        """A forward hook on a layer's q projection that keeps its output for :meth:`scores` (the
        press's votes reuse the model's own projection instead of running it again)."""
        def hook(module: Any, args: Any, output: torch.Tensor) -> None:
            self.queries[layer_idx] = output
        return hook

    def on_attention_input(self, module: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        h = kwargs.get("hidden_states", args[0] if args else None)
        T = h.shape[1]
        impl = str(getattr(module.config, "_attn_implementation", "eager") or "eager")
        L = self.cache.layers[module.layer_idx].get_seq_length() if module.layer_idx < len(self.cache.layers) else 0
        if self.runner.positions == "cache":  # this layer's slot indices (layers may hold different lengths)
            pid = torch.arange(L, L + T, device=h.device).unsqueeze(0)
            kwargs["position_embeddings"] = self.runner.rope(h, pid)
        if impl.startswith("flash"):
            return args, kwargs
        if T == 1 or (L == 0 and impl == "sdpa"):  # one token sees everything; no past: SDPA's is_causal
            kwargs["attention_mask"] = None
            return args, kwargs
        ok = self.mask(T, L, h.device)[None]
        kwargs["attention_mask"] = ok[None] if impl != "eager" else additive(ok, torch.float32)
        return args, kwargs

    def on_attention_output(self, module: Any, args: tuple, kwargs: dict, output: Any) -> Any:
        if not self.track:
            return output
        i, run, press = module.layer_idx, self.runner, self.runner.press
        layer = self.cache.layers[i]
        k, v = layer.keys, layer.values
        T = self.n_new
        b, n_kv, L_all = k.shape[0], k.shape[1], k.shape[-2]
        old = self.layers_in[i] if i < len(self.layers_in) else None
        new_pos = torch.arange(self.n_seen, self.n_seen + T, device=k.device).view(1, 1, T).expand(b, n_kv, T)
        pos = torch.cat([old.pos, new_pos], dim=2) if old is not None else new_pos
        score = F.pad(old.score, (0, T)) if old is not None else torch.zeros(b, n_kv, T, device=k.device)
        acts = self.acts
        seg_score = None
        if self.wants_scores:
            seg_score = self.scores(module, kwargs, k, press.window)
            score = score + seg_score
        if run.detach_past:  # the stored past carries no graph into later segments
            k, v = k.detach(), v.detach()
        kv = LayerKV(k, v, pos, score)
        budget = run.budget(i)
        if budget is not None and self.phase == "question":
            budget += T  # the question's own slots, as every fixed-cache method answers with them
        if acts and budget is not None and L_all > budget:
            kv = run.squeeze(kv, SegmentInfo(i, len(run.attn), T, seg_score, self.phase), budget)
        layer.keys, layer.values = kv.k, kv.v
        self.layers_out[i] = kv
        return output

    def scores(self, module: Any, kwargs: dict, keys: torch.Tensor, window: int | None) -> torch.Tensor:
        """Attention [b, kv, L+T] the segment's (last ``window``) queries gave every slot of this
        layer, summed over those queries and the query heads of each KV group (softmax in fp32).
        The queries are the layer's own q projection from this call (:meth:`on_query`), only the
        window's rows normed and rotated; the scale is applied to the queries (exact for a power of
        two, as 1/√64). The voting rows go in blocks of :data:`VOTE_ROWS` queries: a block's logits
        are taken only against the keys it can see (the cache and its segment up to its last query:
        the masked future would add exact zeros after the softmax), and only its diagonal block of
        the segment is masked, so a whole-prefill vote costs half the T² of a full map and never
        holds more than one block of it."""
        self.score_calls += 1
        with torch.no_grad():
            h = kwargs["hidden_states"]
            cos, sin = kwargs["position_embeddings"]
            b, T = h.shape[:2]
            d, groups = module.head_dim, module.num_key_value_groups
            start = 0 if window is None else max(0, T - int(window))
            q = self.queries.pop(module.layer_idx, None)
            q = (module.q_proj(h) if q is None else q)[:, start:].detach().view(b, T - start, -1, d)
            if hasattr(module, "q_norm"):  # Qwen3-style per-head norm, before RoPE
                q = module.q_norm(q)
            q = rotate(q.transpose(1, 2), cos[:, start:], sin[:, start:]).float() * module.scaling
            n_kv, L_all = keys.shape[1], keys.shape[-2]
            L = L_all - T
            qg = q.reshape(b, n_kv, groups, T - start, d)
            kf = keys.float().transpose(-1, -2).unsqueeze(2)  # [b, kv, 1, d, L+T]
            if T - start <= VOTE_ROWS:  # one block (a streamed segment, SnapKV's window): the full map, as always
                return self._block_votes(qg, kf, L, start, T, T, h.device)
            votes = keys.new_zeros((b, n_kv, L_all), dtype=torch.float32)
            for s in range(start, T, VOTE_ROWS):
                e = min(s + VOTE_ROWS, T)
                votes[..., : L + e] += self._block_votes(qg[:, :, :, s - start: e - start], kf, L, s, e, T, h.device)
            return votes

    def _block_votes(self, qg: torch.Tensor, kf: torch.Tensor, L: int, s: int, e: int, T: int,
                     device: torch.device) -> torch.Tensor:
        """Votes [b, kv, L + e] of query rows s..e−1 (``qg`` [b, kv, groups, e − s, d], scaled) over
        the keys they can see (``kf`` [b, kv, 1, d, ≥ L + e]): the cache, and the segment causally."""
        S = L + e
        logits = torch.matmul(qg, kf[..., :S])  # [b, kv, groups, e − s, S]
        future = ~self.mask(T, 0, device)[s:e, s:e]  # row r sees the block's keys 0..r
        logits[..., L + s:].masked_fill_(future, float("-inf"))
        return logits.softmax(-1).sum(dim=(2, 3))


VOTE_ROWS = 128  # voting queries per block in :meth:`PressCall.scores` (a block's map: rows × heads × keys fp32)


def dtype_seams(model: Any) -> list[tuple[Any, torch.dtype]]:
    """(module, dtype its output must have) where trained fp32 norms/embeddings meet a bf16/fp16
    base: each norm feeds the next projection in the base dtype, the final norm the LM head in its
    dtype, and the rotary cos/sin the base dtype (the residual stream stays in the embeddings'
    dtype). Empty when every weight has one dtype: the model then runs as is. Under autocast the
    casts change nothing autocast would not do."""
    decoder = decoder_of(model)
    base_dtype = decoder.layers[0].self_attn.q_proj.weight.dtype
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    head = base.get_output_embeddings()
    norms = [m for layer in decoder.layers for m in (layer.input_layernorm, layer.post_attention_layernorm)]
    if all(getattr(m, "weight", None) is None or m.weight.dtype == base_dtype for m in [*norms, decoder.norm]) \
            and decoder.embed_tokens.weight.dtype == base_dtype:
        return []
    return [*[(m, base_dtype) for m in norms], (decoder.norm, head.weight.dtype), (decoder.rotary_emb, base_dtype)]


def _cast_output(dtype: torch.dtype) -> Any:
    def hook(module: Any, args: Any, output: Any) -> Any:
        if isinstance(output, tuple):
            return tuple(o.to(dtype) for o in output)
        return output.to(dtype)
    return hook


@contextlib.contextmanager
def pressed(call: PressCall) -> Iterator[PressCall]:
    """Hook ``call`` on the model's rotary embedding and attention modules for the ``with`` body."""
    run = call.runner
    handles = [run.rotary.register_forward_pre_hook(call.on_rotary, with_kwargs=True)]
    for i, attn in enumerate(run.attn):
        handles.append(attn.register_forward_pre_hook(call.on_attention_input, with_kwargs=True))
        handles.append(attn.register_forward_hook(call.on_attention_output, with_kwargs=True))
        if call.wants_scores:
            handles.append(attn.q_proj.register_forward_hook(call.on_query(i)))
    handles += [m.register_forward_hook(_cast_output(dt)) for m, dt in run.seams]
    try:
        yield call
    finally:
        for h in handles:
            h.remove()


@contextlib.contextmanager
def layers_not_checkpointed(layers: Any) -> Iterator[None]:
    """transformers' per-layer checkpointing drops the cache in training; the runner checkpoints whole
    segments itself, so the layers' flag is off inside one."""
    flags = [getattr(layer, "gradient_checkpointing", False) for layer in layers]
    for layer in layers:
        layer.gradient_checkpointing = False
    try:
        yield
    finally:
        for layer, f in zip(layers, flags):
            layer.gradient_checkpointing = f


def checkpointing_on(layers: Any) -> bool:
    return any(getattr(layer, "gradient_checkpointing", False) is True for layer in layers)


__all__ = ["PressCall", "pressed", "decoder_of", "rotate", "layers_not_checkpointed", "checkpointing_on", "Press"]
