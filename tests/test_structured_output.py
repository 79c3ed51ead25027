"""Structured output: schemas, strict reading, enforced decoding (hf grammar, openai json_schema),
truncation never parsed, retries only when they change something, counts per phase, prompt fitting."""
from __future__ import annotations

import json
from collections import Counter

import pytest
from omegaconf import OmegaConf

from ctxbench.llm import schema as S
from ctxbench.llm.base import ChatResult
from ctxbench.llm.cache import CachedLLM
from ctxbench.llm.fit import MARK, fit_messages
from ctxbench.memory.stores.structured import StructuredCaller, output_counts
from ctxbench.metrics.structured import merge_reports, report_line, structured_report
from tests.scripted_llm import ScriptedLLM
from tests.test_llm_cache import cached_openai
from tests.test_llm_failures import reply, server  # noqa: F401 - the fixture
from ctxbench.config.compose import option_config

FACTS = S.obj(facts=S.items(S.text(40, 3), 2))
PICK = S.obj(id=S.enum(["0", "1", "2"]))
GO = [{"role": "user", "content": "go"}]


# ---- reading a reply ------------------------------------------------------------------------------

def test_load_json_allows_a_fence_or_prose_counted_and_tries_one_bracket():
    kinds = []
    assert S.load_json('```json\n{"a": 1}\n```', kinds) == {"a": 1} and kinds == ["fence"]
    kinds = []
    assert S.load_json('Sure: {"a": 1} bye', kinds) == {"a": 1} and kinds == ["prose"]
    # a cut reply whose string holds a bracket: the old extractor parsed the inner {"x": 1}
    with pytest.raises(S.SchemaError, match="does not parse"):
        S.load_json('{"facts": ["he said {\\"x\\": 1}')
    with pytest.raises(S.SchemaError, match="no JSON"):
        S.load_json("nothing here")


def test_validate_enforces_bounds_and_enums():
    assert S.parse_reply('{"facts": ["abc"]}', FACTS) == {"facts": ["abc"]}
    for bad in ('{"facts": ["a", "b", "c"]}', '{"facts": ["' + "x" * 41 + '"]}', '{"facts": ["ok!"], "more": 1}',
                '{"facts": [3]}'):
        with pytest.raises(S.SchemaError):
            S.parse_reply(bad, FACTS)
    with pytest.raises(S.SchemaError, match="is not one of"):
        S.parse_reply('{"id": "7"}', PICK)  # an id that was not shown
    assert S.enum([3, 1, 3]) == {"type": "integer", "enum": [3, 1]}


# ---- the caller: outcomes, retries, counts ---------------------------------------------------------

def results(*rs):
    return ScriptedLLM(list(rs))


def test_truncated_reply_is_never_parsed_and_retried_with_a_bigger_budget():
    cut = ChatResult('{"facts": ["abc"]}', 5, 8, truncated=True)  # parseable, but cut: never used
    llm = results(cut, ChatResult('{"facts": ["abc"]}', 5, 8, truncated=True))
    counts = Counter()
    assert StructuredCaller(llm, retries=1, counts=counts)(GO, FACTS, kind="extract", max_new_tokens=64) is None
    assert [c["max_new_tokens"] for c in llm.calls] == [64, 128]  # the retry changed the budget
    assert [c["messages"] for c in llm.calls] == [GO, GO]
    rep = structured_report(counts)["construction"]
    assert (rep["calls"], rep["valid"], rep["truncated"], rep["retried"]) == (1, 0, 1, 1)


def test_invalid_reply_is_retried_with_the_error_and_identical_failures_stop():
    llm = results("not json", '{"facts": ["abc"]}')
    counts = Counter()
    call = StructuredCaller(llm, retries=3, counts=counts)
    assert call(GO, FACTS, kind="extract") == {"facts": ["abc"]}
    assert "Invalid" in llm.calls[1]["messages"][-1]["content"]  # the retry tells the model what was wrong
    same = results("nope", "nope", "nope", "nope")
    assert StructuredCaller(same, retries=3, counts=counts)(GO, FACTS, kind="extract") is None
    assert len(same.calls) == 2  # the feedback changed nothing: no third identical attempt
    rep = structured_report(counts)["construction"]
    assert (rep["calls"], rep["valid"], rep["invalid"], rep["retried"]) == (2, 1, 1, 2)


def test_backend_failure_is_not_retried_and_counted_apart():
    llm = ScriptedLLM(["x"], fail_on={0})
    counts = Counter()
    assert StructuredCaller(llm, retries=2, counts=counts)(GO, FACTS, kind="extract") is None
    assert len(llm.calls) == 1
    out = output_counts(counts)
    assert out["structured_calls"] == 1 and out["invalid_outputs"] == 0
    assert out["structured_output"]["construction"]["failed"] == 1


