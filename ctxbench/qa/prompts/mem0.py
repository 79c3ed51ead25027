"""Mem0's evaluation answer prompts (``mem0`` and, for Mem0g, ``mem0g``).

Source: mem0ai/mem0 ``evaluation/prompts.py`` ``ANSWER_PROMPT`` (Mem0) and ``ANSWER_PROMPT_GRAPH``
(Mem0g), rendered in ``evaluation/src/memzero/search.py`` ``MemorySearch.answer_question`` with
jinja2 and sent as ONE system message (no user message), temperature 0, no ``max_tokens``.

The instruction text below is the source's, character for character (its 4-space indentation and
trailing spaces included). What ctxbench changes, because a system here hands over one context:

- the source lists each speaker's memories separately (``Memories for user {{speaker_1_user_id}}``
  ... a JSON list of ``"timestamp: memory"``; Mem0g adds ``Relations for user ...``). A system that
  keeps one store per speaker (``memory=mem0 memory.stores=per_speaker``) renders its context with
  :func:`speaker_memories`, which writes those sections as the source lays them out, and the prompt
  puts them where the source does; any other context fills one ``Memories:`` block (the one-store
  layout of the same file's ``ANSWER_PROMPT_ZEP``);
- no ``max_tokens`` in the source: 128 new tokens here (its instructions ask for "less than 5-6
  words" but also "show your work"); no post-processing beyond stripping (the source scores the reply as is);
- Mem0 reports categories 1-4 only; adversarial (category 5) and non-LoCoMo questions are asked
  with ctxbench's question text (:func:`ctxbench.qa.forms.question_text`: the two options).
"""
from __future__ import annotations

import json

from ctxbench.qa.forms import ADVERSARIAL_FORM, question_text
from ctxbench.core.types import Question
from ctxbench.qa.prompt import AnswerPrompt

ANSWER_INSTRUCTIONS = (
    '\n'
    '    You are an intelligent memory assistant tasked with retrieving accurate information from '
    'conversation memories.\n'
    '\n'
    '    # CONTEXT:\n'
    '    You have access to memories from two speakers in a conversation. These memories contain \n'
    '    timestamped information that may be relevant to answering the question.\n'
    '\n'
    '    # INSTRUCTIONS:\n'
    '    1. Carefully analyze all provided memories from both speakers\n'
    '    2. Pay special attention to the timestamps to determine the answer\n'
    '    3. If the question asks about a specific event or fact, look for direct evidence in the memories\n'
    '    4. If the memories contain contradictory information, prioritize the most recent memory\n'
    '    5. If there is a question about time references (like "last year", "two months ago", etc.), \n'
    '       calculate the actual date based on the memory timestamp. For example, if a memory from \n'
    '       4 May 2022 mentions "went to India last year," then the trip occurred in 2021.\n'
    '    6. Always convert relative time references to specific dates, months, or years. For example, \n'
    '       convert "last year" to "2022" or "two months ago" to "March 2023" based on the memory \n'
    '       timestamp. Ignore the reference while answering the question.\n'
    '    7. Focus only on the content of the memories from both speakers. Do not confuse character \n'
    '       names mentioned in memories with the actual users who created those memories.\n'
    '    8. The answer should be less than 5-6 words.\n'
    '\n'
    '    # APPROACH (Think step by step):\n'
    '    1. First, examine all memories that contain information related to the question\n'
    '    2. Examine the timestamps and content of these memories carefully\n'
    '    3. Look for explicit mentions of dates, times, locations, or events that answer the question\n'
    '    4. If the answer requires calculation (e.g., converting relative time references), show your work\n'
    '    5. Formulate a precise, concise answer based solely on the evidence in the memories\n'
    '    6. Double-check that your answer directly addresses the question asked\n'
    '    7. Ensure your final answer is specific and avoids vague time references\n'
    '\n'
)
ANSWER_INSTRUCTIONS_GRAPH = (
    '\n'
    '    You are an intelligent memory assistant tasked with retrieving accurate information from \n'
    '    conversation memories.\n'
    '\n'
    '    # CONTEXT:\n'
    '    You have access to memories from two speakers in a conversation. These memories contain \n'
    '    timestamped information that may be relevant to answering the question. You also have \n'
    '    access to knowledge graph relations for each user, showing connections between entities, \n'
    '    concepts, and events relevant to that user.\n'
    '\n'
    '    # INSTRUCTIONS:\n'
    '    1. Carefully analyze all provided memories from both speakers\n'
    '    2. Pay special attention to the timestamps to determine the answer\n'
    '    3. If the question asks about a specific event or fact, look for direct evidence in the \n'
    '       memories\n'
    '    4. If the memories contain contradictory information, prioritize the most recent memory\n'
    '    5. If there is a question about time references (like "last year", "two months ago", \n'
    '       etc.), calculate the actual date based on the memory timestamp. For example, if a \n'
    '       memory from 4 May 2022 mentions "went to India last year," then the trip occurred \n'
    '       in 2021.\n'
    '    6. Always convert relative time references to specific dates, months, or years. For \n'
    '       example, convert "last year" to "2022" or "two months ago" to "March 2023" based \n'
    '       on the memory timestamp. Ignore the reference while answering the question.\n'
    '    7. Focus only on the content of the memories from both speakers. Do not confuse \n'
    '       character names mentioned in memories with the actual users who created those \n'
    '       memories.\n'
    '    8. The answer should be less than 5-6 words.\n'
    "    9. Use the knowledge graph relations to understand the user's knowledge network and \n"
    "       identify important relationships between entities in the user's world.\n"
    '\n'
    '    # APPROACH (Think step by step):\n'
    '    1. First, examine all memories that contain information related to the question\n'
    '    2. Examine the timestamps and content of these memories carefully\n'
    '    3. Look for explicit mentions of dates, times, locations, or events that answer the \n'
    '       question\n'
    '    4. If the answer requires calculation (e.g., converting relative time references), \n'
    '       show your work\n'
    "    5. Analyze the knowledge graph relations to understand the user's knowledge context\n"
    '    6. Formulate a precise, concise answer based solely on the evidence in the memories\n'
    '    7. Double-check that your answer directly addresses the question asked\n'
    '    8. Ensure your final answer is specific and avoids vague time references\n'
    '\n'
)
MEMORY_BLOCK = "    Memories:\n\n    {memories}\n\n    Question: {question}\n\n    Answer:\n    "
SPEAKER_HEAD = "Memories for user "
SPEAKER_BLOCK = "    {memories}\n\n    Question: {question}\n\n    Answer:\n    "
SOURCE = "mem0ai/mem0 evaluation/prompts.py {} (one system message, evaluation/src/memzero/search.py)"


