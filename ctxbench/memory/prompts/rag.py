"""RAG prompts: only the session summary (``granularity: session_summary``) calls an LLM."""
from __future__ import annotations


from ctxbench.memory.prompts import scripting as S

VERSION = "rag-v1"

SUMMARY_SYSTEM = "You summarise one conversation session in 2-4 sentences: who did what, when, plans, facts about the people."


def summary_messages(date: str, transcript: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": SUMMARY_SYSTEM},
            {"role": "user", "content": f"Session date: {date}\n{transcript}\n\nSummary:"}]


# ---- scripted replies (a zero-cost chat model for tests and bench; see prompts/scripting.py) ----
SCRIPTED = {SUMMARY_SYSTEM: S.summary}
