"""``python -m ctxbench check``: a built-in passes every check; deliberately broken systems fail the check
that is about them, with a reason a plug-in author can act on; a metric and a dataset are checked too."""
from __future__ import annotations

import inspect
import json
from typing import Any

import pytest

from ctxbench.api import Prediction, System, Usage
from ctxbench.check import check
from ctxbench.check.result import FAIL, PASS, SKIP
from tests.conftest import run_cli


def by_name(results: list) -> dict[str, Any]:
    return {r.check: r for r in results}


# ---- a built-in passes, through the CLI -------------------------------------------------------------

def test_check_passes_on_a_builtin_through_the_cli(tmp_path):
    out = tmp_path / "run"
    r = run_cli("check", "memory=full_context", "limit=6", f"hydra.run.dir={out}")
    assert r.returncode == 0, r.stderr[-2000:]
    lines = {line.split()[0]: line.split()[1] for line in r.stdout.splitlines() if line.startswith("  ")}
    assert lines == {"contract": "pass", "eval": "pass", "resume": "pass", "kill": "pass", "concurrency": "pass",
                     "protocol_pure": "pass", "usage": "pass", "estimate": "pass"}, r.stdout
    assert "memory=full_context: 8 passed, 0 failed, 0 skipped" in r.stdout
    saved = json.loads((out / "check.json").read_text())
    assert saved["target"] == "memory=full_context" and len(saved["results"]) == 8
    assert (out / "eval" / "results.json").is_file()


def test_rag_passes_with_its_store_resumed_midway(tmp_path):
    results = by_name(check("memory", "rag", checks=["contract", "eval", "resume", "usage"], limit=6,
                            out=tmp_path, settings={"granularity": "session_summary"}))
    assert all(r.status == PASS for r in results.values()), results
    assert "construction call" in results["resume"].reason  # summaries: stopped inside the construction too


def test_check_names_what_to_check(tmp_path):
    r = run_cli("check", f"hydra.run.dir={tmp_path}")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1] == ("ctxbench: error: check: name what to check: memory=NAME, "
                                                 "method=NAME, dataset=NAME or metric=NAME")


# ---- broken systems fail with a readable reason -----------------------------------------------------

class Base(System):
    """Answers with one backend call over the history's last turns."""

    def __init__(self, cfg, *, llm, embedder=None, workdir=None):
        self.cfg, self.llm, self.text = cfg, llm, ""

    def ingest(self, history):
        self.text = "\n".join(f"{t.speaker}: {t.text}" for s in history.sessions for t in s.turns[-3:])

    def ask(self, question_text: str) -> Any:
        return self.llm.chat([{"role": "user", "content": f"{self.text}\nQ: {question_text}"}],
                             max_new_tokens=self.answer_max_tokens(), phase="answer")

    def answer(self, question):
        r = self.ask(question.question)
        return Prediction(r.text, Usage())


class ReadsGold(Base):
    """Finds the dataset's own question in the evaluator's frames and answers with its gold answer."""

    def answer(self, question):
        frame = inspect.currentframe()
        while frame is not None:
            q = frame.f_locals.get("q")
            if q is not None and getattr(q, "id", None) == question.id and getattr(q, "answer", ""):
                return Prediction(str(q.answer), Usage())
            frame = frame.f_back
        return super().answer(question)


class SharedState(Base):
    """Keeps the question being answered on the instance across its backend call."""

    def answer(self, question):
        self.current = question.question
        self.ask(question.question)
        return Prediction(f"about {self.current}", Usage())


class ReturnsText(Base):
    def answer(self, question):
        return self.ask(question.question).text


class ClaimsConstruction(Base):
    """Says ingesting cost 100 calls it never made."""

    def construction_usage(self):
        return Usage(construction_prompt_tokens=5000, construction_calls=100)


class ClaimsAnswerTokens(Base):
    def answer(self, question):
        r = self.ask(question.question)
        return Prediction(r.text, Usage(answer_prompt_tokens=r.prompt_tokens + 999, answer_calls=1))


@pytest.mark.parametrize("cls,checks,failing,reason", [
    (ReadsGold, ["contract", "protocol_pure"], "protocol_pure",
     "under protocol_pure the gold answer reached the system: it is in question"),
    (SharedState, ["contract", "concurrency"], "concurrency", "records at concurrency 4 differ from concurrency 1: question"),
    (ReturnsText, ["contract", "eval"], "contract", "answer() returned str"),
    (ClaimsConstruction, ["contract", "usage"], "usage", "construction prompt tokens: the histories record 5000, the "
                                                         "backend counted 0"),
    (ClaimsAnswerTokens, ["contract", "usage"], "usage", "answer() reports usage (prompt, completion, calls) = ("),
], ids=["reads-gold", "shared-state", "returns-str", "claims-construction", "claims-answer-tokens"])
def test_a_broken_system_fails_the_check_about_it(cls, checks, failing, reason, tmp_path):
    results = by_name(check("memory", cls, checks=checks, out=tmp_path, limit=6))
    assert results[failing].status == FAIL and reason in results[failing].reason, results[failing]
    assert all(r.status == PASS for name, r in results.items() if name not in (failing, "eval")), results
    if failing == "contract":
        assert results["eval"].status == SKIP and results["eval"].reason == "the contract check failed"


