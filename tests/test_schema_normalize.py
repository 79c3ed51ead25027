"""Structured replies (issue 44): harmless variants a faithful model writes are normalised before
validation and counted by kind; what changes meaning is rejected; a request identical to one that gave
an unusable reply is never sent again (``retries_saved``); Mem0 stores facts written ``Name: fact``."""
from __future__ import annotations

import json
from collections import Counter

import pytest

from ctxbench.llm import schema as S
from ctxbench.llm.base import ChatResult
from ctxbench.llm.cache import CachedLLM
from ctxbench.memory.prompts import mem0 as P
from ctxbench.memory.stores.structured import StructuredCaller, output_counts
from ctxbench.metrics.structured import report_line, structured_report
from tests.scripted_llm import ScriptedLLM

FACTS = P.facts_schema(["Caroline", "Melanie"], 3)
DECIDE = P.decision_schema(["0", "1"])
COUNT = S.obj(n=S.integer(0, 9), level=S.enum(["low", "high"]))
PEOPLE = S.obj(people=S.items(S.obj(name=S.text(20)), 3))
GO = [{"role": "user", "content": "go"}]

ACCEPTED = [  # (schema, reply, value, kinds)
    (FACTS, '{"facts": ["Caroline: went to an LGBTQ support group"]}',
     {"facts": ["Caroline went to an LGBTQ support group"]}, ["name_colon"]),
    (FACTS, '{"facts": ["  \\"Melanie paints sunsets at the lake\\" "]}',
     {"facts": ["Melanie paints sunsets at the lake"]}, ["whitespace", "quotes"]),
    (FACTS, '```json\n["Caroline likes hiking a lot"]\n```', {"facts": ["Caroline likes hiking a lot"]},
     ["fence", "bare_list"]),
    (FACTS, 'Here you go: {"facts": []} Hope it helps.', {"facts": []}, ["prose"]),
    (COUNT, '{"n": "3", "level": " High "}', {"n": 3, "level": "high"},
     ["int_string", "whitespace", "enum_case"]),
    (DECIDE, '{"event": "delete", "id": 1}', {"event": "DELETE", "id": "1"}, ["enum_case"]),
    (PEOPLE, '{"people": {"name": "Ann"}}', {"people": [{"name": "Ann"}]}, ["single_object"]),
]
REJECTED = [  # meaning-changing: never rewritten
    (COUNT, '{"n": "three", "level": "low"}'),  # a word is not a number
    (COUNT, '{"n": "3.5", "level": "low"}'),
    (COUNT, '{"n": 3}'),  # a required field is never invented
    (FACTS, '{"facts": ["Zed: is not one of the speakers here"]}'),  # not a name the pattern lists
    (FACTS, '{"facts": ["a", "b", "c", "d"]}'),  # items are never dropped to fit
    (S.obj(x=S.enum(["Low", "LOW"])), '{"x": "low"}'),  # two enum values match: ambiguous
    (S.obj(name=S.text(40)), '["Ann"]'),  # no list field to wrap into
    (P.decision_schema(["0"]), '{"event": "ADD", "text": "Caroline likes tea"}'),  # an extra key is not dropped
]


@pytest.mark.parametrize("schema,reply,value,kinds", ACCEPTED)
def test_each_harmless_variant_is_accepted_and_counted(schema, reply, value, kinds):
    assert S.read_reply(reply, schema) == (value, kinds)
    counts = Counter()
    assert StructuredCaller(ScriptedLLM([reply]), counts=counts)(GO, schema, kind="x") == value
    rep = structured_report(counts)["construction"]
    assert (rep["valid"], rep["normalised"], rep["unenforced"]) == (1, 1, 0)
    assert rep["normalised_by"] == {k: 1 for k in kinds} == rep["by_kind"]["x"]["normalised_by"]


@pytest.mark.parametrize("schema,reply", REJECTED)
def test_a_meaning_changing_variant_is_rejected(schema, reply):
    with pytest.raises(S.SchemaError):
        S.parse_reply(reply, schema)


def test_a_valid_reply_is_not_normalised_and_the_error_names_what_was_written():
    assert S.read_reply('{"facts": ["Caroline likes tea a lot"]}', FACTS)[1] == []
    with pytest.raises(S.SchemaError, match="'three' is not of type 'integer'"):
        S.parse_reply('{"n": "three", "level": "high"}', COUNT)


def test_a_constrained_reply_that_needed_normalising_is_counted_unenforced():
    counts = Counter()
    llm = ScriptedLLM([ChatResult('{"facts": ["Caroline: likes tea a lot"]}', 3, 3, constrained=True)])
    assert StructuredCaller(llm, counts=counts)(GO, FACTS, kind="extract")
    out = output_counts(counts)
    assert out["invalid_outputs"] == 0 and out["structured_output"]["construction"]["unenforced"] == 1
    line = report_line(out["structured_output"])
    assert line == "structured 1/1 valid (0 truncated, 0 invalid, 0 failed, 0 retried, 1 normalised, 1 unenforced)"


# ---- no identical retries ----------------------------------------------------------------------------

