"""``method=lm``: plain causal-LM fine-tuning with LoRA — the full-context baseline.

Training: windows of ``seq_len`` tokens from text documents (or rendered conversations), next-token
loss. The trained weights (LoRA, or all of them with ``lora.enabled: false``) are float32 under any
base dtype; the loop's autocast runs the compute in bf16. As a system it answers with the whole history in the prompt (truncated from the oldest
tokens to fit the model's window), so a trained ``lm`` is compared on the same questions.
"""
from __future__ import annotations

import contextlib
import time
from typing import Any, Iterator, Sequence

import torch
import torch.nn.functional as F

from ctxbench.config.schemas.method import LmMethod
from ctxbench.core.errors import ConfigError
from ctxbench.models.loading import kv_bytes_per_token
from ctxbench.core.registry import register
from ctxbench.core.task_protocol import Scored
from ctxbench.core.types import History, Prediction, Question, Sample, Usage
from ctxbench.methods import lora
from ctxbench.methods.base import MethodOutput, TrainableMethod, chunk_tokens, fp32_trainables, pad_batch
from ctxbench.methods.lean_mlp import lean_mlp
from ctxbench.methods.token_loss import token_loss


def add_lora(model: Any, lora_cfg: Any) -> Any:
    """Wrap a model with a peft LoRA adapter (base weights frozen); no-op when disabled."""
    if not lora_cfg or not lora_cfg.enabled:
        return model
    return lora.add_lora(model, lora_cfg)


