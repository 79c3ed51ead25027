"""Answer-overlap metrics: LoCoMo's official F1, the set F1 of Mem0/A-Mem, BLEU-1, ROUGE-1/2/L.

Each class says which reference code it matches. Definitions:

- ``f1``: snap-research/locomo ``task_eval/evaluation.py`` (``normalize_answer``, ``f1_score``,
  ``f1``, ``eval_question_answering``): drop commas, lowercase, drop punctuation, drop
  a/an/the/and, Porter-stem, multiset-overlap F1. multi-hop (1): split prediction and gold on
  commas, mean over gold parts of the best-matching prediction part. open-domain (3): gold cut at
  the first ';'. adversarial (5): 1 if the prediction contains "no information available" or
  "not mentioned" (case-insensitive), else 0. Any other category: plain ``f1_score``.
- ``f1_set``: mem0 ``evaluation/metrics/utils.py`` (borrowed from A-Mem's ``utils.py``):
  lowercase, '.', ',', '!', '?' → space, whitespace split, *set* overlap F1; 0 when either is empty.
- ``bleu1``: nltk ``sentence_bleu`` with weights (1,0,0,0) and ``SmoothingFunction().method1`` on
  lowercased word tokens (Mem0/A-Mem use ``nltk.word_tokenize``, which needs punkt data; here
  sentences are split on [.!?]+space and tokenised with nltk's data-free ``NLTKWordTokenizer``, the
  tokenizer ``word_tokenize`` applies after its punkt sentence split).
- ``rouge1``/``rouge2``/``rougeL``: ``rouge_score`` F-measure with the Porter stemmer.

Category 5 (adversarial) against which reference: ``f1`` follows LoCoMo (the "not mentioned" phrase
rule); ``f1_set``, ``bleu1`` and ``rouge*`` compare with the correct option "Not mentioned in the
conversation" (:func:`.base.reference_answer`). A-Mem's evaluation code scores category 5 against the
question's ``adversarial_answer`` instead (WujiangXu/A-mem ``load_dataset.py`` ``QA.final_answer``
returns ``adversarial_answer`` for category 5; ``test_advanced.py`` passes it to ``utils.py``
``calculate_metrics``, all metrics 0 when it is empty): ``f1_adv_answer`` and ``bleu1_adv_answer``
are ``f1_set`` and ``bleu1`` with that reference, identical to them on every other category. Which
table uses which: A-Mem's Table 1 (F1, BLEU-1, all five categories) = ``f1_adv_answer`` /
``bleu1_adv_answer``; Mem0's Table 1 (categories 1-4 only, category 5 excluded by its evaluation) =
``f1_set`` / ``bleu1`` (the same numbers there); LoCoMo's own tables = ``f1``.
"""
from __future__ import annotations

import re
import string
from collections import Counter
from functools import lru_cache

from ctxbench.core.registry import register
from ctxbench.core.types import Question
from ctxbench.metrics.base import answer_text, category_name, reference_answer

_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the|and)\b")


@lru_cache(maxsize=1)
def _stemmer():
    from nltk.stem import PorterStemmer

    return PorterStemmer()


def normalize_answer(s: str) -> str:
    """LoCoMo's normalize_answer: commas out, lowercase, punctuation out, a/an/the/and out."""
    s = s.replace(",", "").lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def stemmed_tokens(s: str) -> list[str]:
    stem = _stemmer().stem
    return [stem(w) for w in normalize_answer(s).split()]