def test_the_base_of_the_broken_ones_passes(tmp_path):
    results = check("memory", Base, checks=["contract", "eval", "resume", "concurrency", "protocol_pure", "usage",
                                           "estimate"], out=tmp_path, limit=6)
    assert [(r.check, r.status) for r in results] == [
        ("contract", PASS), ("eval", PASS), ("resume", PASS), ("concurrency", PASS), ("protocol_pure", PASS),
        ("usage", PASS), ("estimate", SKIP)]
    assert results[-1].reason.startswith("memory=base: Base declares no estimate_calls")


class Remembers(Base):
    """Keeps every answer it gave in a file and appends to it again on a rerun: its memory is built twice."""

    def __init__(self, cfg, *, llm, embedder=None, workdir=None):
        super().__init__(cfg, llm=llm)
        self.log = workdir / "seen.txt"
        workdir.mkdir(parents=True, exist_ok=True)

    def ingest(self, history):
        super().ingest(history)
        with self.log.open("a") as f:
            f.write(history.id + "\n")

    def answer(self, question):
        r = self.ask(question.question)
        return Prediction(r.text, Usage(memory_items=len(self.log.read_text().splitlines())))


def test_a_system_that_builds_twice_on_a_rerun_fails_resume(tmp_path):
    results = by_name(check("memory", Remembers, checks=["resume"], out=tmp_path, limit=6))
    assert results["resume"].status == FAIL
    assert "the rerun's records differ from an uninterrupted run's: question" in results["resume"].reason
    assert "memory_items 1 vs 2" in results["resume"].reason


class Borrower(Base):
    """Speaks only OpenAI: every call through the lent backend with the openai client."""

    borrows_backend = True

    def use_backend(self, lent):
        super().use_backend(lent)
        import openai

        self.client = openai.OpenAI(base_url=lent.base_url, api_key=lent.api_key, max_retries=0)

    def ingest(self, history):
        super().ingest(history)
        self.note = self.client.chat.completions.create(
            model=self.lent.model, max_tokens=16, messages=[{"role": "user", "content": f"Summarise: {self.text}"}]
        ).choices[0].message.content

    def answer(self, question):
        r = self.client.chat.completions.create(model=self.lent.model, max_tokens=16, messages=[
            {"role": "user", "content": f"{self.note}\n{self.text}\nQ: {question.question}"}])
        return Prediction(r.choices[0].message.content or "", Usage())


def test_a_system_that_borrows_the_backend_passes_through_the_lent_backend(tmp_path):
    results = by_name(check("memory", Borrower, checks=["contract", "eval", "resume", "concurrency", "protocol_pure",
                                                       "usage"], out=tmp_path, limit=6))
    assert all(r.status == PASS for r in results.values()), results
    assert results["contract"].reason.endswith("borrows_backend: ingest/answer run by the eval check")
    assert "construction 1 calls" in results["usage"].reason  # its calls over HTTP counted as its own
    # stopped between answers only: its construction calls run in the lent server, out of an in-process stop's reach
    assert "answers" in results["resume"].reason and "construction call" not in results["resume"].reason


# ---- a metric and a dataset --------------------------------------------------------------------------

class OutOfRange:
    name, version, reference = "out_of_range", "1", "a test"

    def score(self, prediction, question):
        return 2.0


def test_metric_checks(tmp_path):
    good = check("metric", "f1", out=tmp_path / "f1", limit=4)
    assert [(r.check, r.status) for r in good] == [("contract", PASS), ("eval", PASS)], good
    bad = by_name(check("metric", OutOfRange, checks=["contract"], out=tmp_path / "bad"))
    assert bad["contract"].status == FAIL and "= 2.0: expected a number in [0, 1] or None" in bad["contract"].reason


def test_dataset_checks_through_the_cli(tmp_path):
    r = run_cli("check", "dataset=locomo_sample", f"hydra.run.dir={tmp_path}")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "contract       pass" in r.stdout and "2 histories, 16 questions, unique ids" in r.stdout
    assert "eval           pass" in r.stdout


def test_unknown_check_name_is_one_line():
    from ctxbench.core.errors import ConfigError

    with pytest.raises(ConfigError, match="checks='speed': one of contract, eval"):
        check("memory", "no_context", checks=["speed"])


# ---- the pytest plugin ------------------------------------------------------------------------------

def test_pytest_plugin_fails_the_test_with_the_table(tmp_path):
    from ctxbench.check.pytest_plugin import check_system

    ok = check_system("memory", "no_context", checks=["contract", "usage"], out=tmp_path / "ok", limit=4)
    assert [r.status for r in ok] == [PASS, PASS]
    with pytest.raises(pytest.fail.Exception) as e:
        check_system("memory", ReturnsText, checks=["contract"], out=tmp_path / "bad", limit=4)
    text = str(e.value)
    assert text.startswith("check memory=ReturnsText\n  contract") and "answer() returned str" in text
    assert "1 failed" in text.splitlines()[-1]