@register("method", "lm")
class CausalLM(TrainableMethod):
    Settings = LmMethod  # its config schema (ctxbench/config/schemas/method.py)
    whole_history_baseline = True  # as a system: the whole history in the prompt (health.warnings: expected)

    def __init__(self, cfg: Any, bundle: Any):
        super().__init__(cfg, bundle)
        for p in bundle.model.parameters():
            p.requires_grad_(False)
        self.model = add_lora(bundle.model, cfg.lora)
        lean_mlp(bundle.model)
        if not (cfg.lora and cfg.lora.enabled):
            for p in self.model.parameters():  # full fine-tuning
                p.requires_grad_(True)
        fp32_trainables(self)  # LoRA (peft keeps it fp32), or every weight for full fine-tuning: fp32 master weights
        self._tuned_in_place = False  # full fine-tuning weights loaded: no base model left for plain_lm
        self._history: str = ""
        self._speakers: list[str] = []

    # -- training ------------------------------------------------------------------------
    def train_examples(self, samples: list[Sample]) -> list[list[int]]:
        seq = int(self.cfg.seq_len)
        out: list[list[int]] = []
        for s in samples:
            ids = self.tokenizer(s.history.render(), add_special_tokens=False)["input_ids"]
            out.extend(chunk_tokens(ids, seq))
        return out

    def collate(self, examples: list[list[int]]) -> dict[str, torch.Tensor]:
        return pad_batch(examples, self.tokenizer.pad_token_id, labels=examples)

    def forward(self, batch: dict[str, torch.Tensor]) -> MethodOutput:
        """Token-mean next-token loss: the body's hidden states at the labelled positions go through the
        LM head and cross-entropy in chunks (:func:`token_loss`); no full-vocabulary logits are kept.
        A model whose logits are more than its head's output (soft-capped, scaled) takes the model's own loss."""
        labels = batch["labels"]
        target = labels[:, 1:]
        sel = target != -100
        n = int(sel.sum())
        base = self.model.get_base_model() if hasattr(self.model, "get_base_model") else self.model
        body = getattr(base, getattr(base, "base_model_prefix", ""), None)
        conf = base.config
        if body is None or getattr(conf, "final_logit_softcapping", None) or getattr(conf, "logit_scale", None):
            out = self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=labels)
            return MethodOutput(loss=out.loss, n_tokens=n)
        hidden = body(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                      use_cache=False).last_hidden_state
        loss, _ = token_loss(hidden[:, :-1][sel], base.get_output_embeddings(), target[sel])
        return MethodOutput(loss=loss, n_tokens=n)

    def load_trainable(self, state: dict[str, torch.Tensor]) -> None:
        super().load_trainable(state)
        self._tuned_in_place = not hasattr(self.model, "disable_adapter")

    def window(self) -> int:
        """Tokens the model reads at once: ``max_context``, or the model's ``max_position_embeddings``."""
        return int(self.cfg.max_context or getattr(self.bundle.model.config, "max_position_embeddings", 2048))

    # -- the eval-task protocol (core/task_protocol.py) ---------------------------------------------
    @torch.no_grad()
    def score_continuation(self, context: Sequence[Sequence[int]], target: Sequence[int],
                           prompt: Sequence[int] = ()) -> Scored:
        """Summed NLL of ``target`` after the context chunks (concatenated, as text) and ``prompt``, in
        one forward; the context is cut from its oldest tokens to fit :meth:`window`. Every target
        token is scored (the first from the last context or prompt token)."""
        flat = [int(t) for chunk in context for t in chunk]
        prompt, target = [int(t) for t in prompt], [int(t) for t in target]
        if not target:
            raise ValueError("score_continuation: the target is empty (nothing to score)")
        room = self.window() - len(prompt) - len(target)
        if room < 0:
            raise ConfigError(f"method=lm: prompt + target ({len(prompt) + len(target)} tokens) exceed the "
                              f"window of {self.window()} tokens (method.max_context)")
        kept = flat[len(flat) - min(len(flat), room):]
        if not kept and not prompt:
            raise ValueError("score_continuation: no context and no prompt, so nothing precedes the first target token")
        ids = torch.tensor([kept + prompt + target], device=self.device)
        self.model.eval()
        logits = self.model(input_ids=ids).logits[0, -len(target) - 1: -1]
        nll = float(F.cross_entropy(logits.float(), ids[0, -len(target):], reduction="sum"))
        return Scored(nll=nll, tokens=len(target), context_tokens=len(flat), memory_slots=len(kept),
                      kv_bytes=len(kept) * kv_bytes_per_token(self.bundle.model))

    @contextlib.contextmanager
    def plain_lm(self) -> Iterator[Any]:
        """The base causal LM: this model with its LoRA adapter off."""
        if hasattr(self.model, "disable_adapter"):
            with self.model.disable_adapter():
                yield self.model
        elif self._tuned_in_place:
            raise ConfigError("method=lm with lora.enabled=false loaded fully fine-tuned weights: no base model is "
                              "left for plain_lm (use LoRA, or the untrained model)")
        else:
            yield self.model

    # -- as a system (full context) ------------------------------------------------------
    def ingest(self, history: History) -> None:
        from ctxbench.core.render import render_history

        self._history = render_history(history, "locomo")
        self._speakers = list(history.speakers)

    @torch.no_grad()
    def answer(self, question: Question) -> Prediction:
        from ctxbench.llm.chat_template import chat_text
        from ctxbench.qa import prompt_text

        t0 = time.perf_counter()
        tok = self.tokenizer
        qa = self.answer_prompt
        window = self.window()
        max_new = self.answer_max_tokens(question)
        hist_ids = tok(self._history, add_special_tokens=False)["input_ids"]
        frame = prompt_text(qa.messages(question, "x", self._speakers))
        budget = window - max_new - len(tok(frame, add_special_tokens=False)["input_ids"]) - 16
        cut = max(0, len(hist_ids) - max(budget, 0))
        context = tok.decode(hist_ids[cut:])
        prompt = chat_text(tok, qa.messages(question, context, self._speakers))  # continues a reply prefix
        ids = tok(prompt, return_tensors="pt", add_special_tokens=False)["input_ids"].to(self.device)
        self.model.eval()
        gen = self.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new,
                                  do_sample=False, pad_token_id=tok.pad_token_id)
        new = gen[0, ids.shape[1]:]
        text = tok.decode(new, skip_special_tokens=True).strip()
        usage = Usage(answer_prompt_tokens=ids.shape[1], answer_completion_tokens=int(new.shape[0]), answer_calls=1,
                      held_text=len(hist_ids) - cut, memory_tokens=len(hist_ids),
                      answer_seconds=time.perf_counter() - t0, extra={"truncated_tokens": cut})
        return Prediction(text=text, usage=usage)
