"""The evaluation pipeline: the evaluator, its worker pool, system building, the sample log, tasks."""
