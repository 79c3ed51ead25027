"""``method=icae_pretrain`` (alias ``icae``) and ``method=icae_finetune``: the In-context Autoencoder.

ICAE (Ge et al., arXiv 2307.06945; reference code getao/icae, icae_v2). One model object:

- encoder = base LLM + LoRA (peft); ``mem_size`` learnable memory-token embeddings are appended
  after each context segment of ``mem_size × compression_rate`` tokens; the memory *slots* are the
  last-layer hidden states at those positions (all segments' slots concatenated);
- decoder = the same LLM with the adapter disabled (``with model.disable_adapter()``), reading
  the slots as input embeddings plus learned [AE] / [LM] / [FT] embeddings.

Trained: LoRA + the (mem_size + 3) × hidden embedding table, both float32 under any base dtype; the
base weights stay frozen (in their own dtype).
Pretraining loss λ·L_AE + (1−λ)·L_LM (``lambda_ae``), or the reference's per-example sampling
(``objective_sampling``, ``lm_ratio``). Fine-tuning: [slots][FT] prompt → answer.
As a system, ``ingest`` compresses the history and ``answer`` decodes greedily from the slots only.
"""
from __future__ import annotations

import contextlib
import time
from typing import Any, Iterator, Sequence

import torch
import torch.nn.functional as F

from ctxbench.config.schemas.method import IcaeMethod
from ctxbench.core.errors import ConfigError
from ctxbench.core.registry import register
from ctxbench.core.task_protocol import Scored, check_ratio, ratio_budget, ratio_extra
from ctxbench.core.types import History, Prediction, Question, Sample, Usage
from ctxbench.methods import icae_data as D
from ctxbench.methods import lora
from ctxbench.methods.base import MethodOutput, TrainableMethod, base_dtype, fp32_trainables
from ctxbench.methods.lean_mlp import lean_mlp
from ctxbench.methods.token_loss import token_loss
from ctxbench.models.loading import cache_kwarg, returned_cache

def qa_text(question: Question, prompt: Any = None) -> str:
    """The answer prompt's question part without context (the context is in the slots): ``prompt``'s,
    else the default prompt's (ctxbench.qa.registry.DEFAULT), for LoCoMo questions; the bare prompt for PwC
    rows. Answering uses the evaluator's ``qa_prompt`` (:attr:`ctxbench.core.system.System.answer_prompt`)."""
    if prompt is None:
        from ctxbench.qa import get_prompt

        prompt = get_prompt(None)
    return prompt.instruction_text(question).strip()


def add_lora(model: Any, lora_cfg: Any) -> Any:
    if lora_cfg is None:
        raise ConfigError("method.lora is required for ICAE (the encoder is the LLM + LoRA)")
    return lora.add_lora(model, lora_cfg)


