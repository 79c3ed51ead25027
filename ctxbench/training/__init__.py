"""The training pipeline: the loop, the checkpoint protocol, sharded state, messages."""
