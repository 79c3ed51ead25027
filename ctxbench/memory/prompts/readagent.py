"""ReadAgent prompts (Lee et al., 2024, arXiv 2402.09727; google-research/read-agent): episode
pagination, gisting and parallel lookup, adapted to conversations and kept compact. The answer
itself uses the shared QA prompt (``ctxbench.qa.forms``) over the gist memory with the looked-up
pages expanded.
"""
from __future__ import annotations

import json
import re
from typing import Any

from ctxbench.llm import schema as sch

from ctxbench.memory.prompts import scripting as S

VERSION = "readagent-v2"

PAGINATION = (
    "You are given a passage taken from a longer conversation, with numbered labels between the "
    "messages. A label numbered 19 shows as <19>. Choose ONE label where it is natural to pause reading: "
    "the end of a topic, of a scene or of a day. Reply with JSON, for example {\"break\": 57}.")


def break_schema(labels: list[int]) -> dict[str, Any]:
    """The break point: one of the labels offered."""
    return sch.obj(**{"break": sch.enum(labels)})


def pagination_messages(preceding: str, passage: str, following: str) -> list[dict[str, str]]:
    parts = [f"...\n{preceding}" if preceding else "", passage, f"{following}\n..." if following else ""]
    user = "Passage:\n\n" + "\n".join(p for p in parts if p) + "\n\nJSON:"
    return [{"role": "system", "content": PAGINATION}, {"role": "user", "content": user}]


GIST = ("Please shorten the following passage of a conversation. Keep who said or did what, names, "
        "places and dates. Just give the shortened version, do not explain.")


def gist_messages(page: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": GIST}, {"role": "user", "content": f"Passage:\n{page}\n\nShortened:"}]


LOOKUP = (
    "The following text is what you remember from reading a conversation, page by page, and a question "
    "about it. You may read up to {n} page(s) again in full to refresh your memory before answering. "
    "Reply with JSON, the page numbers, for example {{\"pages\": [2, 7]}}. Do not answer the question yet.")


def pages_schema(n_pages: int, max_lookups: int) -> dict[str, Any]:
    """Up to ``max_lookups`` page numbers among the pages that exist."""
    return sch.obj(pages=sch.items(sch.enum(list(range(n_pages))), max_lookups))


def lookup_messages(gists: str, question: str, n: int) -> list[dict[str, str]]:
    user = (f"Text:\n{gists}\n\nQuestion:\n{question}\n\n"
            f"Which page(s) (at most {n}) would you like to read again?")
    return [{"role": "system", "content": LOOKUP.format(n=n)}, {"role": "user", "content": user}]


# ---- scripted replies (a zero-cost chat model for tests and bench; see prompts/scripting.py) ----
def _break(user: str) -> str:
    labels = re.findall(r"<(\d+)>", S.after(user, "Passage:"))
    return json.dumps({"break": int(labels[len(labels) // 2]) if labels else 1})


SCRIPTED = {PAGINATION: _break, GIST: lambda u: S.words(S.after(u, "Passage:"), 30) or "Nothing.",
            S.template_key(LOOKUP): lambda u: json.dumps({"pages": [0]})}
