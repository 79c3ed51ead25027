"""Mem0 prompts (extraction, update decision, running summary), kept compact for small models.

The format lines use angle-bracket placeholders; :mod:`..stores.structured` rejects a reply that
copies a placeholder, so an example can never be stored as a memory.
"""
from __future__ import annotations

import json

from . import scripting as S

VERSION = "mem0-v1"

EXTRACT_SYSTEM = (
    "You extract facts worth remembering from the NEW MESSAGES of a conversation. A fact is one short "
    "sentence naming the person it is about (hobbies, plans, events, relations, preferences, jobs, places). "
    "Write dates as absolute dates using the message date. Ignore greetings. Use the summary and recent "
    "messages only to resolve who and what. Reply with JSON only: "
    '{"facts": ["<fact>", "<fact>"]} or {"facts": []}.')


def extract_messages(summary: str, recent: str, date: str, new: str) -> list[dict[str, str]]:
    user = (f"Summary: {summary or '(none)'}\n\nRecent messages:\n{recent or '(none)'}\n\n"
            f"NEW MESSAGES ({date}):\n{new}\n\nJSON:")
    return [{"role": "system", "content": EXTRACT_SYSTEM}, {"role": "user", "content": user}]


UPDATE_SYSTEM = (
    "You keep a memory store up to date. Compare the NEW FACT with the EXISTING MEMORIES (each has an id). "
    "Choose one event: ADD if it is new information; UPDATE if an existing memory is about the same thing "
    "and the fact adds detail (give that id and the merged text); DELETE if the fact contradicts an existing "
    "memory (give that id); NOOP if it is already known. Use only ids from the list. Reply with JSON only: "
    '{"event": "<ADD|UPDATE|DELETE|NOOP>", "id": "<id>", "text": "<memory text>"}.')


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
    new = [ln for ln in S.lines(S.after(user, "NEW MESSAGES"))[1:3] if not ln.startswith("JSON")]
    return json.dumps({"facts": [S.words(ln, 12) for ln in new if len(ln.split()) > 2]})


def _update(user: str) -> str:
    fact = S.after(user, "NEW FACT: ").split("\n")[0].strip()
    existing = [ln.split(": ", 1)[-1] for ln in S.lines(S.after(user, "EXISTING MEMORIES:").split("NEW FACT")[0])]
    return json.dumps({"event": "NOOP"} if fact in existing else {"event": "ADD", "text": fact})


SCRIPTED = {EXTRACT_SYSTEM: _facts, UPDATE_SYSTEM: _update, SUMMARY_SYSTEM: S.summary}
