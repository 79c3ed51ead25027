"""Mem0g prompts: entity extraction, relation triplets, conflict detection, each with its JSON Schema.

The schemas bound every reply (entity names ≤ ``NAME_CHARS``, entity types ≤ ``TYPE_CHARS``, at
most ``max_entities`` entities and ``max_relations`` relations) and restrict names and ids to those
shown: a relation's source and target are entities just extracted, an outdated id is one of the
edges listed. Entities come with their type, as mem0's ``extract_entities`` tool returns
``{"entity", "entity_type"}`` pairs (mem0ai/mem0 v0.1.x ``mem0/graphs/tools.py``
``EXTRACT_ENTITIES_STRUCT_TOOL``; ``mem0/memory/graph_memory.py`` ``_retrieve_nodes_from_data``).
"""
from __future__ import annotations

import json
from typing import Any

from ctxbench.llm import schema as sch

from ctxbench.memory.prompts import scripting as S

VERSION = "mem0g-v4"
NAME_CHARS = 40
RELATION_CHARS = 40
TYPE_CHARS = 24

ENTITY_SYSTEM = ("List the entities (people, places, organisations, objects, events, activities) mentioned "
                 "in the messages, each with its type (e.g. person, place, organisation, pet, hobby, event). "
                 "Use the speakers' names instead of I/me/you. Reply with JSON.")


def entities_schema(max_entities: int) -> dict[str, Any]:
    """Names: letters, digits, spaces, apostrophes, hyphens (no utterance copied with its colon);
    types: one lowercase snake_case word group of ≤ ``TYPE_CHARS`` characters."""
    name = {"type": "string", "pattern": f"^[A-Za-z][A-Za-z0-9 '\\-]{{1,{NAME_CHARS - 1}}}$"}
    etype = {"type": "string", "pattern": f"^[a-z][a-z_]{{1,{TYPE_CHARS - 1}}}$"}
    return sch.obj(entities=sch.items(sch.obj(entity=name, entity_type=etype), max_entities))


def entity_messages(date: str, text: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": ENTITY_SYSTEM},
            {"role": "user", "content": f"Messages ({date}):\n{text}\n\nJSON:"}]


RELATION_SYSTEM = ("Extract relations between the given entities that the messages state, as JSON. Each "
                   "relation links two of the entities with a verb such as lives_in, works_at, likes, visited, "
                   "friend_of. Use the speakers' names instead of I/me/you.")
# The example is its own exchange about invented people (as in Mem0's extraction); relation names that
# copy the instructions' words are dropped (counted as copied_instructions).
EXAMPLE_USER = ("Entities: zorvan, bolt, yilda, nursing job\nMessages (example, 1 January 2000):\n"
                "Zorvan: I just adopted a puppy named Bolt!\nYilda: Nice! I start my nursing job next week.\n\nJSON:")
EXAMPLE_REPLY = {"relations": [{"source": "zorvan", "relation": "adopted", "target": "bolt"},
                               {"source": "yilda", "relation": "starts", "target": "nursing job"}]}
INSTRUCTION_WORDS = ("source", "target", "relation", "relations", "entity", "entities", "verb", "json")


def copies_instructions(relation: str) -> bool:
    return relation in INSTRUCTION_WORDS or relation.startswith(("ashort", "short_verb", "a_short"))


def relations_schema(entities: list[str], max_relations: int) -> dict[str, Any]:
    """Triplets over the entities shown; the relation is snake_case."""
    name = sch.enum(entities)
    rel = {"type": "string", "pattern": f"^[a-z]{{2,{RELATION_CHARS}}}(_[a-z]{{2,{RELATION_CHARS}}}){{0,3}}$"}
    return sch.obj(relations=sch.items(sch.obj(source=name, relation=rel, target=name), max_relations))


def relation_messages(date: str, text: str, entities: list[str]) -> list[dict[str, str]]:
    user = f"Entities: {', '.join(entities)}\nMessages ({date}):\n{text}\n\nJSON:"
    return [{"role": "system", "content": RELATION_SYSTEM}, {"role": "user", "content": EXAMPLE_USER},
            {"role": "assistant", "content": json.dumps(EXAMPLE_REPLY)}, {"role": "user", "content": user}]


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


def _entities(user: str) -> str:
    names = S.entities(user) or ["conversation"]
    return json.dumps({"entities": [{"entity": n, "entity_type": "entity"} for n in names]})


SCRIPTED = {ENTITY_SYSTEM: _entities,
            RELATION_SYSTEM: _relations, CONFLICT_SYSTEM: lambda u: json.dumps({"outdated": []})}
