"""The training pipeline: the loop (TrainRecipe), the checkpoint protocol, the accelerator, data order, optimizer, metrics log, run folder, messages."""
