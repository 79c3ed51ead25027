"""``method=lm``: plain causal-LM fine-tuning with LoRA — the full-context baseline.

Training: windows of ``seq_len`` tokens from text documents (or rendered conversations), next-token
loss. The trained weights (LoRA, or all of them with ``lora.enabled: false``) are float32 under any
base dtype; the loop's autocast runs the compute in bf16. As a system it answers with the whole history in the prompt (truncated from the oldest
tokens to fit the model's window), so a trained ``lm`` is compared on the same questions.
"""
from __future__ import annotations

import time
from typing import Any

import torch

from ..registry import register
from ..types import History, Prediction, Question, Sample, Usage
from . import lora
from .base import MethodOutput, TrainableMethod, chunk_tokens, fp32_trainables, pad_batch


def add_lora(model: Any, lora_cfg: Any) -> Any:
    """Wrap a model with a peft LoRA adapter (base weights frozen); no-op when disabled."""
    if not lora_cfg or not lora_cfg.get("enabled", True):
        return model
    return lora.add_lora(model, lora_cfg)


@register("method", "lm")
class CausalLM(TrainableMethod):
    def __init__(self, cfg: Any, bundle: Any):
        super().__init__(cfg, bundle)
        for p in bundle.model.parameters():
            p.requires_grad_(False)
        self.model = add_lora(bundle.model, cfg.get("lora"))
        if not (cfg.get("lora") and cfg.lora.get("enabled", True)):
            for p in self.model.parameters():  # full fine-tuning
                p.requires_grad_(True)
        fp32_trainables(self)  # LoRA (peft keeps it fp32), or every weight for full fine-tuning: fp32 master weights
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
        out = self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"])
        n = int((batch["labels"][:, 1:] != -100).sum())
        return MethodOutput(loss=out.loss, n_tokens=n)

    # -- as a system (full context) ------------------------------------------------------
    def ingest(self, history: History) -> None:
        from ..render import render_history

        self._history = render_history(history, "locomo")
        self._speakers = list(history.speakers)

    @torch.no_grad()
    def answer(self, question: Question) -> Prediction:
        from ..qa import prompt_text

        t0 = time.perf_counter()
        tok = self.tokenizer
        qa = self.answer_prompt
        window = int(self.cfg.get("max_context") or getattr(self.bundle.model.config, "max_position_embeddings", 2048))
        max_new = self.answer_max_tokens()
        hist_ids = tok(self._history, add_special_tokens=False)["input_ids"]
        frame = prompt_text(qa.messages(question, "x", self._speakers))
        budget = window - max_new - len(tok(frame, add_special_tokens=False)["input_ids"]) - 16
        cut = max(0, len(hist_ids) - max(budget, 0))
        context = tok.decode(hist_ids[cut:])
        prompt = tok.apply_chat_template(qa.messages(question, context, self._speakers),
                                         tokenize=False, add_generation_prompt=True)
        ids = tok(prompt, return_tensors="pt", add_special_tokens=False)["input_ids"].to(self.device)
        self.model.eval()
        gen = self.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new,
                                  do_sample=False, pad_token_id=tok.pad_token_id)
        new = gen[0, ids.shape[1]:]
        text = tok.decode(new, skip_special_tokens=True).strip()
        usage = Usage(answer_prompt_tokens=ids.shape[1], answer_completion_tokens=int(new.shape[0]), answer_calls=1,
                      context_tokens=len(hist_ids) - cut, memory_tokens=len(hist_ids),
                      answer_seconds=time.perf_counter() - t0, extra={"truncated_tokens": cut})
        return Prediction(text=text, usage=usage)
