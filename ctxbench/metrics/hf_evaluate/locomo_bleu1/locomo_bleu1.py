"""``evaluate`` module locomo_bleu1: BLEU-1 as Mem0 / A-Mem compute it (nltk sentence_bleu, weights (1,0,0,0), SmoothingFunction().method1) on lowercased word tokens.

A thin wrapper: the scoring is ctxbench's own (ctxbench.metrics.hf_evaluate.compute), so the numbers
equal ``python -m ctxbench score``. Load it offline with ``evaluate.load(<this folder>)``.
"""
import evaluate

from ctxbench.metrics.hf_evaluate import compute, module_info

_DESCRIPTION = 'BLEU-1 as Mem0 / A-Mem compute it (nltk sentence_bleu, weights (1,0,0,0), SmoothingFunction().method1) on lowercased word tokens.'


class LocomoBleu1(evaluate.Metric):
    def _info(self):
        return module_info('locomo_bleu1', _DESCRIPTION)

    def _compute(self, predictions, references, categories=None):
        return compute('locomo_bleu1', predictions, references, categories)
