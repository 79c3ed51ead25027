"""Reconstruction metrics (ICAE's autoencoding): how much of a context comes back from its memory.

- ``bleu4``: sentence BLEU-4 (nltk ``sentence_bleu``, uniform weights, ``SmoothingFunction().method1``)
  over lowercased word / punctuation tokens (no tokenizer data needed), as ICAE reports BLEU.
- ``exact_match``: 1 when the decoded token ids equal the context's ids.
- ``token_accuracy``: share of the context's positions where the decoded id is the context's id.
"""
from __future__ import annotations

import re
from typing import Sequence

_WORD = re.compile(r"\w+|[^\w\s]")
VERSION = "1"


def bleu4(reference: str, hypothesis: str) -> float:
    from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

    ref, hyp = _WORD.findall(reference.lower()), _WORD.findall(hypothesis.lower())
    if not ref or not hyp:
        return 0.0
    return float(sentence_bleu([ref], hyp, smoothing_function=SmoothingFunction().method1))


def exact_match(reference: Sequence[int], hypothesis: Sequence[int]) -> float:
    return float(list(reference) == list(hypothesis))


def token_accuracy(reference: Sequence[int], hypothesis: Sequence[int]) -> float:
    if not reference:
        return 0.0
    return sum(int(a == b) for a, b in zip(reference, hypothesis)) / len(reference)