def test_counts_per_phase_and_kind_merge_and_line():
    counts = Counter()
    call = StructuredCaller(results('{"id": "1"}', '{"id": "2"}', "bad", "bad"), retries=1, counts=counts)
    call(GO, PICK, kind="update")
    call(GO, PICK, kind="lookup", phase="answer")
    call(GO, PICK, kind="lookup", phase="answer")
    rep = structured_report(counts)
    assert rep["construction"]["by_kind"]["update"]["valid"] == 1
    assert rep["answer"]["calls"] == 2 and rep["answer"]["invalid"] == 1
    both = merge_reports([rep, rep])
    assert both["answer"]["calls"] == 4 and both["construction"]["by_kind"]["update"]["calls"] == 2
    assert report_line(both) == "structured 4/6 valid (0 truncated, 2 invalid, 0 failed, 2 retried)"


def test_schema_reaches_the_backend_and_the_cache_keeps_flags(tmp_path):
    inner = ScriptedLLM([ChatResult('{"id": "0"}', 4, 3, truncated=True, constrained=True)])
    llm = CachedLLM(inner, tmp_path / "c.sqlite", backend="scripted")
    llm.chat(GO, schema=PICK)
    assert inner.calls[0]["schema"] == PICK
    again = llm.chat(GO, schema=PICK)
    assert again.cached and again.truncated and again.constrained


# ---- llm=hf: grammar-constrained decoding (tiny random model: valid only because it is enforced) ----

@pytest.fixture(scope="module")
def tiny_hf():
    from ctxbench.llm.hf import HFChatLLM

    return HFChatLLM(option_config("llm", {"name": "hf", "model": "tiny", "context_window": 512, "batch_size": 2}))


def test_hf_random_model_replies_valid_json_under_the_schema_batched(tiny_hf):
    schema = S.obj(facts=S.items(S.text(12, 2), 2), pick=S.enum(["a", "b"]))
    batch = [GO, [{"role": "user", "content": "a longer prompt than the first one"}], GO]
    rs = tiny_hf.chat_batch(batch, max_new_tokens=120, schema=schema)
    for r in rs:
        assert r.constrained and not r.truncated
        assert S.parse_reply(r.text, schema)
    free = tiny_hf.chat(GO, max_new_tokens=40)
    with pytest.raises(S.SchemaError):
        S.parse_reply(free.text, schema)  # the same model, unconstrained: no JSON at all


def test_hf_reply_cut_at_max_new_tokens_is_marked_truncated(tiny_hf):
    r = tiny_hf.chat(GO, max_new_tokens=4, schema=FACTS)
    assert r.truncated and r.completion_tokens == 4
    counts = Counter()
    assert StructuredCaller(tiny_hf, retries=0, counts=counts)(GO, FACTS, kind="x", max_new_tokens=4) is None
    assert structured_report(counts)["construction"]["truncated"] == 1


def test_hf_constrained_false_turns_enforcement_off():
    from ctxbench.llm.hf import HFChatLLM

    llm = HFChatLLM(option_config("llm", {"name": "hf", "model": "tiny", "constrained": False}))
    r = llm.chat(GO, max_new_tokens=8, schema=FACTS)
    assert not r.constrained and "constrained" not in llm.cache_id


# ---- prompt fitting -------------------------------------------------------------------------------

def test_fit_keeps_the_system_message_and_cuts_the_middle():
    system = {"role": "system", "content": "Extract facts. Reply with JSON."}
    user = {"role": "user", "content": "HEAD instructions. " + "filler word " * 400 + "TAIL question?"}

    def measure(msgs):
        return sum(len(m["content"].split()) for m in msgs)

    fitted, cut = fit_messages([system, user], 100, measure, lambda t: len(t.split()))
    assert cut and measure(fitted) <= 100 and fitted[0] == system
    body = fitted[1]["content"]
    assert body.startswith("HEAD instructions.") and body.endswith("TAIL question?") and MARK in body
    assert fit_messages([system, user], 10_000, measure, lambda t: len(t.split())) == ([system, user], False)


def test_hf_over_long_prompt_keeps_its_system_prompt(tiny_hf):
    msgs = [{"role": "system", "content": "SYSTEM-RULES"}, {"role": "user", "content": "q " * 600 + "LAST"}]
    before = tiny_hf.truncated_calls
    r = tiny_hf.chat(msgs, max_new_tokens=8)
    assert r.prompt_tokens <= 512 - 8 and tiny_hf.truncated_calls == before + 1
    fitted, _ = fit_messages(msgs, 504, lambda m: len(tiny_hf.encode_chat(m)), tiny_hf.count_tokens)
    assert fitted[0]["content"] == "SYSTEM-RULES" and fitted[1]["content"].endswith("LAST")


