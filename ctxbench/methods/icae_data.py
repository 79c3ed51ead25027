"""ICAE data side: segmenting, pretraining/fine-tuning examples, decoder layouts, batches, BLEU.

Everything here works on token-id lists; the model side (encoder/decoder) is in ``icae.py``.
A decoder sequence is written with negative *codes* where the model puts learned vectors:
``SLOT`` for a memory slot (filled with the encoder's outputs, in order) and ``AE``/``LM``/``FT``
for the special embeddings. Layouts follow the reference code (getao/icae, icae_v2):

- AE:  [bos?] [slots] [AE] context eos          (loss on context + eos)
- LM:  [bos?] [slots] [LM?] continuation         (loss after the first ``leave_tokens_for_lm``)
- FT:  chat-left [slots] [FT] prompt chat-right answer eos   (loss on answer + eos)
"""
from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

SLOT, AE, LM, FT = -1, -2, -3, -4
SPECIAL_ROW = {AE: 0, LM: 1, FT: 2}  # row offset after the mem_size memory-token rows
KIND = {"ae": 0, "lm": 1, "ft": 2}


def segment(ids: list[int], seg_len: int) -> list[list[int]]:
    """Split into ``ceil(n / seg_len)`` near-equal segments (the reference's multi-span split)."""
    if not ids:
        return []
    n_seg = math.ceil(len(ids) / seg_len)
    size = math.ceil(len(ids) / n_seg)
    return [ids[i : i + size] for i in range(0, len(ids), size)]


@dataclass
class Example:
    """One training example: a context to compress and what the decoder must produce from it."""

    context: list[int]
    continuation: list[int] = field(default_factory=list)  # pretraining (LM objective)
    prompt: list[int] = field(default_factory=list)  # fine-tuning
    answer: list[int] = field(default_factory=list)


class Layout:
    """Builds decoder code sequences for one tokenizer and one ICAE config."""

    def __init__(self, tokenizer: Any, cfg: Any):
        self.tok = tokenizer
        self.mem_size = int(cfg.mem_size)
        self.seg_len = self.mem_size * int(cfg.compression_rate)
        self.use_lm_token = cfg.use_lm_token
        self.leave_lm = cfg.leave_tokens_for_lm
        add_bos = cfg.add_bos
        if add_bos == "auto":  # follow the tokenizer: Llama-2/Mistral add <s>, SmolLM2 does not
            probe = tokenizer("a")["input_ids"]
            add_bos = bool(probe) and tokenizer.bos_token_id is not None and probe[0] == tokenizer.bos_token_id
        self.bos = [tokenizer.bos_token_id] if add_bos else []
        self.segment_layout = cfg.segment_layout
        if self.segment_layout not in ("ctxbench", "reference"):
            raise ValueError(f"method.segment_layout={self.segment_layout!r}: use ctxbench or reference")
        # reference: the start token once, before the first segment (the text is tokenized whole, then split),
        # and none in front of a decoder row; ctxbench: before every segment and every decoder row
        self.row_bos = list(self.bos) if self.segment_layout == "ctxbench" else []
        self.eos = tokenizer.eos_token_id
        self.chat_left, self.chat_right = self._chat_frame(cfg.chat_template)

    def _chat_frame(self, use_template: bool) -> tuple[list[int], list[int]]:
        """Token ids before and after the user content of a chat turn (slots+[FT]+prompt go inside)."""
        mark = "\u2063ICAE\u2063"
        if use_template and getattr(self.tok, "chat_template", None):
            text = self.tok.apply_chat_template([{"role": "user", "content": mark}], tokenize=False,
                                                add_generation_prompt=True)
            left, right = text.split(mark)
            enc = lambda s: self.tok(s, add_special_tokens=False)["input_ids"]  # noqa: E731
            return self.bos * (not left.startswith(self.tok.bos_token or "\0")) + enc(left), enc(right)
        return list(self.bos), self.tok("\n", add_special_tokens=False)["input_ids"]

    def encode(self, text: str) -> list[int]:
        return self.tok(text, add_special_tokens=False)["input_ids"]

    def frame_segments(self, segs: list[list[int]]) -> list[list[int]]:
        """Segments as the encoder reads them: with the start token per segment (ctxbench) or only
        before the first (reference)."""
        return [(self.bos if self.segment_layout == "ctxbench" or i == 0 else []) + s for i, s in enumerate(segs)]

    def segments(self, ids: list[int]) -> list[list[int]]:
        return self.frame_segments(segment(ids, self.seg_len))

    def n_slots(self, ids: list[int]) -> int:
        return len(segment(ids, self.seg_len)) * self.mem_size

    # -- decoder sequences: (codes, labels) ---------------------------------------------------
    def ae(self, ctx: list[int]) -> tuple[list[int], list[int]]:
        head = self.row_bos + [SLOT] * self.n_slots(ctx) + [AE]
        tail = ctx + [self.eos]
        return head + tail, [-100] * len(head) + tail

    def lm(self, ctx: list[int], cont: list[int]) -> tuple[list[int], list[int]]:
        head = self.row_bos + [SLOT] * self.n_slots(ctx) + ([LM] if self.use_lm_token else [])
        leave = min(self.leave_lm, max(len(cont) - 1, 0))
        return head + cont, [-100] * (len(head) + leave) + cont[leave:]

    def ft_prompt(self, n_slots: int, prompt: list[int]) -> list[int]:
        return self.chat_left + [SLOT] * n_slots + [FT] + prompt + self.chat_right

    def ft(self, ctx: list[int], prompt: list[int], answer: list[int]) -> tuple[list[int], list[int]]:
        head = self.ft_prompt(self.n_slots(ctx), prompt)
        tail = answer + [self.eos]
        return head + tail, [-100] * len(head) + tail


