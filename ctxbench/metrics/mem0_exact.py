"""mem0's per-question scores exactly: ``bleu1_mem0`` and ``f1_mem0`` (mem0ai/mem0 ``evaluation/evals.py``).

mem0's ``evals.py`` scores each answer with ``metrics/utils.py``: ``bleu_score`` is
``calculate_bleu_scores(response, answer)["bleu1"]`` — nltk ``sentence_bleu`` with weights (1,0,0,0)
and ``SmoothingFunction().method1`` on ``nltk.word_tokenize(text.lower())`` of the unstripped texts —
and ``f1_score`` is ``calculate_metrics(response, answer)["f1"]``: 0 when either text is empty, else
the *set* F1 of ``simple_tokenize`` (lowercase; '.', ',', '!', '?' → space; whitespace split) of the
stripped texts. Category 5 is skipped (score ``None`` here). A-Mem's ``utils.py`` is the same code.

``nltk.word_tokenize`` first splits sentences with Punkt, whose English parameters nltk downloads at
run time (``nltk.download("punkt")``). They ship here instead (``punkt_english/``, nltk_data's
``tokenizers/punkt_tab/english``, Apache-2.0: see NOTICE), loaded into nltk's own
``PunktSentenceTokenizer``, then each sentence goes through nltk's ``NLTKWordTokenizer`` as
``word_tokenize`` does: the same tokens with no download.

The tokenizer rules are pinned to nltk 3.9.1 (the release mem0's published per-question scores were
computed with), whatever nltk is installed: later releases split a leading quote off a word
(``'the`` → ``'`` ``the``), split figure/en/em dashes, and let curly quotes end a Punkt sentence,
which changes 5 of the 1,540 stored ``bleu_score`` values of a real mem0 artifact. ``bleu1`` (:mod:`.qa`)
splits sentences on ``[.!?]`` + space and uses the installed tokenizer, so it differs from mem0's
stored values on such answers (``'The Lean Startup'`` against ``The Lean Startup``: ``bleu1`` 0.6,
mem0 0.5).
"""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from ctxbench.core.registry import register
from ctxbench.core.types import Question
from ctxbench.metrics.base import answer_text, category_name
from ctxbench.metrics.qa import set_f1

PUNKT_DIR = Path(__file__).parent / "punkt_english"


def _lines(name: str) -> list[str]:
    """A punkt_tab file's lines as nltk's ``PunktDecoder`` reads them (only the newline removed)."""
    text = (PUNKT_DIR / name).read_text(encoding="utf-8")
    return text.split("\n") if text else []


# nltk 3.9.1's rules where later releases differ (nltk/tokenize/punkt.py PunktLanguageVars,
# nltk/tokenize/destructive.py NLTKWordTokenizer; Apache-2.0)
BOUNDARY_REALIGNMENT_391 = re.compile(r'["\')\]}]+?(?:\s+|(?=--)|$)', re.MULTILINE)
NON_WORD_CHARS_391 = r"(?:[)\";}\]\*:@\'\({\[%s])"
STARTING_QUOTES_391 = [
    (re.compile("([«“‘„]|[`]+)", re.U), r" \1 "),
    (re.compile(r"^\""), r"``"),
    (re.compile(r"(``)"), r" \1 "),
    (re.compile(r"([ \(\[{<])(\"|\'{2})"), r"\1 `` "),
    (re.compile(r"(?i)(\')(?!re|ve|ll|m|t|s|d|n)(\w)\b", re.U), r"\1 \2"),
]
PUNCTUATION_391 = [
    (re.compile(r'([^\.])(\.)([\]\)}>"\'' "»”’ " r"]*)\s*$", re.U), r"\1 \2 \3 "),
    (re.compile(r"([:,])([^\d])"), r" \1 \2"),
    (re.compile(r"([:,])$"), r" \1 "),
    (re.compile(r"\.{2,}", re.U), r" \g<0> "),
    (re.compile(r"[;@#$%&]"), r" \g<0> "),
    (re.compile(r'([^\.])(\.)([\]\)}>"\']*)\s*$'), r"\1 \2\3 "),
    (re.compile(r"[?!]"), r" \g<0> "),
    (re.compile(r"([^'])' "), r"\1 ' "),
    (re.compile(r"[*]", re.U), r" \g<0> "),
]


