"""MemoryBank prompts: daily event summary, user portrait update, global summary."""
from __future__ import annotations


from ctxbench.memory.prompts import scripting as S

VERSION = "memorybank-v1"

EVENT_SYSTEM = "Summarise the events and key facts of this day's conversation in 2-4 sentences, naming the people."
PORTRAIT_SYSTEM = ("Update the portrait of the people in the conversation (personality, preferences, jobs, "
                   "family, goals) with what this day's conversation shows. Under 100 words.")
GLOBAL_SYSTEM = "Write a global summary (under 120 words) of these daily event summaries, keeping dates."


def event_messages(date: str, transcript: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": EVENT_SYSTEM},
            {"role": "user", "content": f"Conversation on {date}:\n{transcript}\n\nSummary:"}]


def portrait_messages(portrait: str, date: str, transcript: str) -> list[dict[str, str]]:
    user = f"Current portrait: {portrait or '(none)'}\n\nConversation on {date}:\n{transcript}\n\nUpdated portrait:"
    return [{"role": "system", "content": PORTRAIT_SYSTEM}, {"role": "user", "content": user}]


def global_messages(events: list[str]) -> list[dict[str, str]]:
    return [{"role": "system", "content": GLOBAL_SYSTEM},
            {"role": "user", "content": "\n".join(events) + "\n\nGlobal summary:"}]


# ---- scripted replies (a zero-cost chat model for tests and bench; see prompts/scripting.py) ----
SCRIPTED = {EVENT_SYSTEM: S.summary, PORTRAIT_SYSTEM: S.summary, GLOBAL_SYSTEM: S.summary}