def test_a_request_that_gave_an_invalid_reply_is_not_sent_again_in_one_construction():
    llm = ScriptedLLM(["nope", "still nope", '{"facts": []}'])
    counts = Counter()
    call = StructuredCaller(llm, retries=3, counts=counts)
    assert call(GO, FACTS, kind="extract") is None  # the request, then its feedback once: both invalid
    assert len(llm.calls) == 2 and "Invalid:" in llm.calls[1]["messages"][-1]["content"]
    assert call(GO, FACTS, kind="extract") is None  # the same request again: not sent, ends as it did
    assert len(llm.calls) == 2 and call.last_error == "no JSON object or array in the reply"
    rep = structured_report(counts)["construction"]
    # one saved after the failed feedback (retries=3 allowed more), one for the repeated request
    assert (rep["calls"], rep["invalid"], rep["retried"], rep["retries_saved"]) == (2, 2, 1, 2)
    assert call(GO, FACTS, kind="extract", max_new_tokens=512) == {"facts": []}  # another budget: sent
    call.forget()  # the next history starts afresh
    assert call(GO, FACTS, kind="extract") is None and len(llm.calls) == 5  # sent again, with its feedback


def test_answers_keep_to_the_retry_rules_only():
    llm = ScriptedLLM(["nope", "nope", "nope", "nope"])
    call = StructuredCaller(llm, retries=1)
    call(GO, FACTS, kind="q", phase="answer")
    call(GO, FACTS, kind="q", phase="answer")
    assert len(llm.calls) == 4  # each answer asks for itself (independent of the others' order)


def test_a_truncated_reply_grows_its_budget_once_and_the_feedback_is_given_once():
    cut = ChatResult('{"facts": [', 5, 8, truncated=True)
    llm = ScriptedLLM([cut, "bad", "bad"])
    counts = Counter()
    assert StructuredCaller(llm, retries=5, counts=counts)(GO, FACTS, kind="x", max_new_tokens=64) is None
    assert [c["max_new_tokens"] for c in llm.calls] == [64, 128, 128]
    rep = structured_report(counts)["construction"]
    assert (rep["retried"], rep["retries_saved"], rep["invalid"]) == (2, 1, 1)


def test_a_rerun_replays_the_cache_and_makes_the_same_decisions(tmp_path):
    def run():
        inner = ScriptedLLM(["nope", "nope"])
        llm = CachedLLM(inner, tmp_path / "c.sqlite", backend="scripted")
        counts = Counter()
        call = StructuredCaller(llm, retries=1, counts=counts)
        call(GO, FACTS, kind="extract")
        call(GO, FACTS, kind="extract")
        return inner, llm, counts

    first, llm1, c1 = run()
    again, llm2, c2 = run()
    assert len(first.calls) == 2 and again.calls == []  # the invalid replies were cached: nothing re-sent
    assert c1 == c2  # the same outcomes and retries_saved
    # the repeated request is neither sent nor replayed: the meter counts the two calls made once
    assert llm1.meter.total("construction").calls == llm2.meter.total("construction").calls == 2
    assert llm2.meter.total("construction").cached == 2


# ---- Mem0: replies written "Name: fact" -----------------------------------------------------------------

def test_mem0_stores_facts_written_name_colon(tmp_path):
    from ctxbench.config.compose import option_config
    from ctxbench.core.types import History, Session, Turn
    from ctxbench.memory.mem0 import Mem0
    from memory_scripted import BowEmbedder, ScriptedLLM as Responder, prompt_text

    def respond(messages, phase):
        text = prompt_text(messages)
        if "New messages (" in text:
            new = text.split("New messages (")[-1]
            facts = {"support group": ["Caroline: went to an LGBTQ support group"],
                     "painted": ["Melanie: painted a lake sunrise last year"]}
            return json.dumps({"facts": next(v for k, v in facts.items() if k in new)})
        if "NEW FACT" in text:
            return json.dumps({"event": "ADD"})
        return "A summary."

    h = History(id="h", speakers=["Caroline", "Melanie"], sessions=[Session("s1", [
        Turn("Caroline", "I went to a support group yesterday.", "D1:1"), Turn("Melanie", "Wow!", "D1:2"),
        Turn("Melanie", "I painted a lake sunrise last year.", "D1:3"), Turn("Caroline", "Nice.", "D1:4")],
        "8 May, 2023")])
    cfg = option_config("memory", {"name": "mem0", "k": 5, "m": 4, "s": 10, "progress": False})
    mem = Mem0(cfg, llm=Responder(respond), embedder=BowEmbedder(), workdir=tmp_path)
    mem.ingest(h)
    stored = {r.text: r.meta["speaker"] for r in mem.store.records("h", "fact")}
    assert stored == {"Caroline went to an LGBTQ support group": "Caroline",
                      "Melanie painted a lake sunrise last year": "Melanie"}
    extract = mem.output_counts()["structured_output"]["construction"]["by_kind"]["extract"]
    assert (extract["calls"], extract["valid"], extract["normalised_by"]) == (2, 2, {"name_colon": 2})
