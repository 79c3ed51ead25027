"""The jobs of a ``-m`` sweep, as override lists, so each can be composed and checked before any runs.

``memory.k=10,20`` and ``choice``/``range`` are enumerated by Hydra's own override parser,
``glob(...)`` over a config group is matched against the group's YAML files, and a sweep a config
file asks for (``+sweep=memory_k`` sets ``hydra.sweeper.params``) is added like a command-line one.
``interval(...)`` cannot be enumerated: that override is left out of the check.
"""
from __future__ import annotations

from ctxbench.core.paths import conf_dir

CONF_DIR = conf_dir()
MAX_COMBINATIONS = 64  # a bigger sweep is checked one swept value at a time (the others at their first value)


def sweeper_params(command: str, overrides: list[str]) -> list[str]:
    """The sweep a config file asks for (``+sweep=memory_k`` sets ``hydra.sweeper.params``), as overrides.

    Keys also given on the command line are left out: there the command line wins, as in Hydra's sweeper.
    """
    from hydra import compose
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        fixed = [o.input_line for o in OverridesParser.create().parse_overrides(overrides) if not o.is_sweep_override()]
        params = compose(config_name=command, overrides=fixed, return_hydra_config=True).hydra.sweeper.params or {}
    except Exception:  # the main check reports a broken override in its own words
        return []
    given = {a.lstrip("+~").split("=", 1)[0] for a in overrides}
    return [f"{k}={v}" for k, v in params.items() if k not in given]


def sweep_combinations(overrides: list[str]) -> list[list[str]]:
    """The override lists of a ``-m`` sweep: ``memory.k=10,20`` → ``[..., memory.k=10]``, ``[..., memory.k=20]``."""
    import itertools

    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException:
        return [overrides]  # compose reports the syntax error in its own words
    choices: list[list[str]] = []
    for o in parsed:
        if not o.is_sweep_override():
            choices.append([o.input_line])
            continue
        values = _sweep_values(o)
        if values:  # an interval(...) cannot be enumerated: that key is not checked
            choices.append([f"{o.get_key_element()}={v}" for v in values])
    n = 1
    for c in choices:
        n *= len(c)
    if n <= MAX_COMBINATIONS:
        return [list(c) for c in itertools.product(*choices)]
    first = [c[0] for c in choices]
    return [first[:i] + [v] + first[i + 1:] for i, c in enumerate(choices) for v in c]


def _sweep_values(o) -> list[str]:
    from hydra.core.override_parser.types import Glob
    from hydra.errors import HydraException

    value = o.value()
    if isinstance(value, Glob):
        group = CONF_DIR / o.key_or_group
        return value.filter(sorted(p.stem for p in group.glob("*.yaml"))) if group.is_dir() else []
    try:
        return list(o.sweep_string_iterator())
    except HydraException:
        return []
