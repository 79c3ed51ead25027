"""Run folders: the guard that owns a run folder, and its results files."""
