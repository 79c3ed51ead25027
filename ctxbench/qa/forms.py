"""LoCoMo's question-answering prompt, as the LoCoMo reference code writes them (``qa_prompt=locomo``).

The answer prompt a run uses is chosen with ``qa_prompt=`` from the registry in :mod:`ctxbench.qa`
(``locomo`` is this module's rendering, byte for byte; the question forms and option mapping below
are shared by the other prompts).

From snap-research/locomo ``task_eval/evaluate_gpts.py`` (single-question mode, no system
prompt — one user message):

- the conversation is introduced by ``CONV_START_PROMPT`` and rendered session by session as
  ``DATE: <date>\\nCONVERSATION:\\n<speaker> said, "<text>"\\n...`` (:func:`ctxbench.core.render.render_history`);
- every question gets ``QA_PROMPT`` (short phrase, exact words from the context);
- temporal questions (category 2) get the hint " Use DATE of CONVERSATION to answer with an
  approximate date.";
- adversarial questions (category 5) become a two-option choice between "Not mentioned in the
  conversation" and the adversarial answer, asked with ``QA_PROMPT_CAT_5``; a reply of "a", "b",
  "(a)" or "(b)" is mapped back to the option's text (:func:`postprocess`). The reference draws
  the option order with ``random.random()``; here it is a stable hash of the question id, so
  every system sees the same order and reruns are identical.

Questions that are not LoCoMo's (PwC, Pile) use the plain form (context, then the question), and
multiple-choice questions (DialSim) list their options. Systems that carry the context themselves
(memory slots, compressed KV) use :func:`qa_instruction`, the same text without the context.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import replace

from ctxbench.data.categories import ADVERSARIAL_GOLD as NOT_MENTIONED
from ctxbench.data.categories import question_category as category_name
from ctxbench.core.types import Question

# Verbatim from the reference (including its "wriiten").
CONV_START_PROMPT = ("Below is a conversation between two people: {} and {}. The conversation takes place "
                     "over multiple days and the date of each conversation is wriiten at the beginning of "
                     "the conversation.\n\n")
QA_PROMPT = ("\nBased on the above context, write an answer in the form of a short phrase for the following "
             "question. Answer with exact words from the context whenever possible.\n\nQuestion: {} Short answer:\n")
QA_PROMPT_CAT_5 = "\nBased on the above context, answer the following question.\n\nQuestion: {} Short answer:\n"
TEMPORAL_HINT = " Use DATE of CONVERSATION to answer with an approximate date."
ADVERSARIAL_FORM = " Select the correct answer: (a) {} (b) {}. "
LOCOMO_NAMES = {"multi-hop", "temporal", "open-domain", "single-hop", "adversarial"}
OPTION_LETTERS = "ABCDEFGHIJ"


def prompt_style(question: Question) -> str:
    """'locomo', 'choice' (options given) or 'plain'; ``question.meta['prompt_style']`` overrides."""
    style = question.meta.get("prompt_style") if question.meta else None
    if style:
        return str(style)
    if category_name(question) in LOCOMO_NAMES:
        return "locomo"
    return "choice" if question.options else "plain"


GOLD_META = ("outputs", "evidence_sessions", "abstention", "retrieval_gold")  # question.meta keys a system is not told under protocol_pure
DATE_FORM = "(Current date: {date}) {question}"


def question_date(question: Question) -> str:
    """The date the question is asked, as the dataset writes it (LongMemEval's ``question_date``), or ""."""
    date = (question.meta or {}).get("question_date")
    return date.strip() if isinstance(date, str) else ""


def without_gold(question: Question) -> Question:
    """The question as a system may see it under ``protocol_pure=true``: no gold answer, category,
    adversarial distractor or evidence. Its prompt form (LoCoMo's, options listed, plain) is kept, but
    nothing in it is chosen by category: no temporal hint, no adversarial two-option form (the distractor
    is gold), A-Mem's single ``k`` and its plain prompt, LoCoMo's ``QA_PROMPT`` for every question; no
    expected strings (``meta["outputs"]`` of ``dataset=ruler``: its answer prefix stays, it is the prompt's);
    no LongMemEval evidence sessions or abstention flag. The question's date (``meta["question_date"]``) is
    kept: it is part of the question as asked."""
    meta = {k: v for k, v in (question.meta or {}).items() if k not in GOLD_META}
    meta["prompt_style"] = prompt_style(question)
    return replace(question, answer="", category=0, category_name="", evidence=[], adversarial_answer=None,
                   meta=meta)


def adversarial_options(question: Question) -> dict[str, str]:
    """The two options {'a': ..., 'b': ...} in a stable order drawn from the question id ({} if no distractor)."""
    wrong = question.adversarial_answer if question.adversarial_answer not in (None, "") else question.answer
    wrong = str(wrong)
    if not wrong.strip() or wrong == NOT_MENTIONED:
        return {}
    if hashlib.md5(question.id.encode()).digest()[0] < 128:
        return {"a": NOT_MENTIONED, "b": wrong}
    return {"a": wrong, "b": NOT_MENTIONED}


def question_text(question: Question, dated: bool = True) -> str:
    """The question as the model reads it (temporal hint, adversarial choice, options), after the date it
    is asked when the dataset gives one (:data:`DATE_FORM`; every answer prompt words its question with
    this; ``dated=False`` for a prompt that shows the date on a line of its own, ``qa_prompt=longmemeval``)."""
    text = _question_text(question)
    return with_date(question, text) if dated else text


def with_date(question: Question, text: str) -> str:
    """``text`` (the question as some prompt words it) after the question's date, when it has one."""
    date = question_date(question)
    return DATE_FORM.format(date=date, question=text) if date else text


def _question_text(question: Question) -> str:
    style = prompt_style(question)
    if style == "locomo":
        cat = category_name(question)
        if cat == "temporal":
            return question.question + TEMPORAL_HINT
        if cat == "adversarial":
            opts = adversarial_options(question)
            if not opts:  # no distractor to offer: ask the question alone
                return question.question
            return question.question + ADVERSARIAL_FORM.format(opts["a"], opts["b"])
        return question.question
    if style == "choice" and question.options:
        opts = " ".join(f"({OPTION_LETTERS[i]}) {o}" for i, o in enumerate(question.options))
        return f"{question.question} Options: {opts}. Answer with one option."
    return question.question


def qa_instruction(question: Question) -> str:
    """The question part of the prompt (no context): what follows the context."""
    if prompt_style(question) != "locomo":
        return "\n" + question_text(question) + "\n"
    template = QA_PROMPT_CAT_5 if category_name(question) == "adversarial" else QA_PROMPT
    return template.format(question_text(question))


def conversation_intro(speakers: list[str]) -> str:
    if len(speakers) >= 2:
        return CONV_START_PROMPT.format(speakers[0], speakers[1])
    return ""


def qa_prompt(question: Question, context: str, speakers: list[str] | None = None) -> str:
    """One user message: [conversation intro] + context + "\\n\\n" + question instruction."""
    intro = conversation_intro(speakers or []) if context else ""
    if not context:
        return qa_instruction(question).lstrip("\n")
    return intro + context + "\n\n" + qa_instruction(question)


def qa_messages(question: Question, context: str, speakers: list[str] | None = None,
                system: str | None = None) -> list[dict[str, str]]:
    """Chat messages for :func:`qa_prompt`; no system message unless given (as the reference)."""
    msgs = [{"role": "system", "content": system}] if system else []
    return msgs + [{"role": "user", "content": qa_prompt(question, context, speakers)}]


def memory_messages(context: str, question: Question | str) -> list[dict[str, str]]:
    """Answer messages for a memory system: retrieved memories as the context, then the question.

    Pass the :class:`Question` (not its text) so temporal and adversarial questions get their forms.
    """
    if isinstance(question, str):
        question = Question(id="", question=question, answer="", category_name="single-hop")
    return qa_messages(question, context)


def _option_reply(low: str, letters: str) -> str | None:
    """The option letter a reply names, if the whole reply is one: 'a', '(a)', 'a)', 'a.', '(a).'."""
    m = re.fullmatch(r"\(?\s*([a-z])\s*[).:]?\.?", low)
    return m.group(1) if m and m.group(1) in letters else None


def postprocess(question: Question, text: str) -> str:
    """Clean a raw reply, once, in the evaluator: strip, and map an option letter to its option text.

    LoCoMo's adversarial two-option form: a reply that *is* an option letter ('a', '(a)', 'b.')
    becomes that option's text (the reference maps 'a'/'(a)' the same way; its length test — any
    1 or 3 character reply — also rewrote short real answers such as "Yes"). Idempotent:
    ``postprocess(q, postprocess(q, x)) == postprocess(q, x)``, because a reply equal to an
    option's text (checked first) is kept as it is, whatever its length.
    """
    pred = text.strip()
    low = pred.lower()
    style = prompt_style(question)
    if style == "locomo" and category_name(question) == "adversarial":
        options = list(adversarial_options(question).values())
    elif style == "choice" and question.options:
        options = [str(o) for o in question.options]
    else:
        return pred
    if not options:
        return pred
    for opt in options:
        if low == opt.strip().lower():
            return opt
    letters = OPTION_LETTERS.lower()
    letter = _option_reply(low, letters[:len(options)])
    return options[letters.index(letter)] if letter else pred
