"""Configuration: the typed schema, bounds, sweeps and the CLI's hints."""
