"""MemGPT prompts: the recursive summary written when the FIFO queue is flushed, the memory-pressure
step (the agent saves to archival/core memory before a flush), and the main context the model pages
from with JSON function calls. Compact for small local models (the original MemGPT system prompt and
function schemas are several thousand tokens). Each step's reply is decoded under a bounded JSON
Schema (:func:`call_schema`, :func:`pressure_schema`).
"""
from __future__ import annotations

import json
from typing import Any

from ctxbench.llm import schema as sch

from ctxbench.memory.prompts import scripting as S

VERSION = "memgpt-v3"
ARG_CHARS = 160  # characters per function argument (a reply closes within step_max_tokens)

SUMMARY_SYSTEM = (
    "You keep a running summary of a conversation that no longer fits in memory. Merge the previous "
    "summary and the evicted messages into one new summary of at most {words} words: the people, "
    "facts about them, events and their dates. Write only the summary.")


def summary_messages(previous: str, evicted: str, words: int) -> list[dict[str, str]]:
    user = (f"PREVIOUS SUMMARY:\n{previous or '(none)'}\n\nEVICTED MESSAGES:\n{evicted}\n\nNEW SUMMARY:")
    return [{"role": "system", "content": SUMMARY_SYSTEM.format(words=words)},
            {"role": "user", "content": user}]


FUNCTIONS = (
    "archival_memory_search(query): search the facts saved to archival memory, by meaning\n"
    "conversation_search(query): search every past message (recall storage), by keywords\n"
    "core_memory_append(content): add a line to your working context\n"
    "core_memory_replace(old_content, new_content): edit your working context\n"
    "send_message(message): give your final short answer and stop")

AGENT_SYSTEM = (
    "You answer questions about a long conversation. You only see a bounded main context: your working "
    "context, a summary of older messages and the most recent messages. Every older message is in recall "
    "storage and the facts saved while reading are in archival storage; search them before answering when "
    "the answer is not in view. Each reply must be "
    "ONE JSON object calling one function: {{\"function\": \"name\", \"args\": {{...}}}}.\nFunctions:\n"
    "{functions}\nYou have at most {steps} calls; the last one must be send_message.")


ARGUMENTS = {  # function -> its string arguments, in order
    "archival_memory_search": ("query",),
    "conversation_search": ("query",),
    "core_memory_append": ("content",),
    "core_memory_replace": ("old_content", "new_content"),
    "send_message": ("message",),
}


def _calls(arguments: dict[str, tuple[str, ...]], max_chars: int) -> dict[str, Any]:
    return sch.any_of(*(sch.obj(function=sch.const(name), args=sch.obj(**{a: sch.text(max_chars) for a in args}))
                        for name, args in arguments.items()))


def call_schema(max_chars: int = ARG_CHARS) -> dict[str, Any]:
    """One function call: ``{"function": name, "args": {...}}`` for exactly the functions above."""
    return _calls(ARGUMENTS, max_chars)


# ---- memory pressure (letta-ai/letta memgpt/constants.py MESSAGE_SUMMARY_WARNING_STR; paper §2.2) ----
PRESSURE_ARGUMENTS = {  # what the agent may do when warned: save, then stop
    "archival_memory_insert": ("content",),
    "core_memory_append": ("content",),
    "core_memory_replace": ("old_content", "new_content"),
    "done": (),
}

PRESSURE_FUNCTIONS = (
    "archival_memory_insert(content): save a fact to archival memory (searchable later by meaning)\n"
    "core_memory_append(content): add a line to your working context\n"
    "core_memory_replace(old_content, new_content): edit your working context\n"
    "done(): stop saving")

PRESSURE_SYSTEM = (
    "You are the memory of an assistant that will later answer questions about a long conversation. You "
    "read the conversation as it goes; your main context holds your working context, a summary of older "
    "messages and the most recent messages. Each reply must be ONE JSON object calling one function: "
    "{{\"function\": \"name\", \"args\": {{...}}}}.\nFunctions:\n{functions}\nYou have at most {steps} "
    "calls.")

WARNING = ("SYSTEM ALERT: memory pressure. The recent messages will soon be trimmed from your context "
           "(they stay in recall storage, but only a summary of them stays in view). Save the important "
           "facts in them now: archival_memory_insert for details (people, events, dates), "
           "core_memory_append or core_memory_replace for what matters most. Call done when finished.")


def pressure_schema(max_chars: int = ARG_CHARS) -> dict[str, Any]:
    """One memory-pressure call: a save to archival or core memory, or ``done``."""
    return _calls(PRESSURE_ARGUMENTS, max_chars)


def pressure_messages(working: str, summary: str, fifo: str, steps: int) -> list[dict[str, str]]:
    """The main context at a memory-pressure warning: the system message, then the FIFO + the alert."""
    system = PRESSURE_SYSTEM.format(functions=PRESSURE_FUNCTIONS, steps=steps)
    system += f"\n\nWORKING CONTEXT:\n{working or '(empty)'}\n\nSUMMARY OF OLDER MESSAGES:\n{summary or '(none)'}"
    user = f"RECENT MESSAGES:\n{fifo or '(none)'}\n\n{WARNING}\n\nJSON call:"
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def agent_messages(working: str, summary: str, fifo: str, question: str, steps: int) -> list[dict[str, str]]:
    """The main context: system (instructions + working context + summary) then FIFO + question."""
    system = AGENT_SYSTEM.format(functions=FUNCTIONS, steps=steps)
    system += f"\n\nWORKING CONTEXT:\n{working or '(empty)'}\n\nSUMMARY OF OLDER MESSAGES:\n{summary or '(none)'}"
    user = f"RECENT MESSAGES:\n{fifo or '(none)'}\n\nQUESTION: {question}\n\nJSON call:"
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def result_message(name: str, result: str, left: int) -> dict[str, str]:
    return {"role": "user", "content": f"RESULT of {name}:\n{result}\n\n{left} call(s) left. JSON call:"}


def error_message(error: str, left: int) -> dict[str, str]:
    return {"role": "user", "content": f"ERROR: {error}\n{left} call(s) left. Reply with one JSON function call."}


# ---- scripted replies (a zero-cost chat model for tests and bench; see prompts/scripting.py) ----
def _pressure(user: str) -> str:
    """Save the newest recent message to archival memory, then (after a RESULT) stop."""
    if "RESULT of" in user:
        return json.dumps({"function": "done", "args": {}})
    recent = S.lines(S.after(user, "RECENT MESSAGES:").split("SYSTEM ALERT")[0])
    return json.dumps({"function": "archival_memory_insert",
                       "args": {"content": S.words(recent[-1], 20)[:ARG_CHARS] if recent else "nothing new"}})


def _agent(user: str) -> str:
    """First a search for the question's words, then (after a RESULT) send_message from it."""
    if "RESULT of" in user:
        result = S.lines(S.after(user, "RESULT of"))[1:2]
        return json.dumps({"function": "send_message", "args": {"message": S.words(result[0], 8) if result
                                                                else "Not mentioned in the conversation"}})
    question = S.after(user, "QUESTION: ").split("\n")[0]
    return json.dumps({"function": "archival_memory_search", "args": {"query": question}})


SCRIPTED = {S.template_key(SUMMARY_SYSTEM): S.summary, S.template_key(AGENT_SYSTEM): _agent,
            S.template_key(PRESSURE_SYSTEM): _pressure}
