"""The lent backend (ctxbench/llm/lend/, ctxbench/evaluation/lend.py): a system that only speaks OpenAI gets
the run's backend on 127.0.0.1, and its calls are counted as a built-in's own calls through ``self.llm``.

The borrowers here are built-in memory systems whose ``llm`` and ``embedder`` are swapped, when they are lent
the backend, for the ``openai`` client (tests/lent_client.py): the very calls the built-in makes, over HTTP.
"""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler
from typing import Any

import httpx
import jsonschema
import openai
import pytest

from ctxbench.bench.scripted_llm import ScriptedChatModel
from ctxbench.config.compose import option_config
from ctxbench.core import registry
from ctxbench.core.lent import LentBackend
from ctxbench.core.secrets import scrub_text
from ctxbench.core.system import System
from ctxbench.core.types import History, Prediction, Question, Usage
from ctxbench.evaluation.evaluator import HistorySystems, run_system
from ctxbench.evaluation.lend import Lender
from ctxbench.llm.base import ChatResult, LLMUnavailable
from ctxbench.llm.cache import CachedLLM
from ctxbench.llm.shared import SharedLLM

from lent_client import borrowing, client
from local_http import LocalServer
from memory_scripted import BowEmbedder
from test_eval_concurrency import SlowLLM, samples
from test_eval_concurrency import comparable as _comparable