def speaker_memories(sections: list[tuple[str, list[str]]]) -> str:
    """Each speaker's memories as the source's ANSWER_PROMPT shows them: ``Memories for user NAME:``
    then the JSON list (``json.dumps(indent=4)``) of ``"timestamp: memory"`` strings, sections
    separated as in the template (evaluation/src/memzero/search.py ``answer_question``)."""
    return "\n\n    ".join(f"{SPEAKER_HEAD}{name}:\n\n    {json.dumps(items, indent=4)}" for name, items in sections)


def _render(instructions: str):
    def user(question: Question, context: str, speakers: list[str]) -> str:
        block = SPEAKER_BLOCK if context.startswith(SPEAKER_HEAD) else MEMORY_BLOCK
        return instructions + block.format(memories=context, question=question_text(question))
    return user


PROMPT = AnswerPrompt(
    name="mem0", version="mem0-v1", source=SOURCE.format("ANSWER_PROMPT"),
    user=_render(ANSWER_INSTRUCTIONS), instruction=lambda q: _render(ANSWER_INSTRUCTIONS)(q, "", []),
    role="system", adversarial_form=ADVERSARIAL_FORM, max_new_tokens=128,
    notes="per-speaker sections when the context is speaker_memories' (memory.stores=per_speaker), "
          "else one Memories: block with the system's context; 128 new tokens")

GRAPH_PROMPT = AnswerPrompt(
    name="mem0g", version="mem0g-v1", source=SOURCE.format("ANSWER_PROMPT_GRAPH"),
    user=_render(ANSWER_INSTRUCTIONS_GRAPH), instruction=lambda q: _render(ANSWER_INSTRUCTIONS_GRAPH)(q, "", []),
    role="system", adversarial_form=ADVERSARIAL_FORM, max_new_tokens=128,
    notes="one Memories: block with the system's context, relations included as the system renders them")