def _lang_vars():
    from nltk.tokenize.punkt import PunktLanguageVars

    class LanguageVars391(PunktLanguageVars):
        re_boundary_realignment = BOUNDARY_REALIGNMENT_391

        @property
        def _re_non_word_chars(self) -> str:
            return NON_WORD_CHARS_391 % re.escape("".join(set(self.sent_end_chars) - {"."}))

    return LanguageVars391()


@lru_cache(maxsize=1)
def punkt_english():
    """nltk's Punkt sentence splitter with the shipped English parameters (nltk 3.9.1's rules)."""
    from collections import defaultdict

    from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer

    params = PunktParameters()
    params.abbrev_types = set(_lines("abbrev_types.txt"))
    params.sent_starters = set(_lines("sent_starters.txt"))
    params.collocations = {tuple(line.split("\t")) for line in _lines("collocations.tab")}
    params.ortho_context = defaultdict(int, {k: int(v) for k, v in
                                             (line.split("\t") for line in _lines("ortho_context.tab"))})
    tok = PunktSentenceTokenizer(lang_vars=_lang_vars())
    tok._params = params  # what nltk's PunktTokenizer.load_lang sets from the same files
    return tok


@lru_cache(maxsize=1)
def _treebank():
    from nltk.tokenize import NLTKWordTokenizer

    class WordTokenizer391(NLTKWordTokenizer):
        STARTING_QUOTES = STARTING_QUOTES_391
        PUNCTUATION = PUNCTUATION_391

    return WordTokenizer391()


def word_tokenize(text: str) -> list[str]:
    """``nltk.word_tokenize(text)`` (English, preserve_line=False) without nltk data."""
    tok = _treebank()
    return [t for sent in punkt_english().tokenize(text) for t in tok.tokenize(sent)]


def mem0_bleu1(prediction: str, reference: str) -> float:
    """mem0's ``calculate_bleu_scores(prediction, reference)["bleu1"]``."""
    from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

    pred, ref = word_tokenize(prediction.lower()), word_tokenize(reference.lower())
    try:
        return float(sentence_bleu([ref], pred, weights=(1, 0, 0, 0),
                                   smoothing_function=SmoothingFunction().method1))
    except Exception:  # mem0's code scores any nltk error as 0.0  # noqa: BLE001
        return 0.0


def mem0_f1(prediction: str, reference: str) -> float:
    """mem0's ``calculate_metrics(prediction, reference)["f1"]``."""
    if not prediction or not reference:
        return 0.0
    return set_f1(str(prediction).strip(), str(reference).strip())


@register("metric", "bleu1_mem0")
class Mem0Bleu1:
    name = "bleu1_mem0"
    version = "mem0-evals-bleu1-1"
    reference = ("mem0ai/mem0 evaluation/evals.py bleu_score = metrics/utils.py calculate_bleu_scores bleu1 "
                 "(nltk.word_tokenize with Punkt English, sentence_bleu method1); category 5 not scored")

    def score(self, prediction: str, question: Question) -> float | None:
        if category_name(question) == "adversarial":
            return None
        return mem0_bleu1(str(prediction), answer_text(question.answer))


@register("metric", "f1_mem0")
class Mem0F1:
    name = "f1_mem0"
    version = "mem0-evals-f1-1"
    reference = ("mem0ai/mem0 evaluation/evals.py f1_score = metrics/utils.py calculate_metrics f1 "
                 "(set F1 of simple_tokenize); category 5 not scored")

    def score(self, prediction: str, question: Question) -> float | None:
        if category_name(question) == "adversarial":
            return None
        return mem0_f1(str(prediction), answer_text(question.answer))