def comparable(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records without wall-clock fields (a store's search time too)."""
    out = _comparable(records)
    for r in out:
        r["usage"].get("extra", {}).pop("search_seconds", None)
    return out


def run(name: str, tmp, *, lent: bool, concurrency: int = 1, llm: Any = None, n_hist: int = 3, n_q: int = 3,
        received: list[str] | None = None, folder: Any = None, log_samples: bool = False):
    """Memory system ``name`` (a borrower when ``lent``) through the evaluator: (records, the shared llm, lender stats)."""
    cfg = option_config("memory", {"name": name, "progress": False})
    cls = registry.get("memory", name)
    cls = borrowing(cls, received) if lent else cls
    llm = llm or SharedLLM(ScriptedChatModel())
    embedder = BowEmbedder() if registry.get("memory", name).needs_embedder else None
    folder = folder or tmp / f"{name}-{'lent' if lent else 'own'}-{concurrency}"
    systems = HistorySystems(lambda hid: cls(cfg, llm=llm, embedder=embedder, workdir=folder / "stores" / hid),
                             embedder=embedder)
    seen: dict[str, Any] = {}
    build = systems.make

    def make(hid: str):  # note the server each borrower was lent
        system = build(hid)
        seen.setdefault("systems", []).append(system)
        return system

    systems.make = make
    records = run_system(systems, samples(n_hist, n_q), folder, llm=llm, progress=False, concurrency=concurrency,
                         log_samples=log_samples)
    seen["record"] = systems.lent_record
    return records, llm, seen


def cached(tmp, name: str) -> SharedLLM:
    return SharedLLM(CachedLLM(ScriptedChatModel(), tmp / f"{name}.sqlite", backend="scripted"))


def logged(folder) -> tuple[list, dict]:
    """log_samples' files: each answer's calls by question id, each history's construction calls in order."""
    answers = {r["id"]: r["calls"] for r in map(json.loads, (folder / "samples.jsonl").read_text().splitlines())}
    built: dict[str, list] = {}
    path = folder / "construction_calls.jsonl"  # none when no construction call was made
    for c in map(json.loads, path.read_text().splitlines() if path.exists() else []):
        built.setdefault(c.pop("history_id"), []).append(c)
    return sorted(answers.items()), built


@pytest.mark.parametrize("name", ["full_context", "mem0"])
def test_a_borrower_records_the_builtins_answers_and_tokens_per_phase(tmp_path, name):
    own, own_llm, _ = run(name, tmp_path, lent=False, llm=cached(tmp_path, "own"), log_samples=True)
    one, one_llm, seen = run(name, tmp_path, lent=True, llm=cached(tmp_path, "one"), log_samples=True)
    four, four_llm, _ = run(name, tmp_path, lent=True, concurrency=4, llm=cached(tmp_path, "four"), log_samples=True)
    assert all(isinstance(s.llm.lent, LentBackend) for s in seen["systems"])  # every call went over HTTP
    assert comparable(one) == comparable(own) and comparable(four) == comparable(own)
    snap = own_llm.meter.snapshot()
    assert one_llm.meter.snapshot() == snap == four_llm.meter.snapshot()  # per phase: calls, tokens, sources
    assert snap["answer"]["calls"] == 9 and (name == "full_context" or snap["construction"]["calls"] > 0)
    assert all(r["usage"]["answer_calls"] == 1 and r["usage"]["answer_prompt_tokens"] > 0 for r in four)
    mine = logged(tmp_path / f"{name}-own-1")  # log_samples: the same calls in the same tasks
    assert logged(tmp_path / f"{name}-lent-1") == mine == logged(tmp_path / f"{name}-lent-4")
    requests = seen["record"]["requests"]
    assert requests["chat"] == sum(p["calls"] for p in snap.values()) and requests["refused"] == 0
    assert (requests["embeddings"] > 0) == (name == "mem0")  # the run's embedder, over /v1/embeddings too
    if name == "mem0":  # structured construction calls, their outcomes counted as the built-in's
        assert all(r["construction"]["calls"] > 0 and r["construction"]["outputs"] for r in four)
        assert sum(len(calls) for calls in mine[1].values()) == snap["construction"]["calls"]
    again, again_llm, _ = run(name, tmp_path, lent=True, concurrency=4, llm=cached(tmp_path, "one"),
                              folder=tmp_path / "again")  # the lent calls were stored in the call cache
    assert all(p["cached"] == p["calls"] for p in again_llm.meter.snapshot().values())

    def uncached(records):  # what was served by the call cache is recorded (answers' and constructions' own)
        out = comparable(records)
        for r in out:
            r["usage"]["extra"].pop("cached_calls", None)
            (r.get("construction") or {}).pop("cached_calls", None)
        return out
    assert uncached(again) == uncached(own)


def test_the_server_lives_for_the_run_and_refuses_what_it_cannot_serve(tmp_path):
    lents: list[LentBackend] = []

    class Checks(System):
        borrows_backend = True

        def ingest(self, history: History) -> None:
            lent = self.lent
            lents.append(lent)
            c = client(lent)
            assert [m.id for m in c.models.list().data] == ["scripted"]  # no embedder in this run
            with pytest.raises(openai.AuthenticationError) as e:
                client(LentBackend(lent.base_url, "sk-lent-not-one-of-ours", lent.model)).models.list()
            assert e.value.body["code"] == "invalid_api_key"
            with pytest.raises(openai.NotFoundError, match="not served here"):
                c.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
            for bad, field in [({"messages": []}, "messages"), ({"messages": [{"role": "tool", "content": "x"}]},
                                                                 "messages[0].role"),
                               ({"messages": [{"role": "user", "content": "x"}], "n": 2}, "n"),
                               ({"messages": [{"role": "user", "content": "x"}], "stream": True}, "stream"),
                               ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, "max_tokens"),
                               ({"messages": [{"role": "user", "content": "x"}],
                                 "response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
                                "response_format.json_schema.schema")]:
                r = httpx.post(f"{lent.base_url}/chat/completions", json={"model": lent.model, **bad},
                               headers={"Authorization": f"Bearer {lent.api_key}"})
                assert r.status_code == 400 and r.json()["error"]["param"] == field, (bad, r.text)
            r = httpx.post(f"{lent.base_url}/embeddings", json={"model": "x", "input": "hi"},
                           headers={"Authorization": f"Bearer {lent.api_key}"})
            assert r.status_code == 404 and "no embedder" in r.json()["error"]["message"]
            assert httpx.get(f"{lent.base_url}/nowhere").json()["error"]["code"] == "not_found"
            reply = c.chat.completions.create(model=lent.model, messages=[{"role": "user", "content": "hello there"}],
                                              max_tokens=8)
            assert reply.usage.prompt_tokens == 2 and reply.model_extra["ctxbench"]["phase"] == "construction"

        def answer(self, question: Question) -> Prediction:
            return Prediction("x", Usage())

    llm = SharedLLM(ScriptedChatModel())
    records = run_system(HistorySystems(lambda hid: Checks()), samples(2, 1), tmp_path, llm=llm, progress=False)
    assert len(records) == 2 and len({lent.api_key for lent in lents}) == 2  # a token of its own per instance
    assert all(lent.api_key.startswith("sk-lent-") and scrub_text(lent.api_key) == "***" for lent in lents)
    assert llm.meter.total("construction").calls == 2 and llm.meter.total("answer").calls == 0
    with pytest.raises(httpx.ConnectError):  # stopped with the run
        httpx.get(f"{lents[0].base_url}/models", headers={"Authorization": f"Bearer {lents[0].api_key}"})


class Asker(System):
    """One construction call per history and one answer call per question, through ``self.llm`` or, lent, over HTTP."""

    def __init__(self, llm: Any, lent: bool, schema: dict | None = None, max_tokens: int = 16):
        self.llm, self.borrows_backend, self.schema, self.max_tokens = llm, lent, schema, max_tokens

    def ask(self, text: str) -> ChatResult:
        if not self.borrows_backend:
            structured = {"json_mode": True, "schema": self.schema} if self.schema else {}
            return self.llm.chat([{"role": "user", "content": text}], max_new_tokens=self.max_tokens,
                                 phase="construction" if text.startswith("build") else "answer", **structured)
        self.client = getattr(self, "client", None) or client(self.lent)
        fmt = {"response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": self.schema}}
               } if self.schema else {}
        try:
            r = self.client.chat.completions.create(model=self.lent.model, max_tokens=self.max_tokens,
                                                    messages=[{"role": "user", "content": text}], **fmt)
        except openai.APIStatusError as e:
            assert e.response.headers.get("x-should-retry") == "false"  # ctxbench's backend retried already
            return ChatResult("", 0, 0, failed=True)
        return ChatResult(r.choices[0].message.content, r.usage.prompt_tokens, r.usage.completion_tokens)

    def ingest(self, history: History) -> None:
        self.ask(f"build {history.id}")

    def answer(self, question: Question) -> Prediction:
        return Prediction(self.ask(question.question).text, Usage())