def test_openai_finish_reason_length_is_truncated_and_counted(server, tmp_path):  # noqa: F811
    cut = json.dumps({"choices": [{"message": {"content": '{"facts": ["ab'}, "finish_reason": "length"}],
                      "usage": {"prompt_tokens": 3, "completion_tokens": 9}}).encode()
    s = server([(200, cut), (200, reply('{"facts": ["abc"]}'))])
    llm = cached_openai(s.url, tmp_path / "c.sqlite")
    counts = Counter()
    assert StructuredCaller(llm, retries=1, counts=counts)(GO, FACTS, kind="x", max_new_tokens=16) == {"facts": ["abc"]}
    assert [p["body"]["max_tokens"] for p in s.posts] == [16, 32]
    assert s.posts[0]["body"]["response_format"]["json_schema"]["schema"] == FACTS
    rep = structured_report(counts)["construction"]
    assert (rep["valid"], rep["retried"], rep["truncated"]) == (1, 1, 0)


# ---- results: cost.structured_output, results.md --------------------------------------------------

def test_cost_and_results_md_carry_the_structured_counts():
    from ctxbench.metrics.cost import aggregate_cost
    from ctxbench.runs.results import structured_table

    counts = Counter()
    StructuredCaller(results('{"id": "1"}', "bad", "bad"), retries=1, counts=counts)(GO, PICK, kind="update")
    StructuredCaller(results("bad", "bad"), retries=1, counts=counts)(GO, PICK, kind="update")
    out = output_counts(counts)

    def rec(h, outputs):
        return {"history_id": h, "usage": {}, "construction": {}, "outputs": outputs, "answer_seconds": 0.1}

    # records carry cumulative counts per history: the last record of each history is the one summed
    records = [rec("a", {}), rec("a", out), rec("b", out)]
    got = aggregate_cost(records)["structured_output"]["construction"]
    assert (got["calls"], got["valid"], got["invalid"], got["retried"]) == (4, 2, 2, 2)
    table = "\n".join(structured_table(aggregate_cost(records)["structured_output"]))
    assert "## Structured output" in table and "| construction | update | 4 | 2 | 2 | 0 | 0 | 2 | 0 | 0 |" in table


def test_cost_adds_each_questions_own_counts_to_its_historys_construction_counts():
    """ctxbench-cost-4 records: ``outputs`` is the question's own (answer phase), ``construction.outputs``
    the history's (once); the history's total is their sum, whatever order the answers completed in."""
    from ctxbench.data.errors import DataError
    from ctxbench.metrics.cost import aggregate_cost, history_outputs
    from ctxbench.metrics.health import run_health

    built, asked = Counter(), Counter()
    StructuredCaller(results('{"id": "1"}'), retries=0, counts=built)(GO, PICK, kind="update")
    StructuredCaller(results("bad"), retries=0, counts=asked)(GO, PICK, kind="query", phase="answer")
    one, own = output_counts(built), output_counts(asked)

    def rec(h, outputs, construction):
        return {"history_id": h, "usage": {}, "construction": {"outputs": construction}, "outputs": outputs,
                "answer_seconds": 0.1}

    records = [rec("a", own, one), rec("a", own, one), rec("a", own, one), rec("b", {}, one)]
    per = history_outputs(records)
    assert (per["a"]["structured_calls"], per["a"]["invalid_outputs"]) == (4, 3)  # 1 built + 3 asked, 3 bad
    assert (per["b"]["structured_calls"], per["b"]["invalid_outputs"]) == (1, 0)
    rep = aggregate_cost(records[::-1])["structured_output"]
    assert rep["construction"]["calls"] == 2 and rep["answer"]["calls"] == 3 and rep["answer"]["invalid"] == 3
    assert run_health(records, 0.5)["invalid_outputs"] == 3 and run_health(records, 0.5)["structured_calls"] == 5
    # an older cumulative record in the same history cannot be added up: refused, naming the history
    old = {"history_id": "a", "usage": {}, "construction": {}, "outputs": own}
    with pytest.raises(DataError, match="history 'a' mixes per-question output counts with cumulative"):
        history_outputs(records + [old])


def test_hf_reply_keys_come_in_the_declared_order(tiny_hf):
    from ctxbench.memory.prompts.memgpt import call_schema

    r = tiny_hf.chat(GO, max_new_tokens=200, schema=call_schema(20))
    assert r.text.startswith('{"function": "'), r.text  # the function is chosen before its arguments
    assert list(S.parse_reply(r.text, call_schema(20))) == ["function", "args"]
