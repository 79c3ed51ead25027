"""The task texts: instructions, needles, questions and answer prefixes, with where each comes from.

Source: NVIDIA/RULER ``scripts/data/synthetic/constants.py`` (``TASKS[...]['template']`` and
``['answer_prefix']``), ``niah.py`` (the needle sentence, the singular wording when one value is
asked for), ``variable_tracking.py`` (the chain statements), and ``scripts/synthetic.yaml`` (each
task's arguments, :data:`TASKS`). NVIDIA/kvpress ``evaluation/benchmarks/ruler`` splits RULER's input
into context / question / answer prefix at the question (``QUESTION_PATTERNS``) and at the prefix
(``ANSWER_PATTERNS``); ctxbench keeps that split: the context (instruction + haystack) is the
history, the question text is the question, and the answer prefix starts the model's reply.
The wording is RULER's (typos and all: "most frequently appeared"), so rows line up with kvpress's.
"""
from __future__ import annotations

from dataclasses import dataclass

# ---- needle in a haystack (niah.py, constants.py TASKS['niah']) -------------------------------------
NIAH_INSTRUCTION = ("Some special magic {kind} are hidden within the following text. Make sure to memorize it. "
                    "I will quiz you about the {kind} afterwards.")
NIAH_INSTRUCTION_ONE = ("A special magic {kind} is hidden within the following text. Make sure to memorize it. "
                        "I will quiz you about the {kind} afterwards.")
NIAH_QUESTION = "What are all the special magic {kind} for {query} mentioned in the provided text?"
NIAH_QUESTION_ONE = "What is the special magic {kind} for {query} mentioned in the provided text?"
NIAH_PREFIX = " The special magic {kind} for {query} mentioned in the provided text are"
NIAH_PREFIX_ONE = " The special magic {kind} for {query} mentioned in the provided text is"
NEEDLE = "One of the special magic {kind} for {key} is: {value}."

# ---- variable tracking (variable_tracking.py, TASKS['variable_tracking']) ----------------------------
VT_INSTRUCTION = "Memorize and track the chain(s) of variable assignment hidden in the following text."
VT_QUESTION = "Question: Find all variables that are assigned the value {value} in the text above."
VT_PREFIX = (" Answer: According to the chain(s) of variable assignment in the text above, {count} variables are "
             "assigned the value {value}, they are: ")
VT_FIRST = "VAR {name} = {value}"
VT_HOP = "VAR {name} = VAR {previous}"

# ---- common words extraction (common_words_extraction.py, TASKS['common_words_extraction']) ----------
CWE_INSTRUCTION = ("Below is a numbered list of words. In these words, some appear more often than others. "
                   "Memorize the ones that appear most often.")
CWE_QUESTION = "Question: What are the 10 most common words in the above list?"
CWE_PREFIX = " Answer: The top 10 words that appear most often in the list are:"

# ---- frequent words extraction (freq_words_extraction.py, TASKS['freq_words_extraction']) ------------
FWE_INSTRUCTION = ("Read the following coded text and track the frequency of each coded word. "
                   "Find the three most frequently appeared coded words.")
FWE_QUESTION = ("Question: Do not provide any explanation. Please ignore the dots '....'. "
                "What are the three most frequently appeared words in the above coded text?")
FWE_PREFIX = " Answer: According to the coded text above, the three most frequently appeared words are:"

# ---- the noise haystack (niah.py, variable_tracking.py: type_haystack=noise) -------------------------
NOISE = ("The grass is green.", "The sky is blue.", "The sun is yellow.", "Here we go.", "There and back again.")


@dataclass(frozen=True)
class Spec:
    """One task's arguments, as RULER's ``scripts/synthetic.yaml`` sets them."""

    family: str  # niah | vt | cwe | fwe
    haystack: str = "noise"  # noise | essay | needle (niah, vt); words (cwe, fwe)
    key: str = "words"  # niah: what a needle's key is (words | numbers | uuids)
    value: str = "numbers"  # niah: what its value is
    keys: int = 1  # niah: needles with distinct keys (num_needle_k)
    values: int = 1  # niah: values per key (num_needle_v)
    queries: int = 1  # niah: keys asked for (num_needle_q)


TASKS: dict[str, Spec] = {
    "niah_single_1": Spec("niah", "noise", "words", "numbers"),
    "niah_single_2": Spec("niah", "essay", "words", "numbers"),
    "niah_single_3": Spec("niah", "essay", "words", "uuids"),
    "niah_multikey_1": Spec("niah", "essay", "words", "numbers", keys=4),
    "niah_multikey_2": Spec("niah", "needle", "words", "numbers"),
    "niah_multikey_3": Spec("niah", "needle", "uuids", "uuids"),
    "niah_multivalue": Spec("niah", "essay", "words", "numbers", values=4),
    "niah_multiquery": Spec("niah", "essay", "words", "numbers", keys=4, queries=4),
    "vt": Spec("vt", "noise"),
    "cwe": Spec("cwe", "words"),
    "fwe": Spec("fwe", "words"),
}

# RULER's answer allowance per family (constants.py tokens_to_generate), for the record (docs/ruler.md)
TOKENS_TO_GENERATE = {"niah": 128, "vt": 30, "cwe": 120, "fwe": 50}