class Failing(SlowLLM):
    """SlowLLM whose calls about person 2 fail (a counted failure, as a backend reports one)."""

    def chat(self, messages, **kw) -> ChatResult:
        if "person 2 " in messages[-1]["content"]:
            r = ChatResult("", 0, 0, failed=True, error="upstream said no")
            self.meter.add(kw.get("phase", "answer"), r)
            return r
        return super().chat(messages, **kw)


def test_failed_calls_are_counted_as_the_builtins_and_calls_overlap_across_histories(tmp_path):
    out = {}
    for lent in (False, True):
        llm = SharedLLM(Failing(delay=0.1))
        recs = run_system(HistorySystems(lambda hid: Asker(llm, lent)), samples(4, 3), tmp_path / str(lent),
                          llm=llm, progress=False, concurrency=4)
        out[lent] = (comparable(recs), llm.meter.snapshot(), llm.inner.peak)
    assert out[True][0] == out[False][0] and out[True][1] == out[False][1]
    failed = [r for r in out[True][0] if r.get("failed")]
    assert len(failed) == 4 and all(r["usage"]["extra"]["failed_calls"] == 1 for r in failed)
    assert out[True][1]["answer"]["failures"] == 4
    assert out[True][2] > 1  # borrowers of different histories had calls in flight at once


def test_a_call_the_borrower_gives_up_on_ends_before_its_task_and_is_counted(tmp_path):
    """A client that times out leaves the call running with its worker's lock released: the task waits for it."""
    class Impatient(Asker):
        def ask(self, text: str) -> ChatResult:
            self.client = getattr(self, "client", None) or client(self.lent).with_options(timeout=0.05)
            try:
                self.client.chat.completions.create(model=self.lent.model, max_tokens=self.max_tokens,
                                                    messages=[{"role": "user", "content": text}])
            except openai.APITimeoutError:
                return ChatResult("", 0, 0, failed=True)
            raise AssertionError("the call should have outlasted the client's timeout")

    llm = SharedLLM(SlowLLM(delay=0.4))
    recs = run_system(HistorySystems(lambda hid: Impatient(llm, True)), samples(3, 2), tmp_path, llm=llm,
                      progress=False, concurrency=3)
    assert len(recs) == 6 and all(r["usage"]["answer_calls"] == 1 for r in recs)  # each counted in its own task
    assert llm.meter.total("answer").calls == 6 and llm.meter.total("construction").calls == 3


