"""Mem0g prompts: entity extraction, relation triplets, conflict detection (compact, validated)."""
from __future__ import annotations

import json

from . import scripting as S

VERSION = "mem0g-v1"

ENTITY_SYSTEM = ("List the entities (people, places, organisations, objects, events, activities) mentioned "
                 "in the messages. Use the speakers' names instead of I/me/you. Reply with JSON only: "
                 '{"entities": ["<entity>", "<entity>"]}.')


def entity_messages(date: str, text: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": ENTITY_SYSTEM},
            {"role": "user", "content": f"Messages ({date}):\n{text}\n\nJSON:"}]


RELATION_SYSTEM = ("Extract relations between the given entities that the messages state. Each relation is "
                   "source, relation (a short verb phrase in snake_case, e.g. works_at), target. Use the "
                   "speakers' names instead of I/me/you. Reply with JSON only: "
                   '{"relations": [{"source": "<entity>", "relation": "<relation>", "target": "<entity>"}]}.')


def relation_messages(date: str, text: str, entities: list[str]) -> list[dict[str, str]]:
    user = f"Entities: {', '.join(entities)}\nMessages ({date}):\n{text}\n\nJSON:"
    return [{"role": "system", "content": RELATION_SYSTEM}, {"role": "user", "content": user}]


CONFLICT_SYSTEM = ("Below are EXISTING relations (each with an id) and NEW relations. An existing relation is "
                   "outdated if a new relation contradicts it (e.g. the same person now lives or works "
                   "somewhere else). Keep relations that can both be true. Use only ids from the list. "
                   'Reply with JSON only: {"outdated": ["<id>"]} or {"outdated": []}.')


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
