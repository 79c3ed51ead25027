"""CCM — Compressed Context Memory (Kim et al., ICLR 2024, arXiv 2312.03414): ``method=ccm_concat``
and ``method=ccm_merge``.

The history arrives step by step (a LoCoMo session, a chunk of ``step_tokens`` of a document). After
each step the model reads ``[memory][ctx_t][COMP_t]``; a conditional LoRA (:mod:`.ccm_lora`) active
only at the ``n_tok`` trainable ``<COMP>`` tokens turns them into a compressed state, and only the
COMP tokens' key/values are kept:

- ``concat``: memory_t = [memory_{t-1}; KV(COMP_t)] (grows by ``n_tok`` slots per step and layer);
- ``merge``:  memory_t = (1 - 1/t) memory_{t-1} + (1/t) KV(COMP_t) (stays ``n_tok`` slots).

Training runs all steps in one forward (:mod:`.ccm_mask`: 4-D mask, "skip" position ids, merged
memory columns) that is exactly the recurrent computation; the loss is on the continuation text
of every step after the first (read from the compressed memory of the steps before) and on the
answer of a QA target (COMP embeddings and LoRA train in float32 under any base dtype). Answering decodes from memory + question only (adapters off: the base
model reads the compressed KV).

Usage per answer: ``memory_items`` = ``held_kv_slots`` = memory slots (KV positions per layer),
``kv_bytes`` = bytes of all layers' K and V, ``extra.kv_entries`` = slots × layers × kv-heads × 2;
construction = the tokens fed while compressing (text + COMP) and one call per step.

Under ``task=compression`` (:meth:`CCM.set_compression_ratio`) the history is re-cut into steps
whose compression rate matches the ratio (concat: as many n_tok-slot steps as the budget holds;
merge: steps of n_tok / (1 − r) tokens).

Positions follow the reference ("skip": text tokens count on across steps, COMP tokens do not
advance the counter), so on a long history (a LoCoMo conversation is ~20k SmolLM2 tokens) positions
grow past a small model's trained window, as in the reference.
"""
from __future__ import annotations

import contextlib
import re
import time
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import torch
from torch import nn

from ctxbench.config.schemas.method import CcmMethod
from ctxbench.core.errors import ConfigError
from ctxbench.models.loading import cache_kwarg, kv_bytes_per_token, returned_cache
from ctxbench.core.registry import register
from ctxbench.core.task_protocol import Scored, check_ratio, ratio_budget, ratio_extra, start_ids
from ctxbench.core.types import History, Prediction, Question, Sample, Session, Usage
from ctxbench.methods.lean_mlp import lean_mlp
from ctxbench.methods.token_loss import token_loss
from ctxbench.methods.base import MethodOutput, TrainableMethod, base_dtype, fp32_trainables
from ctxbench.methods.ccm_lora import CompGate, install_gated_lora, lora_config
from ctxbench.methods.ccm_data import session_number, session_text
from ctxbench.methods.ccm_mask import (Layout, ParallelState, build_layout, causal_with_past, collate_layouts, parallel_mask,
                       use_ccm_attention)

MODES = ("concat", "merge")


@dataclass
class Memory:
    """Compressed context memory: per layer, keys/values ``[1, kv_heads, slots, head_dim]``."""

    keys: list[torch.Tensor] = field(default_factory=list)
    values: list[torch.Tensor] = field(default_factory=list)
    n_steps: int = 0
    text_pos: int = 0  # text tokens seen so far (the position counter; COMP tokens do not advance it)
    tokens_seen: int = 0

    @property
    def slots(self) -> int:
        return int(self.keys[0].shape[2]) if self.keys else 0

    @property
    def kv_entries(self) -> int:
        """Key/value vectors held: slots × layers × kv-heads × 2."""
        return sum(int(k.shape[1] * k.shape[2]) * 2 for k in self.keys)

    @property
    def kv_bytes(self) -> int:
        return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in zip(self.keys, self.values))


