"""The training pipeline: the loop (TrainRecipe), the checkpoint protocol, the accelerator, the data
order, the optimizer, the metrics log, run-folder checks, the closing message."""