# -- the objective draws (``objective_sampling``) ---------------------------------------------------
def objective_rng(seed: int, rank: int = 0) -> random.Random:
    """The training draws of the AE/LM objective on DDP rank ``rank``: one stream per (seed, rank),
    so the ranks do not draw the same objectives for their different examples."""
    return random.Random(f"icae-objective/{int(seed)}/rank{int(rank)}")


def eval_rng(seed: int, examples: list[Example]) -> random.Random:
    """The draws of one held-out batch: a function of the seed and the batch's tokens only, so an
    evaluation takes nothing from the training draws and draws the same every time it runs."""
    key = json.dumps([[e.context, e.continuation, e.prompt, e.answer] for e in examples])
    return random.Random(f"icae-eval/{int(seed)}/{key}")


def rng_to_json(rng: random.Random) -> list[Any]:
    """A ``random.Random``'s state as JSON (the checkpoint's state.json holds it)."""
    version, internal, gauss = rng.getstate()
    return [version, list(internal), gauss]


def rng_from_json(state: Any) -> random.Random:
    """The ``random.Random`` of :func:`rng_to_json`'s state (TypeError / ValueError when it is not one)."""
    version, internal, gauss = state
    if not isinstance(internal, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in internal):
        raise ValueError("not a list of integers")
    rng = random.Random()
    rng.setstate((version, tuple(internal), gauss))
    return rng


