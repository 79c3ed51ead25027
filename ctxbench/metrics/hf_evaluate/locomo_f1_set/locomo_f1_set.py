"""``evaluate`` module locomo_f1_set: The set token F1 of Mem0 / A-Mem (mem0 evaluation/metrics/utils.py); adversarial questions (category 5) are compared with 'Not mentioned in the conversation'.

A thin wrapper: the scoring is ctxbench's own (ctxbench.metrics.hf_evaluate.compute), so the numbers
equal ``python -m ctxbench score``. Load it offline with ``evaluate.load(<this folder>)``.
"""
import evaluate

from ctxbench.metrics.hf_evaluate import compute, module_info

_DESCRIPTION = "The set token F1 of Mem0 / A-Mem (mem0 evaluation/metrics/utils.py); adversarial questions (category 5) are compared with 'Not mentioned in the conversation'."


class LocomoSetF1(evaluate.Metric):
    def _info(self):
        return module_info('locomo_f1_set', _DESCRIPTION)

    def _compute(self, predictions, references, categories=None):
        return compute('locomo_f1_set', predictions, references, categories)
