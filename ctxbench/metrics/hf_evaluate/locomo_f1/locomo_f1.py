"""``evaluate`` module locomo_f1: LoCoMo's official answer F1 (snap-research/locomo task_eval/evaluation.py): normalised, Porter-stemmed multiset token F1 with the per-category rules (multi-hop comma parts, open-domain ';' cut, adversarial 'not mentioned').

A thin wrapper: the scoring is ctxbench's own (ctxbench.metrics.hf_evaluate.compute), so the numbers
equal ``python -m ctxbench score``. Load it offline with ``evaluate.load(<this folder>)``.
"""
import evaluate

from ctxbench.metrics.hf_evaluate import compute, module_info

_DESCRIPTION = "LoCoMo's official answer F1 (snap-research/locomo task_eval/evaluation.py): normalised, Porter-stemmed multiset token F1 with the per-category rules (multi-hop comma parts, open-domain ';' cut, adversarial 'not mentioned')."


class LocomoF1(evaluate.Metric):
    def _info(self):
        return module_info('locomo_f1', _DESCRIPTION)

    def _compute(self, predictions, references, categories=None):
        return compute('locomo_f1', predictions, references, categories)
