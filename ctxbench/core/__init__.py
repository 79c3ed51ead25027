"""Contracts every other part builds on: types, the System contract, the registry, errors, rendering, paths, secrets."""
