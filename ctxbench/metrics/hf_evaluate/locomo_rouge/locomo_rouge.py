"""``evaluate`` module locomo_rouge: ROUGE-1/2/L F-measure (rouge_score, Porter stemmer) against the gold answer (adversarial: the 'not mentioned' option).

A thin wrapper: the scoring is ctxbench's own (ctxbench.metrics.hf_evaluate.compute), so the numbers
equal ``python -m ctxbench score``. Load it offline with ``evaluate.load(<this folder>)``.
"""
import evaluate

from ctxbench.metrics.hf_evaluate import compute, module_info

_DESCRIPTION = "ROUGE-1/2/L F-measure (rouge_score, Porter stemmer) against the gold answer (adversarial: the 'not mentioned' option)."


class LocomoRouge(evaluate.Metric):
    def _info(self):
        return module_info('locomo_rouge', _DESCRIPTION)

    def _compute(self, predictions, references, categories=None):
        return compute('locomo_rouge', predictions, references, categories)
