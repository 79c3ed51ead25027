"""Mem0g prompts: entity extraction, relation triplets, conflict detection, each with its JSON Schema.

The schemas bound every reply (entity names ≤ ``NAME_CHARS``, at most ``MAX_ENTITIES`` entities and
``MAX_RELATIONS`` relations) and restrict names and ids to those shown: a relation's source and
target are entities just extracted (or the speakers), an outdated id is one of the edges listed.
"""
from __future__ import annotations

import json
from typing import Any

from ctxbench.llm import schema as sch

from . import scripting as S

VERSION = "mem0g-v2"
NAME_CHARS = 40
RELATION_CHARS = 40

ENTITY_SYSTEM = ("List the entities (people, places, organisations, objects, events, activities) mentioned "
                 "in the messages. Use the speakers' names instead of I/me/you. Reply with JSON.")


def entities_schema(max_entities: int) -> dict[str, Any]:
    return sch.obj(entities=sch.items(sch.text(NAME_CHARS, 2), max_entities))


def entity_messages(date: str, text: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": ENTITY_SYSTEM},
            {"role": "user", "content": f"Messages ({date}):\n{text}\n\nJSON:"}]


RELATION_SYSTEM = ("Extract relations between the given entities that the messages state. Each relation is "
                   "source, relation (a short verb phrase in snake_case, e.g. works_at), target. Use the "
                   "speakers' names instead of I/me/you. Reply with JSON.")


def relations_schema(entities: list[str], max_relations: int) -> dict[str, Any]:
    """Triplets over the entities shown; the relation is snake_case."""
    name = sch.enum(entities)
    rel = {"type": "string", "pattern": f"^[a-z][a-z0-9_]{{1,{RELATION_CHARS}}}$"}
    return sch.obj(relations=sch.items(sch.obj(source=name, relation=rel, target=name), max_relations))


def relation_messages(date: str, text: str, entities: list[str]) -> list[dict[str, str]]:
    user = f"Entities: {', '.join(entities)}\nMessages ({date}):\n{text}\n\nJSON:"
    return [{"role": "system", "content": RELATION_SYSTEM}, {"role": "user", "content": user}]


CONFLICT_SYSTEM = ("Below are EXISTING relations (each with an id) and NEW relations. An existing relation is "
                   "outdated if a new relation contradicts it (e.g. the same person now lives or works "
                   "somewhere else). Keep relations that can both be true. Reply with JSON.")


def outdated_schema(ids: list[str]) -> dict[str, Any]:
    """Ids among the existing edges shown (possibly none)."""
    return sch.obj(outdated=sch.items(sch.enum(ids), len(ids)))


def conflict_messages(existing: list[tuple[str, str]], new: list[str]) -> list[dict[str, str]]:
    ex = "\n".join(f"{i}: {t}" for i, t in existing)
    user = f"EXISTING:\n{ex}\n\nNEW:\n" + "\n".join(new) + "\n\nJSON:"
    return [{"role": "system", "content": CONFLICT_SYSTEM}, {"role": "user", "content": user}]


# ---- scripted replies (a zero-cost chat model for tests and bench; see prompts/scripting.py) ----
def _relations(user: str) -> str:
    ents = [e.strip() for e in S.after(user, "Entities: ").split("\n")[0].split(",") if e.strip()]
    return json.dumps({"relations": [{"source": a, "relation": "mentioned_with", "target": b}
                                     for a, b in zip(ents, ents[1:])][:4]})


SCRIPTED = {ENTITY_SYSTEM: lambda u: json.dumps({"entities": S.entities(u) or ["conversation"]}),
            RELATION_SYSTEM: _relations, CONFLICT_SYSTEM: lambda u: json.dumps({"outdated": []})}