def test_a_backend_that_cannot_be_used_stops_the_run_as_for_a_builtin(tmp_path):
    class Down(SlowLLM):
        def chat(self, messages, **kw):
            raise LLMUnavailable("llm=openai: the server at http://127.0.0.1:9/v1 refused the key")

    built: list[Asker] = []

    def make(llm: Any, lent: bool) -> Asker:
        built.append(Asker(llm, lent))
        return built[-1]

    for lent in (False, True):
        llm = SharedLLM(Down())
        with pytest.raises(LLMUnavailable, match="refused the key"):
            run_system(HistorySystems(lambda hid: make(llm, lent)), samples(2, 1), tmp_path / str(lent), llm=llm,
                       progress=False, concurrency=2)
    lent = built[-1].lent
    with pytest.raises(httpx.ConnectError):  # the server stopped with the failed run
        httpx.get(f"{lent.base_url}/models", headers={"Authorization": f"Bearer {lent.api_key}"})


def tiny_hf(batch_size: int = 1) -> SharedLLM:
    from ctxbench.llm.hf import HFChatLLM

    return SharedLLM(HFChatLLM(option_config("llm", {"name": "hf", "model": "tiny", "context_window": 1024,
                                                     "prefix_cache": False, "cache": False,
                                                     "batch_size": batch_size})))


def test_batched_hf_calls_from_borrowers_finish_and_equal_the_builtins(tmp_path):
    """Borrowers block in HTTP while holding the workers' lock: the call batcher must not wait for them."""
    own, _, _ = run("full_context", tmp_path, lent=False, llm=tiny_hf(4), concurrency=4, n_hist=2, n_q=3)
    many = tiny_hf(4)  # (batched replies equal one-by-one replies: tests/test_eval_concurrency.py)
    lent, _, _ = run("full_context", tmp_path, lent=True, llm=many, concurrency=4, n_hist=2, n_q=3)
    assert max(many.batch_sizes) > 1  # the two histories' answers were generated together
    assert comparable(lent) == comparable(own)
    out = {}
    for lent in (False, True):  # structured calls (grammar-constrained), batched from 3 histories
        llm = tiny_hf(4)
        recs = run_system(HistorySystems(lambda hid: Asker(llm, lent, SCHEMA, max_tokens=96)), samples(3, 2),
                          tmp_path / f"asker-{lent}", llm=llm, progress=False, concurrency=4)
        out[lent] = comparable(recs), llm.meter.snapshot()
        assert max(llm.batch_sizes) > 1
    assert out[True] == out[False]
    assert all(jsonschema.validate(json.loads(r["raw_prediction"]), SCHEMA) is None for r in out[True][0])


SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 12},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120},
                                           "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3}},
          "required": ["name", "age", "tags"], "additionalProperties": False}


def json_schema_reply(llm: Any) -> tuple[dict[str, Any], Any]:
    """A json_schema request to the lent ``llm`` from a borrower outside any task: (the value, the completion)."""
    class One(System):
        borrows_backend = True

        def ingest(self, history): ...

        def answer(self, question): ...

    with Lender(llm) as lender:
        system = One()
        lender.lend(system)
        reply = client(system.lent).chat.completions.create(
            model=system.lent.model, max_tokens=96, temperature=0,
            messages=[{"role": "user", "content": "Describe Ann, 31, as JSON."}],
            response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}})
        assert lender.record() == {"borrowers": 1, "outside_tasks": 1,  # no task ran: the backend's total only
                                   "requests": {"chat": 1, "embeddings": 0, "models": 0, "refused": 0}}
    value = json.loads(reply.choices[0].message.content)
    jsonschema.validate(value, SCHEMA)
    return value, reply


def test_a_json_schema_request_to_lent_hf_is_decoded_under_its_grammar():
    llm = tiny_hf()
    value, reply = json_schema_reply(llm)  # a random 2-layer model: valid only because the grammar says so
    assert reply.choices[0].finish_reason == "stop" and reply.model_extra["ctxbench"]["constrained"] is True
    assert llm.meter.total("construction").calls == 1  # a call outside any task: the backend's total


@pytest.mark.slow  # loads the packaged SmolLM2 (~10-20 s on 2 cores)
def test_a_json_schema_request_to_lent_smollm2_returns_valid_json():
    from ctxbench.llm.hf import HFChatLLM

    llm = SharedLLM(HFChatLLM(option_config("llm", {"name": "hf", "model": "smollm2_135m", "context_window": 2048,
                                                    "cache": False})))
    t0 = time.perf_counter()
    value, reply = json_schema_reply(llm)
    print(f"SmolLM2 json_schema via the lent backend: {value} in {time.perf_counter() - t0:.1f} s")
    assert reply.model_extra["ctxbench"]["constrained"] is True and value["name"]