def collate(examples: list[Example], layout: Layout, mode: str, pad_id: int, *,
            objective_sampling: bool = False, lm_ratio: float = 0.5, rng: random.Random | None = None,
            ) -> dict[str, torch.Tensor]:
    """Encoder segments of every example, and the decoder rows that read their slots.

    ``enc_ids``/``enc_len``/``enc_owner``: segments (right-padded; memory tokens go right after
    each segment's ``enc_len`` tokens); ``dec_*``: decoder codes, mask, labels, objective kind and
    the example whose slots each row reads.
    """
    rng = rng or random.Random(0)
    segs, owners, rows, kinds, dec_owner = [], [], [], [], []
    for i, ex in enumerate(examples):
        for s in layout.segments(ex.context):
            segs.append(s)
            owners.append(i)
        if mode == "finetune":
            todo = [("ft", layout.ft(ex.context, ex.prompt, ex.answer))]
        else:
            has_lm = len(ex.continuation) > layout.leave_lm
            todo = [("ae", layout.ae(ex.context))]
            if has_lm:
                todo.append(("lm", layout.lm(ex.context, ex.continuation)))
            if objective_sampling:  # the reference: one objective per example, LM with prob lm_ratio
                todo = [todo[-1]] if has_lm and rng.random() < lm_ratio else [todo[0]]
        for kind, row in todo:
            rows.append(row)
            kinds.append(KIND[kind])
            dec_owner.append(i)
    enc_len = [len(s) for s in segs]
    enc_ids = torch.full((len(segs), max(enc_len)), pad_id, dtype=torch.long)
    for j, s in enumerate(segs):
        enc_ids[j, : len(s)] = torch.tensor(s, dtype=torch.long)
    width = max(len(c) for c, _ in rows)
    dec_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    dec_mask = torch.zeros((len(rows), width), dtype=torch.long)
    dec_labels = torch.full((len(rows), width), -100, dtype=torch.long)
    for j, (codes, labels) in enumerate(rows):
        dec_ids[j, : len(codes)] = torch.tensor(codes, dtype=torch.long)
        dec_mask[j, : len(codes)] = 1
        dec_labels[j, : len(labels)] = torch.tensor(labels, dtype=torch.long)
    return {"enc_ids": enc_ids, "enc_len": torch.tensor(enc_len), "enc_owner": torch.tensor(owners),
            "dec_ids": dec_ids, "dec_mask": dec_mask, "dec_labels": dec_labels,
            "dec_kind": torch.tensor(kinds), "dec_owner": torch.tensor(dec_owner)}


# -- examples from samples ----------------------------------------------------------------------
def pretrain_examples(texts: list[str], layout: Layout, context_tokens: int, lm_tokens: int,
                      max_examples: int | None = None) -> list[Example]:
    """Non-overlapping windows of (context_tokens + lm_tokens) tokens: (context, continuation)."""
    out: list[Example] = []
    win = context_tokens + lm_tokens
    for text in texts:
        ids = layout.encode(text)
        for i in range(0, len(ids), win):
            ctx, cont = ids[i : i + context_tokens], ids[i + context_tokens : i + win]
            if len(ctx) < max(8, context_tokens // 4):
                continue
            out.append(Example(context=ctx, continuation=cont))
            if max_examples and len(out) >= max_examples:
                return out
    return out


def finetune_examples(samples: list[Any], layout: Layout, max_context: int, max_prompt: int,
                      max_answer: int, max_examples: int | None = None,
                      prompt_of: Callable[[Any], str] | None = None) -> list[Example]:
    """(context, prompt, answer) per question: PwC rows (History.text) or rendered conversations."""
    out: list[Example] = []
    for s in samples:
        if not s.questions:
            continue
        ctx = layout.encode(s.history.render())
        ctx = ctx[-max_context:] if max_context else ctx  # keep the most recent tokens, as ingest does
        for q in s.questions:
            ans = q.answer if q.answer not in (None, "") else (q.adversarial_answer or "")
            out.append(Example(context=ctx, prompt=layout.encode(prompt_of(q) if prompt_of else q.question)[:max_prompt],
                               answer=layout.encode(str(ans))[:max_answer]))
            if max_examples and len(out) >= max_examples:
                return out
    return out


# -- reconstruction BLEU ------------------------------------------------------------------------


def reconstruction_bleu(reference: str, hypothesis: str) -> float:
    """Sentence BLEU-4 over lowercased word/punctuation tokens: the one definition, ctxbench/metrics/reconstruction.py."""
    from ctxbench.metrics.reconstruction import bleu4

    return bleu4(reference, hypothesis)