def f1_score(prediction: str, gold: str) -> float:
    """LoCoMo's f1_score: multiset overlap of normalised, stemmed tokens."""
    p, g = stemmed_tokens(prediction), stemmed_tokens(gold)
    same = sum((Counter(p) & Counter(g)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(g)
    return 2 * precision * recall / (precision + recall)


def f1_multi(prediction: str, gold: str) -> float:
    """LoCoMo's f1 for multi-hop: comma-split both; mean over gold parts of the best part F1."""
    preds = [p.strip() for p in prediction.split(",")]
    golds = [g.strip() for g in gold.split(",")]
    return sum(max(f1_score(p, g) for p in preds) for g in golds) / len(golds)


ADVERSARIAL_PHRASES = ("no information available", "not mentioned")


@register("metric", "f1")
class LoCoMoF1:
    name = "f1"
    version = "locomo-official-1"
    reference = "snap-research/locomo task_eval/evaluation.py eval_question_answering"

    def score(self, prediction: str, question: Question) -> float:
        cat = category_name(question)
        if cat == "adversarial":
            low = prediction.lower()
            return 1.0 if any(p in low for p in ADVERSARIAL_PHRASES) else 0.0
        gold = answer_text(question.answer)
        if cat == "open-domain":
            gold = gold.split(";")[0].strip()
        if cat == "multi-hop":
            return float(f1_multi(prediction, gold))
        return f1_score(prediction, gold)


def simple_tokenize(text: str) -> list[str]:
    """Mem0/A-Mem's simple_tokenize."""
    text = str(text).lower()
    for ch in ".,!?":
        text = text.replace(ch, " ")
    return text.split()


@register("metric", "f1_set")
class SetF1:
    name = "f1_set"
    version = "mem0-amem-set-1"
    reference = "mem0ai/mem0 evaluation/metrics/utils.py calculate_metrics (from A-Mem utils.py)"

    def score(self, prediction: str, question: Question) -> float:
        return set_f1(str(prediction).strip(), reference_answer(question).strip())


_SENT_SPLIT = re.compile(r"(?<=[.!?])\s+")


@lru_cache(maxsize=1)
def _word_tokenizer():
    from nltk.tokenize import NLTKWordTokenizer

    return NLTKWordTokenizer()


def word_tokens(text: str) -> list[str]:
    """Lowercased word tokens without nltk data (sentence split on [.!?] + whitespace)."""
    tok = _word_tokenizer()
    return [t for s in _SENT_SPLIT.split(text.lower()) if s for t in tok.tokenize(s)]


@register("metric", "bleu1")
class Bleu1:
    name = "bleu1"
    version = "nltk-bleu1-method1-1"
    reference = "mem0ai/mem0 evaluation/metrics/utils.py calculate_bleu_scores (bleu1)"

    def gold(self, question: Question) -> str:
        return reference_answer(question)

    def score(self, prediction: str, question: Question) -> float:
        from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

        pred, ref = word_tokens(str(prediction).strip()), word_tokens(self.gold(question).strip())
        if not pred or not ref:
            return 0.0
        return float(sentence_bleu([ref], pred, weights=(1, 0, 0, 0),
                                   smoothing_function=SmoothingFunction().method1))


@lru_cache(maxsize=1)
def _rouge():
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)


class _Rouge:
    kind = "rouge1"
    version = "rouge_score-stemmer-f-1"
    reference = "google-research rouge_score RougeScorer(use_stemmer=True) fmeasure"

    @property
    def name(self) -> str:
        return self.kind

    def score(self, prediction: str, question: Question) -> float:
        return float(_rouge().score(reference_answer(question), str(prediction))[self.kind].fmeasure)


@register("metric", "rouge1")
class Rouge1(_Rouge):
    kind = "rouge1"


@register("metric", "rouge2")
class Rouge2(_Rouge):
    kind = "rouge2"


@register("metric", "rougeL")
class RougeL(_Rouge):
    kind = "rougeL"


def amem_reference(question: Question) -> str:
    """The gold text A-Mem's evaluation compares with (``QA.final_answer``): category 5's
    ``adversarial_answer`` ('' when the item has none), the answer otherwise."""
    if category_name(question) == "adversarial":
        return answer_text(question.adversarial_answer)
    return answer_text(question.answer)


def set_f1(prediction: str, reference: str) -> float:
    """Mem0/A-Mem's set token F1 (0 when either side is empty or nothing is shared)."""
    p, r = set(simple_tokenize(prediction)), set(simple_tokenize(reference))
    common = len(p & r)
    if not p or not r or common == 0:
        return 0.0
    precision, recall = common / len(p), common / len(r)
    return 2 * precision * recall / (precision + recall)


@register("metric", "f1_adv_answer")
class AdvAnswerSetF1:
    """``f1_set`` with A-Mem's category-5 reference, ``adversarial_answer`` (A-Mem's Table 1 F1)."""

    name = "f1_adv_answer"
    version = "amem-set-adv-answer-1"
    reference = ("WujiangXu/A-mem utils.py calculate_metrics f1 against load_dataset.py QA.final_answer "
                 "(category 5: adversarial_answer)")

    def score(self, prediction: str, question: Question) -> float:
        pred, ref = str(prediction).strip(), amem_reference(question).strip()
        return set_f1(pred, ref) if pred and ref else 0.0


@register("metric", "bleu1_adv_answer")
class AdvAnswerBleu1(Bleu1):
    """``bleu1`` with A-Mem's category-5 reference, ``adversarial_answer`` (A-Mem's Table 1 BLEU-1)."""

    name = "bleu1_adv_answer"
    version = "nltk-bleu1-method1-adv-answer-1"
    reference = ("WujiangXu/A-mem utils.py calculate_bleu_scores bleu1 against load_dataset.py QA.final_answer "
                 "(category 5: adversarial_answer)")

    def gold(self, question: Question) -> str:
        return amem_reference(question)
