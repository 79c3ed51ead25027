"""A run whose LLM calls fail is not a result: failed answers count as wrong (0) in the headline and are
shown apart (``failed_n``, ``answered_only``), are re-answered on resume, and a run over
``max_failed_fraction`` exits non-zero with the counts in its last line."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from omegaconf import OmegaConf

from ctxbench.config.compose import option_config

from ctxbench.evaluation.evaluator import evaluate_samples
from ctxbench.memory.baselines import FullContext
from ctxbench.metrics.health import run_health
from ctxbench.core.types import History, Question, Sample, Session, Turn

from conftest import run_cli
from scripted_llm import ScriptedLLM


def samples() -> list[Sample]:
    h = History("h1", [Session("1", [Turn("Ann", "I moved to Paris.")], "8 May, 2023")], speakers=["Ann", "Bob"])
    return [Sample(h, [Question(f"q{i}", "Where did Ann move?", "Paris", 4, "single-hop") for i in range(4)])]


def read(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_failed_answers_count_as_wrong_and_are_answered_again(tmp_path):
    llm = ScriptedLLM("Paris", fail_on={1, 2})
    res = evaluate_samples(FullContext(option_config("memory", {"name": "full_context"}), llm=llm), samples(), tmp_path, llm=llm)
    recs = read(tmp_path / "predictions.jsonl")
    assert [r.get("failed", False) for r in recs] == [False, True, True, False]
    assert "scripted failure" in recs[1]["error"] and "f1" not in recs[1]  # a failed line keeps no scores
    # the headline counts the failures as wrong: failing on hard questions cannot raise the mean
    assert res["overall"]["n"] == 4 and res["overall"]["f1"] == 0.5 and res["overall"]["failed_n"] == 2
    assert res["by_category"]["single-hop"]["failed_n"] == 2 and res["by_category"]["single-hop"]["bleu1"] == 0.5
    assert res["answered_only"]["overall"]["n"] == 2 and res["answered_only"]["overall"]["f1"] == 1.0
    md = (tmp_path / "results.md").read_text()
    assert "Failed answers: 2 of 4" in md and "Over the answered questions alone" in md
    assert res["health"]["failed_calls"] == 2 and res["health"]["failed_questions"] == 2
    assert res["health"]["status"] == "failed"  # 2 of 4 > 0.1

    llm2 = ScriptedLLM("Paris")
    res2 = evaluate_samples(FullContext(option_config("memory", {"name": "full_context"}), llm=llm2), samples(), tmp_path, llm=llm2)
    assert len(llm2.calls) == 2  # only the two failed questions are asked again
    recs = read(tmp_path / "predictions.jsonl")
    assert [r["id"] for r in recs] == ["q0", "q1", "q2", "q3"] and not any(r.get("failed") for r in recs)
    assert res2["overall"]["n"] == 4 and res2["health"]["status"] == "ok" and res2["overall"]["failed_n"] == 0


def test_health_thresholds():
    ok = {"usage": {"answer_calls": 1, "extra": {}}, "history_id": "h", "construction": {"calls": 9},
          "outputs": {"structured_calls": 10, "invalid_outputs": 1}}
    assert run_health([ok], 0.1)["status"] == "ok"
    bad = dict(ok, outputs={"structured_calls": 10, "invalid_outputs": 5})
    h = run_health([bad], 0.1)
    assert h["status"] == "failed" and "5 of 10 structured outputs were invalid" in h["reason"]
    assert run_health([bad], 0.6)["status"] == "ok"


class _Always500(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(500)
        self.end_headers()
        self.wfile.write(b'{"error": "internal"}')

    def do_GET(self):  # noqa: N802
        self.send_response(404)
        self.end_headers()

    def log_message(self, *a):
        pass


@pytest.fixture
def broken_server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Always500)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()


def test_a_run_whose_calls_all_fail_exits_non_zero(broken_server, tmp_path):
    run = tmp_path / "run"
    p = run_cli("eval", "memory=no_context", "dataset=locomo_sample", "llm=openai", f"llm.base_url={broken_server}",
                "llm.api_key_env=null", "llm.max_retries=0", "llm.cache=false", "limit=3", "progress=false",
                f"hydra.run.dir={run}", timeout=300)
    assert p.returncode != 0, p.stdout + p.stderr
    assert "failed calls 3/3" in p.stdout  # the summary line always carries the counts
    err = [ln for ln in p.stderr.splitlines() if ln.startswith("ctxbench: error:")]
    assert len(err) == 1 and "3 of 3 LLM calls failed" in err[0] and "Traceback" not in p.stderr
    saved = json.loads((run / "results.json").read_text())
    assert saved["health"]["status"] == "failed" and saved["overall"]["n"] == 3  # every one failed: scored 0
    assert saved["overall"]["failed_n"] == 3 and saved["overall"]["f1"] == 0.0 and saved["answered_only"]["overall"]["n"] == 0
