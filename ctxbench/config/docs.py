"""docs/config.md, generated from the schemas: every key with its type, default, bound or choices and meaning.

``python -m ctxbench.config.docs`` (or ``make docs-config``) rewrites the file;
tests/test_config_docs.py fails when the committed one is stale.
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

from ctxbench.config.schemas import COMMANDS, GROUPS, command_schema, group_schemas
from ctxbench.config.setting import REQUIRED, default_of, field_choices, sub_schema, type_names, walk

DOC = Path(__file__).resolve().parents[2] / "docs" / "config.md"
HEADER = """# Config reference

Generated from `ctxbench/config/schemas/` by `python -m ctxbench.config.docs` (`make docs-config`): do not edit.
Each command's primary config (`conf/<command>.yaml`) and each config group option (`conf/<group>/<option>.yaml`)
starts from one schema below and sets only what differs from it. A value of the wrong type, outside its bound or
not among its choices fails at compose time, in one line.
"""


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _default(f: dataclasses.Field) -> str:
    if sub_schema(f) is not None:
        return "(mapping)"
    value = default_of(f)
    if value == REQUIRED:
        return "required"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return f"`{value}`" if not isinstance(value, str) or value else "`''`"


def _bound(f: dataclasses.Field) -> str:
    m = f.metadata
    parts = []
    if m.get("range") is not None:
        parts.append(m["range"].describe())
    if field_choices(f):
        parts.append("one of " + ", ".join(str(c).lower() if isinstance(c, bool) else str(c) for c in field_choices(f)))
    if m.get("items") is not None:
        parts.append(f"items {m['items'].describe()}")
    if m.get("length"):
        parts.append(m["length"][1])
    if m.get("nonempty"):
        parts.append("not empty")
    if m.get("values") is not None:
        parts.append(f"values {m['values'].describe()}")
    if m.get("url"):
        parts.append("http(s) URL")
    if m.get("open"):
        parts.append(m["open"])
    return "; ".join(parts)


def _type(f: dataclasses.Field) -> str:
    types, nullable = type_names(f)
    order = [t for t in ("int", "float", "bool", "str", "list", "dict") if t in types] or ["any"]
    return " \\| ".join(order + (["null"] if nullable else []))


def table(schema: Any) -> list[str]:
    rows = ["| key | type | default | bound | meaning |", "|---|---|---|---|---|"]
    for key, f in walk(schema):
        rows.append(f"| `{key}` | {_type(f)} | {_cell(_default(f))} | {_cell(_bound(f))} | "
                    f"{_cell(f.metadata.get('meaning', ''))} |")
    return rows


def render() -> str:
    out = [HEADER]
    out.append("## Commands\n")
    for command in COMMANDS:
        schema = command_schema(command)
        out += [f"### `{command}` (conf/{command}.yaml)\n", _cell((schema.__doc__ or "").strip()) + "\n"]
        out += table(schema) + [""]
    for group in GROUPS:
        out.append(f"## Group `{group}`\n")
        for node, schema in group_schemas(group).items():
            out += [f"### `{group}` schema `{node}`\n", _cell((schema.__doc__ or "").strip()) + "\n"]
            out += table(schema) + [""]
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str] | None = None) -> None:
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text(render())
    print(f"wrote {DOC}", file=sys.stderr)


if __name__ == "__main__":
    main()
