"""Schema types are read with typing.get_type_hints: Optional, unions, list[str], dict[str, int], Literal and
nested dataclasses work in a schema written in any module, with or without ``from __future__ import annotations``,
with ``setting(...)`` fields or plain ones (a plug-in's ``Settings``); a wrong value fails in one line."""
from __future__ import annotations

import importlib.util
import sys
import textwrap

import pytest
from omegaconf import OmegaConf

from ctxbench.config import schema as schema_check
from ctxbench.config.schema import ConfigTypeError, check_types
from ctxbench.config.setting import defaults, field_choices, find, type_names, walk
from ctxbench.core.errors import ConfigError

BODY = '''
import dataclasses
from dataclasses import dataclass, field
from typing import Literal, Optional

from ctxbench.config.setting import POSITIVE, setting


@dataclass
class Inner:
    depth: int = 2
    label: Optional[str] = None


@dataclass
class Settings:
    name: str = "plug"
    n_turns: int = 5
    limit: Optional[int] = None
    cap: int | None = setting(7, "a capped count", POSITIVE)
    tags: list[str] = field(default_factory=lambda: ["a", "b"])
    weights: dict[str, int] = field(default_factory=dict)
    mode: Literal["fast", "slow"] = "fast"
    inner: Inner = field(default_factory=Inner)
    maybe_inner: Optional[Inner] = None
'''


def _module(tmp_path, name: str, future: bool):
    path = tmp_path / f"{name}.py"
    path.write_text(("from __future__ import annotations\n" if future else "") + textwrap.dedent(BODY))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(params=[True, False], ids=["future_annotations", "eager_annotations"])
def plugin(request, tmp_path, monkeypatch):
    """A plug-in's Settings in a module of its own, installed as the memory option ``plug``."""
    name = f"plugin_settings_{'future' if request.param else 'eager'}_{id(tmp_path)}"
    module = _module(tmp_path, name, request.param)
    monkeypatch.setitem(sys.modules, name, module)
    from ctxbench.config.schemas import memory

    monkeypatch.setitem(memory.SCHEMAS, "plug", module.Settings)
    monkeypatch.setitem(memory.BY_NAME, "plug", (module.Settings,))
    schema_check.schema.cache_clear()
    yield module
    schema_check.schema.cache_clear()


def _types(schema, key):
    return type_names(find(schema, key))


def test_each_annotation_form_reads_as_its_types(plugin):
    s = plugin.Settings
    assert _types(s, "n_turns") == ({"int"}, False)
    assert _types(s, "limit") == ({"int"}, True)  # Optional[int]
    assert _types(s, "cap") == ({"int"}, True)  # int | None
    assert _types(s, "tags") == ({"list"}, False)  # list[str]
    assert _types(s, "weights") == ({"dict"}, True)  # dict[str, int] (a mapping may be null)
    assert _types(s, "mode") == ({"str"}, False)  # Literal["fast", "slow"]
    assert field_choices(find(s, "mode")) == ("fast", "slow")
    assert _types(s, "inner") == ({"dict"}, True)  # a dataclass: a mapping of its own keys
    assert _types(s, "inner.depth") == ({"int"}, False)
    assert _types(s, "inner.label") == ({"str"}, True)
    assert _types(s, "maybe_inner") == ({"dict"}, True)
    assert [k for k, _ in walk(s)] == ["name", "n_turns", "limit", "cap", "tags", "weights", "mode", "inner",
                                       "inner.depth", "inner.label", "maybe_inner", "maybe_inner.depth",
                                       "maybe_inner.label"]


def test_plain_fields_have_no_meaning_and_no_bound(plugin):
    f = find(plugin.Settings, "n_turns")
    assert f.metadata.get("meaning", "") == "" and f.metadata.get("range") is None
    assert find(plugin.Settings, "cap").metadata["range"] is not None


def test_defaults_are_plain_data_with_nested_mappings(plugin):
    assert defaults(plugin.Settings) == {
        "name": "plug", "n_turns": 5, "limit": None, "cap": 7, "tags": ["a", "b"], "weights": {},
        "mode": "fast", "inner": {"depth": 2, "label": None}, "maybe_inner": None}


def _memory(**keys):
    return OmegaConf.create({"memory": {"name": "plug", **keys}})


def test_the_defaults_pass_the_check(plugin):
    check_types(OmegaConf.create({"memory": defaults(plugin.Settings)}), "eval")
    check_types(_memory(limit=3, weights={"x": 2}, mode="slow", inner={"depth": 4, "label": "x"},
                        maybe_inner={"depth": 1}), "eval")


@pytest.mark.parametrize("keys,line", [
    ({"n_turns": "five"}, "config key 'memory.n_turns' must be int, got 'five'"),
    ({"limit": "abc"}, "config key 'memory.limit' must be int or null, got 'abc'"),
    ({"cap": 1.5}, "config key 'memory.cap' must be int or null, got 1.5"),
    ({"tags": 3}, "config key 'memory.tags' must be list, got 3"),
    ({"weights": [1]}, "config key 'memory.weights' must be dict or null, got a list"),
    ({"inner": {"depth": "deep"}}, "config key 'memory.inner.depth' must be int, got 'deep'"),
    ({"inner": 3}, "config key 'memory.inner' must be dict or null, got 3"),
])
def test_a_value_of_the_wrong_type_fails_in_one_line(plugin, keys, line):
    with pytest.raises(ConfigTypeError) as e:
        check_types(_memory(**keys), "eval")
    assert str(e.value) == line


@pytest.mark.parametrize("keys,line", [
    ({"mode": "medium"}, "config key 'memory.mode' must be one of fast | slow, got 'medium'"),
    ({"cap": 0}, "config key 'memory.cap' must be >= 1, got 0"),
])
def test_literal_values_and_bounds_are_checked_like_choices(plugin, keys, line):
    with pytest.raises(ConfigError) as e:
        check_types(_memory(**keys), "eval")
    assert str(e.value) == line and "\n" not in str(e.value)
