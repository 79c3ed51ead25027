"""A-Mem prompts: note construction (keywords, context, tags), link generation + memory evolution, and
the question's search keywords, each with its JSON Schema (bounded lists and strings; links and evolved
neighbours are ids shown)."""
from __future__ import annotations

import json
import re
from typing import Any

from ctxbench.llm import schema as sch

from ctxbench.memory.prompts import scripting as S

VERSION = "amem-v3"
CONTEXT_CHARS = 160
WORD_CHARS = 30

NOTE_SYSTEM = ("Analyse one conversation message for a memory note. Give 2-5 keywords (key nouns, names, "
               "verbs), one sentence of context (topic, who is involved, why it matters) and 1-4 broad tags. "
               "Reply with JSON.")


def note_schema(max_keywords: int = 5, max_tags: int = 4) -> dict[str, Any]:
    word = sch.text(WORD_CHARS, 2)
    return sch.obj(keywords=sch.items(word, max_keywords, 1), context=sch.text(CONTEXT_CHARS, 8),
                   tags=sch.items(word, max_tags, 1))


def note_messages(time: str, content: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": NOTE_SYSTEM},
            {"role": "user", "content": f"Message ({time}): {content}\n\nJSON:"}]


EVOLVE_SYSTEM = (
    "A NEW memory note arrives; below are its nearest NEIGHBOUR notes (each with an id). Decide: which "
    "neighbours it should link to (same topic, person or event); and, for neighbours whose context or tags "
    "should change in the light of the new note, their updated context and tags. Reply with JSON; "
    "empty lists when nothing applies.")


def evolve_schema(ids: list[str], max_evolved: int = 2, max_tags: int = 4) -> dict[str, Any]:
    """Links and evolved neighbours among the ids shown."""
    shown = sch.enum(ids)
    neighbour = sch.obj(id=shown, context=sch.text(CONTEXT_CHARS, 8), tags=sch.items(sch.text(WORD_CHARS, 2), max_tags, 1))
    return sch.obj(links=sch.items(shown, len(ids)), neighbors=sch.items(neighbour, min(max_evolved, len(ids))))


def evolve_messages(new: str, neighbours: list[tuple[str, str]]) -> list[dict[str, str]]:
    nb = "\n".join(f"{i}: {t}" for i, t in neighbours)
    user = f"NEW: {new}\n\nNEIGHBOURS:\n{nb}\n\nJSON:"
    return [{"role": "system", "content": EVOLVE_SYSTEM}, {"role": "user", "content": user}]


QUERY_SYSTEM = ("Given a question about a conversation, generate several keywords to search the conversation's "
                "memory notes with (names, key nouns, verbs, dates). Reply with JSON.")


def query_schema(max_keywords: int = 8) -> dict[str, Any]:
    """The question's search keywords: 1..``max_keywords`` short strings.

    The reference (WujiangXu/A-mem ``test_advanced.py`` ``generate_query_llm``) asks for one string
    ``{"keywords": "keyword1, keyword2, keyword3"}``; here a bounded list, joined with ", " into the
    same query text."""
    return sch.obj(keywords=sch.items(sch.text(WORD_CHARS, 2), max_keywords, 1))


def query_messages(question: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": QUERY_SYSTEM},
            {"role": "user", "content": f"Question: {question}\n\nJSON:"}]


# ---- scripted replies (a zero-cost chat model for tests and bench; see prompts/scripting.py) ----
def _note(user: str) -> str:
    body = S.after(user, "): ").split("\n\nJSON")[0]
    kws = sorted(set(S.WORD.findall(body)), key=lambda w: (-len(w), w))[:3] or ["chat"]
    return json.dumps({"keywords": kws, "context": S.words(body, 12) or "a message", "tags": ["conversation"]})


def _evolve(user: str) -> str:
    ids = re.findall(r"^(\w+): ", S.after(user, "NEIGHBOURS:"), re.M)
    return json.dumps({"links": ids[:1], "neighbors": []})


def _query(user: str) -> str:
    body = S.after(user, "Question: ").split("\n\nJSON")[0]
    kws = sorted(set(S.WORD.findall(body)), key=lambda w: (-len(w), w))[:4] or ["conversation"]
    return json.dumps({"keywords": kws})


SCRIPTED = {NOTE_SYSTEM: _note, EVOLVE_SYSTEM: _evolve, QUERY_SYSTEM: _query}
