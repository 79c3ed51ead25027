"""Prompt modules, one per memory system, each with a ``VERSION`` string recorded in results."""
