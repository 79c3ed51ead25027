"""A-Mem prompts: note construction (keywords, context, tags) and link generation + memory evolution."""
from __future__ import annotations

import json
import re

from . import scripting as S

VERSION = "amem-v1"

NOTE_SYSTEM = ("Analyse one conversation message for a memory note. Give 2-5 keywords (key nouns, names, "
               "verbs), one sentence of context (topic, who is involved, why it matters) and 1-4 broad tags. "
               'Reply with JSON only: {"keywords": ["<keyword>"], "context": "<sentence>", "tags": ["<tag>"]}.')


def note_messages(time: str, content: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": NOTE_SYSTEM},
            {"role": "user", "content": f"Message ({time}): {content}\n\nJSON:"}]


EVOLVE_SYSTEM = (
    "A NEW memory note arrives; below are its nearest NEIGHBOUR notes (each with an id). Decide: which "
    "neighbours it should link to (same topic, person or event); and, for neighbours whose context or tags "
    "should change in the light of the new note, their updated context and tags. Use only ids from the "
    'list. Reply with JSON only: {"links": ["<id>"], "neighbors": [{"id": "<id>", "context": "<sentence>", '
    '"tags": ["<tag>"]}]} — empty lists when nothing applies.')


def evolve_messages(new: str, neighbours: list[tuple[str, str]]) -> list[dict[str, str]]:
    nb = "\n".join(f"{i}: {t}" for i, t in neighbours)
    user = f"NEW: {new}\n\nNEIGHBOURS:\n{nb}\n\nJSON:"
    return [{"role": "system", "content": EVOLVE_SYSTEM}, {"role": "user", "content": user}]


# ---- scripted replies (a zero-cost chat model for tests and bench; see prompts/scripting.py) ----
def _note(user: str) -> str:
    body = S.after(user, "): ").split("\n\nJSON")[0]
    kws = sorted(set(S.WORD.findall(body)), key=lambda w: (-len(w), w))[:3] or ["chat"]
    return json.dumps({"keywords": kws, "context": S.words(body, 12) or "a message", "tags": ["conversation"]})


def _evolve(user: str) -> str:
    ids = re.findall(r"^(\w+): ", S.after(user, "NEIGHBOURS:"), re.M)
    return json.dumps({"links": ids[:1], "neighbors": []})


SCRIPTED = {NOTE_SYSTEM: _note, EVOLVE_SYSTEM: _evolve}
