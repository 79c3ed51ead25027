from ctxbench.metrics.hf_evaluate import evaluate_module_path  # noqa: F401 - evaluate.load(evaluate_module_path("locomo_f1"))
