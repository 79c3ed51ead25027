"""The evaluation pipeline: ``eval`` and ``score`` (entry points in :mod:`ctxbench.evaluation.evaluator`).

systems (what is evaluated, one per history) → run (plan, resume, answer on pool's workers, cost per
answer, sample_log) → finalize (scored result files); shard splits histories across processes;
tasks/ holds ``task=perplexity|reconstruction|choice``.
"""
