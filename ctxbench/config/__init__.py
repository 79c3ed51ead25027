"""Configuration: one schema per key (setting.py, schemas/), the compose-time check (schema.py, bounds.py),
sweeps, the CLI's hints, and docs/config.md (docs.py)."""