class Upstream(LocalServer):
    """A fake OpenAI server that records the Authorization it gets and (a leak) echoes it in every reply."""

    def __init__(self) -> None:
        self.auth: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def reply(self, obj: dict) -> None:
                data = json.dumps(obj).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self.reply({"object": "list", "data": [{"id": "upstream-model", "object": "model"}]})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                auth = self.headers.get("Authorization", "")
                server.auth.append(auth)
                words = body["messages"][-1]["content"].split()
                text = " ".join(words[-3:]) + f" (you sent {auth})"
                n = sum(len(m["content"].split()) for m in body["messages"])
                self.reply({"id": "x", "object": "chat.completion", "model": "upstream-model",
                            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                         "finish_reason": "stop"}],
                            "usage": {"prompt_tokens": n, "completion_tokens": len(text.split()),
                                      "total_tokens": n + len(text.split())}})

        self.serve(Handler)


def test_llm_openai_forwards_the_users_key_which_the_borrower_never_sees(tmp_path, monkeypatch):
    key = "sk-user-real-key-0123456789abcdef"
    monkeypatch.setenv("LEND_TEST_API_KEY", key)
    up = Upstream()
    try:
        def openai_llm() -> SharedLLM:
            return SharedLLM(registry.build("llm", option_config("llm", {
                "name": "openai", "model": "upstream-model", "base_url": up.url, "api_key_env": "LEND_TEST_API_KEY",
                "cache": False, "context_window": 4096, "max_retries": 0})))

        own, own_llm, _ = run("full_context", tmp_path, lent=False, llm=openai_llm(), n_hist=2, n_q=2)
        received: list[str] = []
        lent, lent_llm, seen = run("full_context", tmp_path, lent=True, llm=openai_llm(), n_hist=2, n_q=2,
                                   concurrency=2, received=received)
    finally:
        up.close()
    assert up.auth and set(up.auth) == {f"Bearer {key}"}  # ctxbench sent the user's key upstream, and only it
    tokens = {s.lent.api_key for s in seen["systems"]}
    assert not any(t in a for t in tokens for a in up.auth)  # no lent token went upstream
    seen_text = "\n".join(received)
    assert len(received) > 4 and key not in seen_text and "***" in seen_text  # the echoed key came back scrubbed
    assert comparable(lent) == comparable(own)
    assert lent_llm.meter.snapshot() == own_llm.meter.snapshot()
    assert all(r["usage"]["answer_calls"] == 1 and key not in json.dumps(r) for r in lent)


def test_eval_on_the_command_line_lends_the_backend_to_a_borrower(tmp_path, monkeypatch):
    """``eval memory=full_context`` with full_context swapped for its borrowing twin: what the CLI writes is the same."""
    from ctxbench.bench.loopback_server import serve
    from ctxbench.core.registry import _REGISTRY
    from ctxbench.memory.baselines import FullContext
    from tests.conftest import run_cli

    def eval_(url: str, out) -> dict:
        p = run_cli("eval", "memory=full_context", "dataset=locomo_sample", "limit=6", "llm=openai",
                    "llm.model=loopback", f"llm.base_url={url}", "llm.api_key_env=null", "llm.cache=false",
                    "llm.context_window=4096", "concurrency=2", "log_samples=true", "progress=false",
                    f"hydra.run.dir={out}")
        assert p.returncode == 0, p.stderr[-3000:]
        return json.loads((out / "results.json").read_text())

    with serve(delay_s=0.0, slots=4) as server:
        own = eval_(server.base_url, tmp_path / "own")
        monkeypatch.setitem(_REGISTRY["memory"], "full_context", borrowing(FullContext))
        lent = eval_(server.base_url, tmp_path / "lent")
        assert server.requests == 12
    assert lent["llm"]["meter"] == own["llm"]["meter"] and lent["overall"] == own["overall"]
    assert lent["concurrency"]["answers"] == "in dataset order"  # a borrower answers a history's questions in turn
    assert "lent_backend" not in own and lent["lent_backend"] == {
        "borrowers": 1, "requests": {"chat": 6, "embeddings": 0, "models": 0, "refused": 0}, "outside_tasks": 0}
    preds = [[(r["id"], r["raw_prediction"], r["usage"]["answer_prompt_tokens"]) for r in
              map(json.loads, (tmp_path / side / "predictions.jsonl").read_text().splitlines())]
             for side in ("own", "lent")]
    assert sorted(preds[0]) == sorted(preds[1]) and len(preds[0]) == 6
