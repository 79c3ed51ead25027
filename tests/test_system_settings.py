"""Settings are registered with the class they configure: every registered method / memory class names its
schema (``Settings``), the same one the config layer checks and documents that name's keys with."""
from __future__ import annotations

import pytest

from ctxbench.config.schemas import group_schemas, schemas_named
from ctxbench.config.setting import defaults
from ctxbench.core import registry


def registered():
    for kind in ("method", "memory"):
        for name in registry.names(kind):
            yield kind, name


@pytest.mark.parametrize("kind,name", list(registered()))
def test_a_registered_class_settings_is_the_schema_of_its_name(kind, name):
    cls = registry.get(kind, name)
    assert cls.Settings is not None, f"{cls.__qualname__} declares no Settings"
    assert schemas_named(kind, name) == (cls.Settings,)
    assert cls.Settings in group_schemas(kind).values()  # a ConfigStore node a YAML option composes from
    assert "name" in defaults(cls.Settings)
