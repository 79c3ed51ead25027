"""``python -m ctxbench view RUN [RUN_B]``: the page's content, without a browser (tests/test_view_browser.py
renders it in headless Chromium). The embedded payload parses; it has every row, the categories, the
two-run paired difference and the disagreements; nothing is fetched; secrets are scrubbed; a large run
stays a small file."""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO, run_cli
from tests.view_runs import SECRET, make_run

ENV = {"HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}


def payload(html: str) -> dict:
    m = re.search(r'<script id="payload" type="application/json">(.*?)</script>', html, re.S)
    assert m, "no embedded payload"
    return json.loads(m.group(1))


def view(*args: str) -> str:
    r = run_cli("view", *args, env=ENV)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "view: wrote" in r.stdout
    return r.stdout


def test_one_run_page_has_header_categories_rows_and_no_network(tmp_path):
    run = make_run(tmp_path / "run", n=30)
    view(str(run))
    html = (run / "view.html").read_text(encoding="utf-8")
    p = payload(html)
    (r,) = p["runs"]
    assert len(r["rows"]) == 30 and {x["id"] for x in r["rows"]} == {f"conv-0_q{i}" for i in range(30)}
    assert r["metrics"] == ["f1", "llm_judge", "llm_judge_strict"] and r["judges"] == ["llm_judge", "llm_judge_strict"]
    assert [c["category"] for c in r["categories"]][:2] == ["overall", "single-hop"]
    overall = r["categories"][0]["values"]["f1"]
    assert overall[0] == json.loads((run / "results.json").read_text())["overall"]["f1"] and overall[1] > 0  # mean, SE
    h = r["header"]
    assert h["system"] == "memory=rag" and h["qa_prompt"]["name"] == "brief" and "strict" in h["judges"]
    assert "held context is large" in h["warnings"]
    row = r["rows"][1]
    assert row["raw_prediction"].startswith("Answer:") and row["scores"]["llm_judge_strict"] in (0.0, 1.0)
    assert row["retrieved"][0]["session"] == "s1" and row["usage"]["held_text"] == 101 and "extra" not in row["usage"]
    assert len(row["context"]) == 600 and "contexts=true" in row["context_note"]  # clipped by default
    assert "pair" not in p
    assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:)?//", html, re.I)  # no external resource
    assert "http://" not in html and "https://" not in html


def test_secrets_never_reach_the_page(tmp_path):
    run = make_run(tmp_path / "run", n=5)
    view(str(run), "contexts=true")
    html = (run / "view.html").read_text(encoding="utf-8")
    assert SECRET not in html and SECRET[8:30] not in html
    p = payload(html)
    assert p["runs"][0]["header"]["llm"]["api_key"] == "***"
    assert "my key is ***" in p["runs"][0]["rows"][0]["context"]  # the whole context kept, key scrubbed


def test_two_runs_pair_and_list_disagreements_and_questions_in_one_run(tmp_path):
    ids = [f"q{i}" for i in range(40)]
    a = make_run(tmp_path / "a", ids=ids, seed=1)
    b = make_run(tmp_path / "b", ids=ids[:38] + ["extra"], seed=2, system="memory=mem0", samples=False)
    out = tmp_path / "pages" / "a_vs_b.html"
    view(str(a), str(b), f"out={out}")
    p = payload(out.read_text(encoding="utf-8"))
    pair = p["pair"]
    assert pair["only_a"] == ["q38", "q39"] and pair["only_b"] == ["extra"] and pair["n_pairs"] == 38
    ra = {r["id"]: r for r in p["runs"][0]["rows"]}
    rb = {r["id"]: r for r in p["runs"][1]["rows"]}
    f1 = next(m for m in pair["metrics"] if m["metric"] == "f1")
    diffs = [rb[i]["scores"]["f1"] - ra[i]["scores"]["f1"] for i in ids[:38]]
    assert f1["n"] == 38 and f1["delta"] == pytest.approx(sum(diffs) / 38, abs=1e-4)
    assert f1["se"] > 0 and f1["ci95"][0] <= f1["delta"] <= f1["ci95"][1]
    want = {i for i in ids[:38] if ra[i]["scores"]["llm_judge"] != rb[i]["scores"]["llm_judge"]
            or ra[i]["scores"]["llm_judge_strict"] != rb[i]["scores"]["llm_judge_strict"]
            or abs(rb[i]["scores"]["f1"] - ra[i]["scores"]["f1"]) > 0.3}
    assert want and {d["id"] for d in pair["disagree"]} == want
    assert p["runs"][1]["has_samples"] is False and "context" not in p["runs"][1]["rows"][0]


def test_a_run_without_results_or_samples_still_opens_and_a_missing_run_is_one_line(tmp_path):
    run = make_run(tmp_path / "bare", n=4, samples=False, results=False)
    view(str(run / "predictions.jsonl"))
    p = payload((run / "view.html").read_text(encoding="utf-8"))
    assert len(p["runs"][0]["rows"]) == 4 and p["runs"][0]["categories"] == []
    assert any("no results.json" in w for w in p["runs"][0]["header"]["warnings"])
    r = run_cli("view", str(tmp_path / "nope"), env=ENV)
    assert r.returncode == 2 and "nope: no such run folder" in r.stderr and r.stderr.count("\n") == 1
    r = run_cli("view", env=ENV)
    assert r.returncode == 2 and "name a run folder" in r.stderr


def test_an_imported_artifact_run_opens(tmp_path):
    """`score predictions=FILE` (the path imported artifacts take) writes a folder the viewer reads."""
    rows = [{"id": f"x{i}", "question": f"q {i}", "prediction": "blue" if i % 2 else "red", "answer": "blue",
             "category": 4} for i in range(6)]
    pred = tmp_path / "theirs.jsonl"
    pred.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = tmp_path / "scored"
    r = run_cli("score", f"predictions={pred}", "metrics=[f1]", f"hydra.run.dir={run}", env=ENV)
    assert r.returncode == 0, r.stderr[-2000:]
    view(str(run))
    p = payload((run / "view.html").read_text(encoding="utf-8"))
    assert [x["scores"]["f1"] for x in p["runs"][0]["rows"]] == [0.0, 1.0] * 3
    assert p["runs"][0]["categories"][0]["category"] == "overall"


def test_a_2000_question_run_stays_a_few_mb_and_a_200_question_run_under_one(tmp_path):
    big = make_run(tmp_path / "big", n=2000, context_chars=20_000)
    view(str(big))
    size = (big / "view.html").stat().st_size
    assert size < 5_000_000, size
    small = make_run(tmp_path / "small", n=200, context_chars=20_000)
    view(str(small))
    assert (small / "view.html").stat().st_size < 1_000_000


def test_view_imports_no_torch(tmp_path):
    run = make_run(tmp_path / "run", n=3)
    code = ("import sys; from ctxbench.__main__ import main\n"
            f"try:\n    main(['view', {str(run)!r}])\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
            "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH')")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                       env={**__import__("os").environ, **ENV, "PYTHONPATH": str(REPO)})
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().endswith("NO-TORCH")
