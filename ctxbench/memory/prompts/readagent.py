"""ReadAgent prompts (Lee et al., 2024, arXiv 2402.09727; google-research/read-agent): episode
pagination, gisting and parallel lookup, adapted to conversations and kept compact. The answer
itself uses the shared QA prompt (``ctxbench.qa_prompts``) over the gist memory with the looked-up
pages expanded.
"""
from __future__ import annotations

import re

from . import scripting as S

VERSION = "readagent-v1"

PAGINATION = (
    "You are given a passage taken from a longer conversation, with numbered labels between the "
    "messages. A label numbered 19 shows as <19>. Choose ONE label where it is natural to pause reading: "
    "the end of a topic, of a scene or of a day. Answer with the label and a short reason, for example "
    "\"Break point: <57>\nBecause ...\"")


def pagination_messages(preceding: str, passage: str, following: str) -> list[dict[str, str]]:
    parts = [f"...\n{preceding}" if preceding else "", passage, f"{following}\n..." if following else ""]
    user = "Passage:\n\n" + "\n".join(p for p in parts if p) + "\n\nBreak point:"
    return [{"role": "system", "content": PAGINATION}, {"role": "user", "content": user}]


GIST = ("Please shorten the following passage of a conversation. Keep who said or did what, names, "
        "places and dates. Just give the shortened version, do not explain.")


def gist_messages(page: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": GIST}, {"role": "user", "content": f"Passage:\n{page}\n\nShortened:"}]


LOOKUP = (
    "The following text is what you remember from reading a conversation, page by page, and a question "
    "about it. You may read up to {n} page(s) again in full to refresh your memory before answering. "
    "Respond with the page numbers, for example \"I want to look up Page [2, 7] to ...\". "
    "Do not answer the question yet.")


def lookup_messages(gists: str, question: str, n: int) -> list[dict[str, str]]:
    user = (f"Text:\n{gists}\n\nQuestion:\n{question}\n\n"
            f"Which page(s) (at most {n}) would you like to read again?")
    return [{"role": "system", "content": LOOKUP.format(n=n)}, {"role": "user", "content": user}]


# ---- scripted replies (a zero-cost chat model for tests and bench; see prompts/scripting.py) ----
def _break(user: str) -> str:
    labels = re.findall(r"<(\d+)>", S.after(user, "Passage:"))
    return f"Break point: <{labels[len(labels) // 2]}>" if labels else "Break point: <1>"


SCRIPTED = {PAGINATION: _break, GIST: lambda u: S.words(S.after(u, "Passage:"), 30) or "Nothing.",
            S.template_key(LOOKUP): lambda u: "I want to look up Page [0]"}