class ICAE(TrainableMethod):
    """ICAE encoder/decoder on one peft-wrapped model; ``mode`` picks the training objective."""
    Settings = IcaeMethod  # its config schema (ctxbench/config/schemas/method.py)

    MODES = ("pretrain", "finetune")

    def __init__(self, cfg: Any, bundle: Any, mode: str | None = None):
        super().__init__(cfg, bundle)
        self.mode = str(mode or cfg["mode"])  # every conf/method/icae*.yaml sets it
        if self.mode not in self.MODES:
            raise ConfigError(f"method.mode={self.mode!r}: use one of {self.MODES}")
        self.lambda_ae = float(cfg.lambda_ae)
        if not 0.0 <= self.lambda_ae <= 1.0:
            raise ConfigError(f"method.lambda_ae={self.lambda_ae} must be in [0, 1]")
        for p in bundle.model.parameters():
            p.requires_grad_(False)
        self.model = add_lora(bundle.model, cfg.lora)
        lean_mlp(bundle.model)
        self.base = self.model.get_base_model()  # LoRA layers live inside it; disable_adapter toggles them
        self._lora_layers = lora.tuner_layers(self.model)  # the decoder switches them off every step
        self._cache_kw = cache_kwarg(self.base)  # the forward's keyword for a KV cache (transformers version)
        inner = getattr(self.base, self.base.base_model_prefix, None) or self.base.get_decoder()
        self.inner = inner  # the transformer body (no LM head): hidden states only
        self.layout = D.Layout(self.tokenizer, cfg)
        self.mem_size = self.layout.mem_size
        emb = self.base.get_input_embeddings().weight
        # mem_size memory tokens + [AE], [LM], [FT]; initialised at the scale of the token embeddings
        g = torch.Generator().manual_seed(cfg.seed)
        init = torch.randn(self.mem_size + 3, emb.shape[1], generator=g) * emb.detach().float().std()
        self.memory_embed = torch.nn.Parameter(init.to(emb.device))  # fp32 master weights, any base dtype
        self.slot_norm = cfg.slot_norm
        if self.slot_norm not in ("none", "embed"):
            raise ConfigError(f"method.slot_norm={self.slot_norm!r}: use none or embed")
        self._embed_norm = float(emb.detach().float().norm(dim=-1).mean())  # a constant, not trained
        self._rng = D.objective_rng(cfg.seed)  # the training draws of objective_sampling (rank 0 until seed_rank)
        fp32_trainables(self)  # peft keeps LoRA in fp32 already; this is the guarantee
        self._slots: torch.Tensor | None = None
        self._ingest: dict[str, Any] = {}
        self._ratio: float | None = None  # task=compression

    def set_compression_ratio(self, ratio: float) -> None:
        """Each history at the compression rate matching ``ratio``: its trained ``mem_size`` slots per
        segment, and as many segments as the budget ceil((1 − ratio) × n) holds (at least one), so a
        segment is about mem_size / (1 − ratio) tokens (r = 0.75 with 32 slots: 128-token segments, its
        trained 4x). A history shorter than mem_size / (1 − ratio) tokens still takes one segment's
        mem_size slots (ICAE holds no fewer), above its budget."""
        self._ratio = check_ratio(ratio, "compression ratio")

    def ratio_seg_len(self, n: int) -> int:
        """Tokens per segment under the ratio for a context of ``n`` tokens (the layout's otherwise)."""
        if self._ratio is None:
            return self.layout.seg_len
        n_seg = max(1, ratio_budget(self._ratio, n) // self.mem_size)
        return max(1, -(-n // n_seg))

    # -- model pieces ---------------------------------------------------------------------------
    def special(self, code: int) -> torch.Tensor:
        return self.memory_embed[self.mem_size + D.SPECIAL_ROW[code]]

    def encode_segments(self, enc_ids: torch.Tensor, enc_len: torch.Tensor) -> torch.Tensor:
        """Slots (n_segments, mem_size, hidden) of right-padded segments, adapter enabled."""
        n, m = enc_ids.shape[0], self.mem_size
        width = enc_ids.shape[1] + m
        ids = torch.full((n, width), int(self.tokenizer.pad_token_id), dtype=torch.long, device=enc_ids.device)
        ids[:, : enc_ids.shape[1]] = enc_ids
        pos = torch.arange(width, device=enc_ids.device).unsqueeze(0)
        start = enc_len.to(enc_ids.device).unsqueeze(1)
        mem_mask = (pos >= start) & (pos < start + m)
        mask = (pos < start + m).long()
        embeds = self.base.get_input_embeddings()(ids)
        mem = self.memory_embed[:m].to(embeds.dtype).unsqueeze(0).expand(n, m, -1).reshape(n * m, -1)
        embeds = embeds.masked_scatter(mem_mask.unsqueeze(-1), mem)
        hidden = self.inner(inputs_embeds=embeds, attention_mask=mask, use_cache=False).last_hidden_state
        slots = hidden[mem_mask].view(n, m, -1)
        if self.slot_norm == "embed":  # rescale each slot to the token embeddings' mean norm
            slots = slots * (self._embed_norm / slots.norm(dim=-1, keepdim=True).clamp(min=1e-6))
        return slots

    def decoder_embeds(self, codes: torch.Tensor, slot_rows: torch.Tensor) -> torch.Tensor:
        """Embed decoder codes: tokens from the frozen table, SLOT positions from ``slot_rows`` (in
        row-major order), special codes from the learned table."""
        embeds = self.base.get_input_embeddings()(codes.clamp(min=0))
        slot_mask = codes == D.SLOT
        if int(slot_mask.sum()) != slot_rows.shape[0]:
            raise RuntimeError(f"ICAE: {int(slot_mask.sum())} slot positions but {slot_rows.shape[0]} slots")
        embeds = embeds.masked_scatter(slot_mask.unsqueeze(-1), slot_rows.to(embeds.dtype))
        for code in (D.AE, D.LM, D.FT):
            embeds = torch.where((codes == code).unsqueeze(-1), self.special(code).to(embeds.dtype), embeds)
        return embeds

    def decode_hidden(self, embeds: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Decoder hidden states: the frozen base LLM (adapter disabled). Under gradient
        checkpointing the layers recompute during backward, after this context has exited:
        :func:`lora.checkpoint_with_adapter_state` (set up by ``forward``) recomputes them
        with the adapter state they ran with, here disabled."""
        with lora.adapters_off(self.model, self._lora_layers):
            return self.inner(inputs_embeds=embeds, attention_mask=mask, use_cache=False).last_hidden_state

    # -- training -------------------------------------------------------------------------------
    def train_examples(self, samples: list[Sample]) -> list[D.Example]:
        c = self.cfg
        if self.mode == "finetune":
            ex = D.finetune_examples(samples, self.layout, c.max_context_tokens,
                                     c.max_prompt_tokens, c.max_answer_tokens, c.max_examples, prompt_of=qa_text)
            if not ex and samples:
                raise ConfigError("method=icae_finetune needs samples with questions (PwC rows: context, "
                                  "prompt, answer); this dataset has none — use dataset=pwc or locomo_pwc")
            return ex
        return D.pretrain_examples([s.history.render() for s in samples], self.layout, c.context_tokens,
                                   c.lm_tokens, c.max_examples)

    def collate(self, examples: list[D.Example]) -> dict[str, torch.Tensor]:
        """A batch; with ``objective_sampling`` its objectives are drawn from the training stream in
        training mode, and from the batch's own stream in eval mode (the loop's held-out evaluation),
        which leaves the training draws as they are."""
        rng = self._rng if self.training else D.eval_rng(self.cfg.seed, examples)
        return D.collate(examples, self.layout, self.mode, int(self.tokenizer.pad_token_id),
                         objective_sampling=self.cfg.objective_sampling,
                         lm_ratio=float(self.cfg.lm_ratio), rng=rng)

    def seed_rank(self, rank: int) -> None:
        """The training draws of DDP rank ``rank`` (each rank its own stream)."""
        self._rng = D.objective_rng(self.cfg.seed, rank)

    def rng_state(self) -> dict[str, Any]:
        """The training draws' position, saved per rank in the checkpoint (a resume continues them)."""
        return {"objective": D.rng_to_json(self._rng)}

    def load_rng_state(self, state: dict[str, Any]) -> None:
        self._rng = D.rng_from_json(state["objective"])

    def gradient_checkpointing_enable(self) -> None:
        super().gradient_checkpointing_enable()
        lora.checkpoint_with_adapter_state(self.model)

    def forward(self, batch: dict[str, torch.Tensor]) -> MethodOutput:
        if self.training and torch.is_grad_enabled():  # checkpointing enabled on the model directly, too
            lora.checkpoint_with_adapter_state(self.model)
        slots = self.encode_segments(batch["enc_ids"], batch["enc_len"])
        owner = batch["enc_owner"]
        rows = torch.cat([slots[owner == o].reshape(-1, slots.shape[-1]) for o in batch["dec_owner"].tolist()])
        codes, labels = batch["dec_ids"], batch["dec_labels"]
        hidden = self.decode_hidden(self.decoder_embeds(codes, rows), batch["dec_mask"])
        target = labels[:, 1:]
        sel = target != -100
        kind = batch["dec_kind"].unsqueeze(1).expand_as(target)[sel]
        tgt = target[sel]
        weights, counts = self.token_weights(kind)
        loss, tok_loss = token_loss(hidden[:, :-1][sel], self.base.get_output_embeddings(), tgt, weights)
        stats: dict[str, float] = {"slots": float(slots.shape[0] * slots.shape[1])}
        for name, k in D.KIND.items():
            if counts[name]:
                stats[f"{name}_loss"] = float(tok_loss[kind == k].mean())
        return MethodOutput(loss=loss, n_tokens=int(sel.sum()), stats=stats)

    def token_weights(self, kind: torch.Tensor) -> tuple[torch.Tensor, dict[str, int]]:
        """Each labelled token's share of the loss, and the token count per objective: the token mean
        (fine-tuning, the reference's objective sampling), else λ·mean(AE) + (1−λ)·mean(LM) in every
        batch (an objective the batch lacks adds 0; λ still weights the other)."""
        counts = {name: int((kind == k).sum()) for name, k in D.KIND.items()}
        n = kind.shape[0]
        if self.mode == "finetune" or self.cfg.objective_sampling:
            return torch.full((n,), 1.0 / max(n, 1), dtype=torch.float32, device=kind.device), counts
        share = {"ae": self.lambda_ae, "lm": 1.0 - self.lambda_ae}
        weights = torch.zeros(n, dtype=torch.float32, device=kind.device)
        for name, k in D.KIND.items():
            if counts[name]:
                weights[kind == k] = share.get(name, 0.0) / counts[name]
        return weights, counts

    # -- inference helpers ----------------------------------------------------------------------
    @torch.no_grad()
    def compress(self, ids: list[int], max_segments: int | None = None,
                 seg_len: int | None = None) -> tuple[torch.Tensor, int]:
        """Slots (n_seg × mem_size, hidden) for token ids (keeping the most recent segments) and the
        number of context tokens they cover; segments of ``seg_len`` tokens (the layout's by default)."""
        segs = D.segment(ids, seg_len or self.layout.seg_len)
        if max_segments:
            segs = segs[-int(max_segments):]
        if not segs:
            return torch.zeros(0, self.memory_embed.shape[1], device=self.device, dtype=base_dtype(self.base)), 0
        bs = self.cfg.encode_batch_size
        out = []
        framed = self.layout.frame_segments(segs)
        for i in range(0, len(segs), bs):
            part = framed[i : i + bs]
            enc = torch.full((len(part), max(map(len, part))), int(self.tokenizer.pad_token_id), dtype=torch.long)
            for j, s in enumerate(part):
                enc[j, : len(s)] = torch.tensor(s)
            out.append(self.encode_segments(enc.to(self.device), torch.tensor([len(s) for s in part]).to(self.device)))
        slots = torch.cat(out).reshape(-1, self.memory_embed.shape[1])
        return slots, sum(len(s) for s in segs)

    def memory_slots(self, n_tokens: int) -> int:
        """Slots ``n_tokens`` of context compress into (mem_size per segment)."""
        return len(D.segment(list(range(n_tokens)), self.layout.seg_len)) * self.mem_size

    @torch.no_grad()
    def decoder_logits(self, codes: list[int], slots: torch.Tensor) -> torch.Tensor:
        """Decoder logits for one code sequence given slots (the decoder sees nothing else)."""
        c = torch.tensor([codes], device=self.device)
        hidden = self.decode_hidden(self.decoder_embeds(c, slots))
        return self.base.get_output_embeddings()(hidden)[0]

    @torch.no_grad()
    def greedy(self, codes: list[int], slots: torch.Tensor, max_new_tokens: int) -> list[int]:
        """Greedy decoding with the adapter disabled, from codes whose SLOT positions hold ``slots``."""
        c = torch.tensor([codes], device=self.device)
        embeds = self.decoder_embeds(c, slots)
        stop = {self.tokenizer.eos_token_id}
        gen_eos = getattr(self.base.generation_config, "eos_token_id", None)
        stop |= set(gen_eos if isinstance(gen_eos, list) else [gen_eos])
        out: list[int] = []
        past = None
        with self.model.disable_adapter():
            for _ in range(int(max_new_tokens)):
                res = self.base(inputs_embeds=embeds, **{self._cache_kw: past}, use_cache=True, logits_to_keep=1)
                past = returned_cache(res)
                nxt = int(res.logits[0, -1].argmax())
                if nxt in stop:
                    break
                out.append(nxt)
                embeds = self.base.get_input_embeddings()(torch.tensor([[nxt]], device=self.device))
        return out

    def reconstruct(self, text: str, max_new_tokens: int | None = None) -> str:
        """AE evaluation: compress ``text`` and decode it back greedily from [slots][AE]."""
        ids = self.layout.encode(text)
        return self.tokenizer.decode(self.reconstruct_ids(ids, max_new_tokens or len(ids) + 8), skip_special_tokens=True)

    # -- the eval-task protocol (core/task_protocol.py) ---------------------------------------------
    @torch.no_grad()
    def reconstruct_ids(self, context: Sequence[int], max_new_tokens: int) -> list[int]:
        """Compress ``context`` and decode it back greedily from [slots][AE] (the decoder sees only the slots)."""
        self.eval()
        slots, _ = self.compress(list(context))
        codes = self.layout.row_bos + [D.SLOT] * slots.shape[0] + [D.AE]
        return self.greedy(codes, slots, max_new_tokens)

    @torch.no_grad()
    def score_continuation(self, context: Sequence[Sequence[int]], target: Sequence[int],
                           prompt: Sequence[int] = ()) -> Scored:
        """Summed NLL of ``target`` read by the decoder after the slots of ``context`` (all chunks joined,
        segmented as in training): [slots][LM] target for a continuation (Table 6's text continuation),
        or the fine-tuning layout [slots][FT] prompt → target when a prompt is given to ``icae_finetune``."""
        self.eval()
        flat = [int(t) for c in context for t in c]
        slots, _ = self.compress(flat)
        n = int(slots.shape[0])
        if prompt and self.mode == "finetune":
            head = self.layout.ft_prompt(n, list(prompt))
        else:
            head = self.layout.row_bos + [D.SLOT] * n + ([D.LM] if self.layout.use_lm_token else []) + list(prompt)
        codes = head + list(target)
        logits = self.decoder_logits(codes, slots)[len(head) - 1 : -1].float()
        tgt = torch.tensor(list(target), device=logits.device)
        nll = float(F.cross_entropy(logits, tgt, reduction="sum"))
        return Scored(nll=nll, tokens=len(target), context_tokens=len(flat), memory_slots=n, kv_bytes=self.kv_bytes(n))

    @contextlib.contextmanager
    def plain_lm(self) -> Iterator[Any]:
        """The base LLM with the encoder's LoRA disabled: the decoder ICAE reads its slots with."""
        with self.model.disable_adapter():
            yield self.base

    def reconstruction_bleu(self, text: str) -> float:
        return D.reconstruction_bleu(text, self.reconstruct(text))

    # -- as a system ----------------------------------------------------------------------------
    def ingest(self, history: History) -> None:
        t0 = time.perf_counter()
        self.eval()
        ids = self.layout.encode(history.render())
        self._slots, kept = self.compress(ids, self.cfg.max_segments, self.ratio_seg_len(len(ids)))
        n_seg = self._slots.shape[0] // self.mem_size
        self._ingest = {"context_tokens_total": len(ids), "context_tokens_compressed": kept,
                        "budget": None if self._ratio is None else ratio_budget(self._ratio, len(ids)),
                        "dropped_tokens": len(ids) - kept, "segments": n_seg,
                        "encoded_tokens": kept + n_seg * self.mem_size
                        + len(self.layout.bos) * (n_seg if self.layout.segment_layout == "ctxbench" else min(n_seg, 1)),
                        "seconds": time.perf_counter() - t0}

    def construction_usage(self) -> Usage:
        """What ingest cost (per history): encoder forward passes over segments + memory tokens."""
        info = self._ingest
        return Usage(construction_prompt_tokens=info.get("encoded_tokens", 0),
                     construction_calls=info.get("segments", 0), ingest_seconds=info.get("seconds", 0.0))

    def kv_bytes(self, n_positions: int) -> int:
        """Bytes of the decoder's KV cache for ``n_positions`` positions."""
        conf = self.base.config
        heads = getattr(conf, "num_key_value_heads", None) or conf.num_attention_heads
        head_dim = getattr(conf, "head_dim", None) or conf.hidden_size // conf.num_attention_heads
        itemsize = torch.empty((), dtype=base_dtype(self.base)).element_size()  # the decoder's dtype, not fp32 slots
        return int(n_positions * conf.num_hidden_layers * 2 * heads * head_dim * itemsize)

    def answer(self, question: Question) -> Prediction:
        if self._slots is None:
            raise RuntimeError("ICAE.answer called before ingest(history)")
        t0 = time.perf_counter()
        n = int(self._slots.shape[0])
        prompt = self.layout.encode(qa_text(question, self.answer_prompt))
        codes = self.layout.ft_prompt(n, prompt)
        gen = self.greedy(codes, self._slots, self.answer_max_tokens(question))
        text = self.tokenizer.decode(gen, skip_special_tokens=True).strip()
        info = self._ingest
        usage = Usage(
            answer_prompt_tokens=len(codes) - n, answer_completion_tokens=len(gen), answer_calls=1,
            held_soft_slots=n, memory_items=n, memory_tokens=n, kv_bytes=self.kv_bytes(n),
            answer_seconds=time.perf_counter() - t0,
            extra={"compression_rate": info["context_tokens_compressed"] / max(n, 1),
                   **ratio_extra(self._ratio, info.get("budget")),
                   "slots": n, "segments": info["segments"], "decoder_prompt_tokens": len(codes),
                   "context_tokens_total": info["context_tokens_total"],
                   "context_tokens_compressed": info["context_tokens_compressed"],
                   "dropped_tokens": info["dropped_tokens"]})
        return Prediction(text=text, usage=usage)


@register("method", "icae_pretrain", aliases=("icae",))
class ICAEPretrain(ICAE):
    """ICAE pretraining (autoencoding + LM); its config sets ``mode: pretrain``."""


@register("method", "icae_finetune")
class ICAEFinetune(ICAE):
    """ICAE fine-tuning on (context, prompt, answer) with the [FT] token; its config sets ``mode: finetune``."""