class CCM(TrainableMethod):
    """One class for both modes; ``method.mode`` picks concat / merge."""
    Settings = CcmMethod  # its config schema (ctxbench/config/schemas/method.py)

    def __init__(self, cfg: Any, bundle: Any):
        super().__init__(cfg, bundle)
        mode = cfg.mode
        if mode not in MODES:
            raise ConfigError(f"method.mode must be one of {MODES}, got {mode!r}")
        self.mode = mode
        self.recurrent = cfg.recurrent  # false: each step compressed on its own (MetaICL/LaMP)
        self.loss_on = cfg.loss_on
        if self.loss_on not in ("steps", "output"):
            raise ConfigError(f"method.loss_on={self.loss_on!r}: use steps (every step's continuation and the "
                              "target) or output (the target only, as the paper trains MetaICL / LaMP / DailyDialog)")
        self.n_tok = cfg.n_tok
        if self.n_tok < 1:
            raise ConfigError(f"method.n_tok must be >= 1, got {self.n_tok}")
        self.model = bundle.model
        lean_mlp(self.model)  # its gated MLPs keep two of three intermediates for backward
        self._cache_kw = cache_kwarg(self.model)  # the forward's keyword for a KV cache (transformers version)
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.gate = CompGate()
        self.pstate = ParallelState()
        lc = lora_config(cfg)
        self.lora_layers = install_gated_lora(self.model, self.gate, lc["targets"], lc["r"], lc["alpha"], lc["dropout"])
        emb = self.model.get_input_embeddings().weight
        gen = torch.Generator().manual_seed(cfg.seed)
        # COMP embeddings start near the vocabulary mean, each a little different.
        init = emb.detach().float().mean(0, keepdim=True) + emb.detach().float().std() * 0.1 * torch.randn(
            self.n_tok, emb.shape[1], generator=gen)
        self.comp_embeddings = nn.Parameter(init.to(emb.device))  # fp32 master weights, any base dtype
        fp32_trainables(self)  # the gated LoRA is made in fp32 already; this is the guarantee
        self.attn_implementation = use_ccm_attention(self.model, self.pstate)
        self.memory = Memory()
        self._speakers: list[str] = []
        self._construction = Usage()
        self._ratio: float | None = None  # task=compression
        self._budget: int | None = None

    def set_compression_ratio(self, ratio: float) -> None:
        """Each history compressed at the rate matching ``ratio``, ``n_tok`` COMP slots per step (its
        trained count): the history's n tokens (sessions or document, joined) are cut into near-equal
        steps — concat: as many as the budget ceil((1 − ratio) × n) holds, n_tok slots each (at least
        one step); merge (always n_tok slots): steps of n_tok / (1 − ratio) tokens, each compressed at
        that rate. One step's n_tok slots is the floor: a history shorter than n_tok / (1 − ratio)
        tokens holds more than its budget."""
        self._ratio = check_ratio(ratio, "compression ratio")

    def ratio_steps(self, steps: list[list[int]]) -> list[list[int]]:
        """The history's steps re-cut for the ratio (unchanged without one)."""
        if self._ratio is None:
            return steps
        ids = [t for step in steps for t in step]
        n = len(ids)
        self._budget = ratio_budget(self._ratio, n)
        if not ids:
            return []
        if self.mode == "concat":
            size = -(-n // max(1, self._budget // self.n_tok))
        else:
            size = max(1, int(self.n_tok / (1.0 - self._ratio)))
        return [ids[j:j + size] for j in range(0, n, size)]

    # ---- shared pieces ----------------------------------------------------------------------------
    @property
    def decoder(self) -> nn.Module:
        return self.model.base_model

    def encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def _embed(self, ids: torch.Tensor, is_comp: torch.Tensor, comp_k: torch.Tensor) -> torch.Tensor:
        emb = self.model.get_input_embeddings()(ids)
        comp = self.comp_embeddings.to(emb.dtype)[comp_k.clamp(min=0)]
        return torch.where(is_comp.unsqueeze(-1), comp, emb)

    @property
    def _placeholder(self) -> int:
        return int(self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0)

    def _dtype(self) -> torch.dtype:
        return base_dtype(self.model)

    # ---- parallel training -----------------------------------------------------------------------
    def parallel_hidden(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Last hidden states of the one-pass forward over all steps (``[B, L, H]``)."""
        dtype = self._dtype()
        mask, avg = parallel_mask(batch, self.mode, self.n_tok, dtype, recurrent=self.recurrent)
        emb = self._embed(batch["input_ids"], batch["is_comp"], batch["comp_k"])
        self.gate.set(batch["is_comp"])
        self.pstate.avg = avg
        # With gradient checkpointing the layers run again during backward: keep the gate and the
        # merge matrix set until then (every other entry point sets its own state first).
        keep = torch.is_grad_enabled() and self.training and self._checkpointing()
        try:
            out = self.decoder(inputs_embeds=emb, attention_mask=mask, position_ids=batch["position_ids"],
                               use_cache=False)
        finally:
            if not keep:
                self.clear_state()
        return out.last_hidden_state

    def _checkpointing(self) -> bool:
        return any(getattr(mod, "gradient_checkpointing", False) is True for mod in self.model.modules())

    def clear_state(self) -> None:
        """No COMP gate, no merged columns: the model computes the plain base model."""
        self.gate.set(None)
        self.pstate.avg = None

    # ---- the eval-task protocol (core/task_protocol.py) ---------------------------------------------
    @torch.no_grad()
    def score_continuation(self, context: Sequence[Sequence[int]], target: Sequence[int],
                           prompt: Sequence[int] = ()) -> Scored:
        """Summed NLL of ``target`` read after the compressed memory of ``context`` (each chunk one step,
        a longer one split into ``step_tokens`` pieces) and ``prompt``, in the parallel form (equal to
        recurrent compression). Every target token is scored, as by every method: the first from the
        prompt's last token, or with no prompt from the start token read after the memory (the memory
        is COMP keys with no text after them; the ``no_context`` baseline reads the same start token
        with no memory)."""
        self.eval()
        size = self.cfg.step_tokens
        steps = [list(c[i:i + size]) for c in context for i in range(0, len(c), size) if len(c[i:i + size])]
        lead = list(prompt) or start_ids(self.tokenizer)
        if not lead:
            raise ValueError("score_continuation: no prompt and no start token, so nothing reads the memory "
                             "before the first target token")
        ids, tgt = lead + list(target), list(target)
        labels = [-100] * (len(lead) - 1) + tgt + [-100]
        lay = self.layout(steps, ids, labels, loss_steps_from=len(steps) + 2)  # loss on the target only
        batch = {k: v.to(self.device) if torch.is_tensor(v) else v for k, v in self.collate([lay]).items()}
        try:
            h = self.parallel_hidden(batch)
        finally:
            self.clear_state()
        sel = batch["labels"] != -100
        logits = self.model.get_output_embeddings()(h[sel]).float()
        nll = float(nn.functional.cross_entropy(logits, batch["labels"][sel], reduction="sum"))
        slots = self.n_tok * (len(steps) if self.mode == "concat" else min(len(steps), 1))
        return Scored(nll=nll, tokens=int(sel.sum()), context_tokens=sum(map(len, steps)), memory_slots=slots,
                      kv_bytes=slots * kv_bytes_per_token(self.model))

    @contextlib.contextmanager
    def plain_lm(self) -> Iterator[Any]:
        """The base model: the conditional LoRA's gate is off (it fires only at COMP positions)."""
        self.clear_state()
        yield self.model

    def parallel_logits(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.model.get_output_embeddings()(self.parallel_hidden(batch))

    def forward(self, batch: dict[str, torch.Tensor]) -> MethodOutput:
        h = self.parallel_hidden(batch)
        labels = batch["labels"]
        sel = labels != -100
        n = int(sel.sum())
        if n == 0:
            return MethodOutput(loss=h.sum() * 0.0, n_tokens=0)
        loss, _ = token_loss(h[sel], self.model.get_output_embeddings(), labels[sel])
        return MethodOutput(loss=loss, n_tokens=n, stats={"steps_per_example": float(batch["n_steps"].float().mean())})

    def collate(self, examples: list[Layout]) -> dict[str, torch.Tensor]:
        return collate_layouts(examples, self._placeholder)

    # ---- training data ---------------------------------------------------------------------------
    def layout(self, steps: list[list[int]], target: list[int] | None = None,
               target_labels: list[int] | None = None, loss_steps_from: int | None = None) -> Layout:
        lsf = self.cfg.loss_steps_from if loss_steps_from is None else loss_steps_from
        if self.loss_on == "output":  # no loss on the steps' own text: only the target's labels
            lsf = max(lsf, len(steps) + 1)
        return build_layout(steps, self.n_tok, self._placeholder, target, target_labels, lsf)

    def train_examples(self, samples: list[Sample]) -> list[Layout]:
        """Text documents → chunk streams; session histories → session streams and QA targets."""
        from ctxbench.methods.ccm_data import examples_from_samples

        return examples_from_samples(self, samples)

    def qa_target(self, question: Question, answer: str | None) -> tuple[list[int], list[int]]:
        """Chat-formatted question (no labels) + answer tokens (labels), as ``answer`` decodes."""
        prompt = self._question_ids(question)
        if answer is None:
            return prompt, [-100] * len(prompt)
        eos = self.tokenizer.eos_token or ""
        ans = self.encode(str(answer) + eos)
        ids = prompt + ans
        labels = [-100] * (len(prompt) - 1) + ans + [-100]
        return ids, labels

    def _question_ids(self, question: Question) -> list[int]:
        from ctxbench.llm.chat_template import chat_text
        from ctxbench.qa import prompt_text

        msgs = self.answer_prompt.instruction_messages(question)
        tok = self.tokenizer
        if getattr(tok, "chat_template", None):
            text = chat_text(tok, msgs)  # continues a reply prefix
        else:
            text = prompt_text(msgs)
        return self.encode(text)

    # ---- recurrent compression (inference) ---------------------------------------------------------
    def _cache(self, memory: Memory):
        from transformers import DynamicCache

        # full layers whatever the config says: a sliding-window config (Mistral-7B-v0.1) would cut a
        # memory longer than the window (tests/test_press_exact.py)
        cache = DynamicCache()
        for i, (k, v) in enumerate(zip(memory.keys, memory.values)):
            cache.update(k, v, i)
        return cache

    @torch.no_grad()
    def compress_step(self, memory: Memory, tokens: list[int], return_logits: bool = False
                      ) -> tuple[Memory, torch.Tensor | None]:
        """Read ``[memory][tokens][COMP]`` and return the new memory (and the text tokens' logits)."""
        n, L = self.n_tok, len(tokens)
        dev, dtype = self.device, self._dtype()
        ids = torch.tensor([list(tokens) + [self._placeholder] * n], device=dev)
        is_comp = torch.tensor([[False] * L + [True] * n], device=dev)
        comp_k = torch.tensor([[-1] * L + list(range(n))], device=dev)
        pos = torch.arange(memory.text_pos, memory.text_pos + L + n, device=dev)[None]
        past = memory if self.recurrent else Memory()  # non-recurrent: the step alone, positions go on
        cache = self._cache(past)
        mask = causal_with_past(L + n, past.slots, dtype, dev)
        self.clear_state()
        self.gate.set(is_comp)
        try:
            out = self.decoder(inputs_embeds=self._embed(ids, is_comp, comp_k), attention_mask=mask, position_ids=pos,
                               **{self._cache_kw: cache}, use_cache=True)
        finally:
            self.clear_state()
        logits = self.model.get_output_embeddings()(out.last_hidden_state[:, :L]) if return_logits else None
        t = memory.n_steps + 1
        keys, values = [], []
        for i, layer in enumerate(returned_cache(out).layers):
            k_new, v_new = layer.keys[:, :, -n:], layer.values[:, :, -n:]
            if self.mode == "concat" or not memory.keys:
                k = torch.cat([memory.keys[i], k_new], 2) if memory.keys else k_new
                v = torch.cat([memory.values[i], v_new], 2) if memory.keys else v_new
            else:  # running mean, a_t = 1/t
                k = memory.keys[i] + (k_new - memory.keys[i]) / t
                v = memory.values[i] + (v_new - memory.values[i]) / t
            keys.append(k.contiguous())
            values.append(v.contiguous())
        new = Memory(keys, values, t, memory.text_pos + L, memory.tokens_seen + L + n)
        return new, logits

    @torch.no_grad()
    def read(self, memory: Memory, tokens: list[int]) -> tuple[torch.Tensor, Any]:
        """Logits of ``tokens`` read after ``memory`` (adapters off), and the cache after them."""
        dev, L = self.device, len(tokens)
        self.clear_state()
        ids = torch.tensor([tokens], device=dev)
        pos = torch.arange(memory.text_pos, memory.text_pos + L, device=dev)[None]
        out = self.model(input_ids=ids, attention_mask=causal_with_past(L, memory.slots, self._dtype(), dev),
                         position_ids=pos, **{self._cache_kw: self._cache(memory)}, use_cache=True)
        return out.logits, returned_cache(out)

    def history_steps(self, history: History) -> list[list[int]]:
        """Token lists of the history's steps: sessions (with date; long ones split), or chunks."""
        size = self.cfg.step_tokens
        cap = int(self.cfg.max_session_tokens or 0)
        if history.sessions:
            steps = []
            for s in history.sessions:
                if not s.turns:
                    continue
                ids = self.encode(session_text(s) + "\n")
                steps.extend([ids[j:j + cap] for j in range(0, len(ids), cap)] if cap else [ids])
            return steps
        ids = self.encode(history.text)
        return [ids[j:j + size] for j in range(0, len(ids), size)]

    @torch.no_grad()
    def ingest(self, history: History) -> None:
        from tqdm.auto import tqdm

        t0 = time.perf_counter()
        self.eval()
        steps = self.ratio_steps(self.history_steps(history))
        memory = Memory()
        for toks in tqdm(steps, desc=f"ccm_{self.mode} ingest", disable=not self.cfg.progress):
            memory, _ = self.compress_step(memory, toks)
        self.memory = memory
        self._speakers = list(history.speakers)
        self._construction = Usage(construction_prompt_tokens=memory.tokens_seen, construction_calls=len(steps),
                                   ingest_seconds=time.perf_counter() - t0)

    @torch.no_grad()
    def generate(self, memory: Memory, prompt: list[int], max_new_tokens: int) -> list[int]:
        """Greedy decoding from memory + prompt (adapters off)."""
        tok = self.tokenizer
        stops = {i for i in (tok.eos_token_id, tok.convert_tokens_to_ids("<|im_end|>")) if isinstance(i, int) and i >= 0}
        logits, cache = self.read(memory, prompt)
        dev, pos, out = self.device, memory.text_pos + len(prompt), []
        for _ in range(max_new_tokens):
            nxt = int(logits[0, -1].argmax())
            if nxt in stops:
                break
            out.append(nxt)
            past = cache.get_seq_length()
            res = self.model(input_ids=torch.tensor([[nxt]], device=dev), position_ids=torch.tensor([[pos]], device=dev),
                             attention_mask=causal_with_past(1, past, self._dtype(), dev),
                             **{self._cache_kw: cache}, use_cache=True)
            logits, cache, pos = res.logits, returned_cache(res), pos + 1
        return out

    @torch.no_grad()
    def answer(self, question: Question) -> Prediction:
        t0 = time.perf_counter()
        self.eval()
        prompt = self._question_ids(question)
        new = self.generate(self.memory, prompt, self.answer_max_tokens(question))
        text = self.tokenizer.decode(new, skip_special_tokens=True)
        m, c = self.memory, self._construction
        usage = Usage(construction_prompt_tokens=c.construction_prompt_tokens, construction_calls=c.construction_calls,
                      ingest_seconds=c.ingest_seconds, answer_prompt_tokens=len(prompt),
                      answer_completion_tokens=len(new), answer_calls=1, held_kv_slots=m.slots,
                      memory_items=m.slots, memory_tokens=m.slots, kv_bytes=m.kv_bytes,
                      answer_seconds=time.perf_counter() - t0,
                      extra={"kv_entries": m.kv_entries, "steps": m.n_steps, "mode": self.mode,
                             **ratio_extra(self._ratio, self._budget)})
        return Prediction(text=text, usage=usage)


register("method", "ccm_concat")(CCM)
register("method", "ccm_merge")(CCM)
