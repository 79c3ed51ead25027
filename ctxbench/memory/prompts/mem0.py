"""Mem0 prompts (extraction, update decision, running summary), kept compact for small models.

Each structured call's JSON Schema is declared here beside its prompt: a fact starts with a speaker's
name and is at most ``FACT_CHARS`` long, an update names one of the ids shown. The extraction
example is a separate exchange about invented people; a fact that names them is never stored.

Extraction is one call per message pair, whatever the store layout: the facts of every speaker,
each starting with the name of the speaker it is about. With one store per speaker
(``stores=per_speaker``) each fact goes to the store of the speaker it starts with
(:func:`speaker_of`); see :mod:`ctxbench.memory.mem0` for how this differs from Mem0's evaluation,
which extracts each speaker's store in a call of its own. A fact written ``Name: ...`` is read as
``Name ...`` (the schema's name prefix, :mod:`ctxbench.llm.normalize`).
"""
from __future__ import annotations

import json
import re
from typing import Any

from ctxbench.llm import schema as sch

from ctxbench.memory.prompts import scripting as S

VERSION = "mem0-v4"  # v4: one extraction per pair for per-speaker stores too (no owner cue)

FACT_CHARS = 140  # characters per fact (the schema's bound: a reply closes within its token budget)

EXTRACT_SYSTEM = (
    "You extract facts worth remembering from the new messages of a conversation. A fact is one short "
    "sentence that starts with the name of the person it is about (hobbies, plans, events, relations, "
    "preferences, jobs, places). Ignore greetings and questions. Use the summary and recent messages only "
    "to resolve who and what. Reply with JSON.")

# The in-context example is its own exchange, about people and things that appear in no dataset, so a
# small model cannot take it for the conversation; a fact naming them is dropped (copied_example).
EXAMPLE_NEW = ("New messages (example, 1 January 2000):\nZorvan: I just adopted a puppy named Bolt!\n"
               "Yilda: Nice! I start my nursing job next week.\n")
EXAMPLE_USER = EXAMPLE_NEW + "Facts:"
EXAMPLE_FACTS = ["Zorvan adopted a puppy named Bolt.", "Yilda starts a nursing job next week."]
EXAMPLE_WORDS = ("zorvan", "yilda", "bolt")


def fact_schema(speakers: list[str], max_chars: int = FACT_CHARS) -> dict[str, Any]:
    """One fact: a sentence that starts with a speaker's name (any short sentence if none are known)."""
    names = [n for n in speakers if n.strip()]
    if not names:
        return sch.text(max_chars, 8)
    return sch.named(names, f"[ '][^\"\\\\\\n]{{8,{max_chars}}}$")


def facts_schema(speakers: list[str], max_facts: int) -> dict[str, Any]:
    return sch.obj(facts=sch.items(fact_schema(speakers), max_facts))


def speaker_of(fact: str, speakers: list[str]) -> str | None:
    """The speaker a fact is about: the longest name it starts with (then a space or ``'``), or None."""
    for name in sorted((n for n in speakers if n.strip()), key=len, reverse=True):
        if fact.startswith(name) and fact[len(name):len(name) + 1] in (" ", "'"):
            return name
    return None


def extract_messages(summary: str, recent: str, date: str, new: str) -> list[dict[str, str]]:
    """The extraction prompt: the facts of the new pair, each starting with its speaker's name."""
    user = (f"Summary: {summary or '(none)'}\n\nRecent messages:\n{recent or '(none)'}\n\n"
            f"New messages ({date}):\n{new}\nFacts:")
    return [{"role": "system", "content": EXTRACT_SYSTEM},
            {"role": "user", "content": EXAMPLE_USER},
            {"role": "assistant", "content": json.dumps({"facts": EXAMPLE_FACTS})},
            {"role": "user", "content": user}]


def copies_example(fact: str) -> bool:
    low = fact.lower()
    return any(re.search(rf"\b{w}\b", low) for w in EXAMPLE_WORDS)


UPDATE_SYSTEM = (
    "You keep a memory store up to date. Compare the NEW FACT with the EXISTING MEMORIES (each has an id). "
    "Choose one event: ADD if it is new information; UPDATE if an existing memory is about the same thing "
    "and the fact adds detail (give that id and the merged text); DELETE if the fact contradicts an existing "
    "memory (give that id); NOOP if it is already known. Reply with JSON.")


def decision_schema(ids: list[str], max_chars: int = FACT_CHARS) -> dict[str, Any]:
    """ADD | NOOP | UPDATE(id, text) | DELETE(id), the id one of those shown."""
    shown = sch.enum(ids)
    return sch.any_of(sch.obj(event=sch.const("ADD")), sch.obj(event=sch.const("NOOP")),
                      sch.obj(event=sch.const("UPDATE"), id=shown, text=sch.text(max_chars, 8)),
                      sch.obj(event=sch.const("DELETE"), id=shown))


def update_messages(existing: list[tuple[str, str]], fact: str) -> list[dict[str, str]]:
    mem = "\n".join(f"{i}: {t}" for i, t in existing) or "(empty)"
    user = f"EXISTING MEMORIES:\n{mem}\n\nNEW FACT: {fact}\n\nJSON:"
    return [{"role": "system", "content": UPDATE_SYSTEM}, {"role": "user", "content": user}]


SUMMARY_SYSTEM = ("Update the running summary of a conversation with the new session. Keep it under "
                  "120 words: the people, their situations and key events with dates.")


def summary_messages(summary: str, date: str, session: str) -> list[dict[str, str]]:
    user = f"Current summary: {summary or '(none)'}\n\nNew session ({date}):\n{session}\n\nUpdated summary:"
    return [{"role": "system", "content": SUMMARY_SYSTEM}, {"role": "user", "content": user}]


# ---- scripted replies (a zero-cost chat model for tests and bench; see prompts/scripting.py) ----
def _facts(user: str) -> str:
    """A fact per new message: "<speaker> said <first words>" (starts with the speaker's name, as the
    schema wants)."""
    new = [ln for ln in S.lines(S.after(user, "New messages ("))[1:3] if not ln.startswith("Facts")]
    facts = []
    for ln in new:
        speaker, _, text = ln.partition(": ")
        if text and len(text.split()) > 2:
            facts.append(f"{speaker} said {S.words(text, 12)}"[:FACT_CHARS].replace('"', "'").replace("\\", " "))
    return json.dumps({"facts": facts})


def _update(user: str) -> str:
    fact = S.after(user, "NEW FACT: ").split("\n")[0].strip()
    existing = [ln.split(": ", 1)[-1] for ln in S.lines(S.after(user, "EXISTING MEMORIES:").split("NEW FACT")[0])]
    return json.dumps({"event": "NOOP" if fact in existing else "ADD"})


SCRIPTED = {EXTRACT_SYSTEM: _facts, UPDATE_SYSTEM: _update, SUMMARY_SYSTEM: S.summary}
