"""``logger=wandb`` for eval, score and report, in offline mode, read back from the files wandb wrote: the
summary, the per-category and samples tables, one group per sweep, the board's plot, and no secret."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.conftest import run_cli

pytest.importorskip("wandb")

from tests.wandb_offline import offline_runs  # noqa: E402

KEY = "sk-test-DoNotLeak-wandb-0123456789abcdef"
ENV = {"CTXBENCH_CACHE": os.environ.get("CTXBENCH_CACHE", "/tmp/cbcache"), "OMP_NUM_THREADS": "1",
       "WANDB_MODE": "offline", "WANDB_SILENT": "true"}


def reply(body: dict) -> str:
    """Answers "14 April 2024" to every question; the judge says CORRECT only about the half marathon."""
    text = " ".join(str(m.get("content")) for m in body.get("messages") or [])
    if "CORRECT" in text and "WRONG" in text:  # the mem0 judge prompt
        return json.dumps({"label": "CORRECT" if "half marathon" in text else "WRONG"})
    return "14 April 2024"


def eval_args(url: str, run: Path, *extra: str) -> list[str]:
    return ["eval", "memory=full_context", "dataset=locomo_sample", "llm=openai", "llm.model=loopback",
            f"llm.base_url={url}", "llm.api_key_env=OPENAI_API_KEY", "llm.cache=false", "llm.context_window=4096",
            "progress=false", "limit=5", "metrics=[f1,llm_judge]", "logger=wandb", f"hydra.run.dir={run}", *extra]


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def all_bytes(root: Path) -> bytes:
    return b"\n".join(p.read_bytes() for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def test_eval_offline_writes_summary_both_tables_and_no_secret(tmp_path):
    from ctxbench.bench.loopback_server import serve

    run, wdir = tmp_path / "run", tmp_path / "wandb_dir"
    with serve(delay_s=0.0, slots=2, reply=reply) as server:
        p = run_cli(*eval_args(server.base_url, run, "log_samples=true", "logger.tags=[t1]", f"+llm.api_key={KEY}"),
                    env={**ENV, "WANDB_DIR": str(wdir), "OPENAI_API_KEY": KEY})
    assert p.returncode == 0, p.stderr[-3000:]
    results = json.loads((run / "results.json").read_text())
    preds = lines(run / "predictions.jsonl")
    [wb] = offline_runs(wdir)
    assert wb.run_id == (run / "wandb_id").read_text().strip()
    assert wb.run.job_type == "eval" and wb.run.display_name == "run" and not wb.run.run_group
    # config: the run's, redacted as for train
    assert wb.config["llm"]["api_key"] == "***" and wb.config["llm"]["api_key_env"] == "OPENAI_API_KEY"
    assert wb.config["limit"] == 5 and wb.config["memory"]["name"] == "full_context"
    # summary: overall and per-category metrics with their stderr, cost and health
    s, ov = wb.summary, results["overall"]
    assert s["overall/n"] == 5 and s["overall/f1"] == ov["f1"] and s["overall/llm_judge"] == ov["llm_judge"]
    assert s["overall/f1_stderr"] == ov["f1_stderr"] and s["overall/llm_judge_stderr"] == ov["llm_judge_stderr"]
    assert 0 < ov["llm_judge"] < 1  # the judge said CORRECT once, WRONG otherwise
    for cat, block in results["by_category"].items():
        assert s[f"by_category/{cat}/n"] == block["n"] and s[f"by_category/{cat}/f1"] == block["f1"]
    assert s["cost/held_per_question/total"] == results["cost"]["held_per_question"]["total"] > 0
    assert s["cost/tokens_per_question/judging"] == results["cost"]["tokens_per_question"]["judging"]
    assert s["health/status"] == "ok" and s["health/failed_calls"] == 0 and s["health/warnings"] == 1
    assert s["system"] == results["system"] == "memory=full_context" and s["dataset"] == "locomo_sample"
    # the per-category table: one row per category, then overall
    cats = wb.table("by_category")
    assert [r["category"] for r in cats] == [*results["by_category"], "overall"]
    assert cats[-1]["n"] == 5 and cats[-1]["llm_judge_stderr"] == ov["llm_judge_stderr"]
    assert {r["category"]: r["f1"] for r in cats[:-1]} == {c: b["f1"] for c, b in results["by_category"].items()}
    # the samples table: one row per question, as predictions.jsonl has it
    rows = wb.table("samples")
    assert [r["id"] for r in rows] == [r["id"] for r in preds]
    for row, rec in zip(rows, preds):
        assert row["question"] == rec["question"] and row["prediction"] == rec["prediction"] == "14 April 2024"
        assert row["category"] == rec["category_name"] and row["f1"] == pytest.approx(rec["f1"])
        assert row["gold"] == (None if rec.get("answer") is None else str(rec["answer"]))
        assert row["llm_judge_label"] == ("CORRECT" if "half marathon" in rec["question"] else "WRONG")
        u = rec["usage"]
        assert row["context_tokens"] == u["held_text"] + u["held_kv_slots"] + u["held_soft_slots"] > 0
        assert row["failed"] is False
    assert rows[0]["f1"] == 1.0 and rows[0]["gold"] == "14 April 2024"  # the half marathon's date
    # nothing secret under WANDB_DIR, nor in the run folder
    assert KEY.encode() not in all_bytes(wdir)
    assert KEY.encode() not in all_bytes(run)
    assert KEY not in p.stdout + p.stderr


def test_rerun_resumes_the_same_wandb_run_from_the_run_folder(tmp_path):
    """Without WANDB_DIR the files go under <run>/wandb/ (links of wandb's own included): a rerun of the folder is
    not refused for them and logs to the same wandb run id; without log_samples there is no samples table."""
    from ctxbench.bench.loopback_server import serve

    run = tmp_path / "run"
    with serve(delay_s=0.0, slots=2, reply=reply) as server:
        first = run_cli(*eval_args(server.base_url, run, "limit=2"), env={**ENV, "OPENAI_API_KEY": KEY})
        assert first.returncode == 0, first.stderr[-3000:]
        again = run_cli(*eval_args(server.base_url, run, "limit=3"), env={**ENV, "OPENAI_API_KEY": KEY})
        assert again.returncode == 0, again.stderr[-3000:]
    runs = offline_runs(run)
    assert len(runs) == 2 and runs[0].run_id == runs[1].run_id == (run / "wandb_id").read_text().strip()
    assert runs[0].summary["overall/n"] == 2 and runs[1].summary["overall/n"] == 3
    assert not list((runs[1].folder / "files" / "media" / "table").glob("samples_*"))


def test_score_sweep_is_one_group_and_report_sweep_joins_it(tmp_path):
    """``score -m``: every job in the sweep folder's group; ``report sweep=DIR logger=wandb``: the sweep's
    table and plot, in the same group."""
    pred = tmp_path / "theirs.jsonl"
    pred.write_text("".join(json.dumps(r) + "\n" for r in (
        {"id": "a", "prediction": "hiking", "answer": "hiking", "category": 1, "question": "What?"},
        {"id": "b", "prediction": "in 2022", "answer": 2022, "category": 2, "question": "When?"},
        {"id": "c", "prediction": "no", "answer": "yes", "category": 4, "question": "Did she?"})))
    sweep = tmp_path / "sweeps" / "s1"
    wdir = tmp_path / "wandb_dir"
    env = {**ENV, "WANDB_DIR": str(wdir)}
    p = run_cli("score", "-m", f"predictions={pred}", "metrics=[f1],[f1,bleu1]", "logger=wandb", "log_samples=true",
                "progress=false", f"hydra.sweep.dir={sweep}", env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    jobs = offline_runs(wdir)
    assert len(jobs) == 2 and len({j.run_id for j in jobs}) == 2
    assert {j.run.run_group for j in jobs} == {"sweeps/s1"} and {j.run.job_type for j in jobs} == {"score"}
    assert sorted(j.run.display_name for j in jobs) == ["0: metrics=[f1]", "1: metrics=[f1,bleu1]"]
    for j in jobs:
        assert j.summary["overall/n"] == 3 and j.summary["overall/f1"] == pytest.approx((1 + 2 / 3 + 0) / 3, abs=1e-4)
        assert [r["id"] for r in j.table("samples")] == ["a", "b", "c"]
        assert [r["gold"] for r in j.table("samples")] == ["hiking", "2022", "yes"]
    r = run_cli("report", f"sweep={sweep}", "logger=wandb", env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    [rep] = [x for x in offline_runs(wdir) if x.run.job_type == "report-sweep"]
    assert rep.run.run_group == "sweeps/s1" and (sweep / "sweep.wandb_id").read_text().strip() == rep.run_id
    assert len(rep.table("sweep")) == 2 and rep.images("plot")


def test_board_report_logs_its_rows_and_pareto_plot(tmp_path, monkeypatch):
    """log_report of a board: the rows as a table, the Pareto PNG as an image (read back offline)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from omegaconf import OmegaConf

    from ctxbench.runs.wandb_log import log_report

    png = tmp_path / "board.png"
    plt.figure(figsize=(2, 2))
    plt.plot([1, 2], [0.1, 0.3])
    plt.savefig(png)
    plt.close("all")
    cfg = OmegaConf.create({"logger": {"name": "wandb", "project": "ctxbench", "entity": None, "mode": "offline",
                                       "tags": [], "group": None}})
    rows = [{"row": "rag", "f1": 0.3, "f1_stderr": 0.02, "held": 812.0, "guards": ["held_context"]},
            {"row": "full_context", "f1": 0.5, "f1_stderr": None, "held": None, "guards": []}]
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_DIR", raising=False)
    log_report(cfg, "board", "locomo_all", tmp_path / "locomo_all.wandb_id", rows, png)
    [wb] = offline_runs(tmp_path)
    assert wb.run.job_type == "report-board" and wb.run_id == (tmp_path / "locomo_all.wandb_id").read_text()
    got = wb.table("board")
    assert [r["row"] for r in got] == ["rag", "full_context"] and got[0]["guards"] == '["held_context"]'
    assert got[1]["held"] is None and got[0]["f1_stderr"] == 0.02
    assert wb.images("pareto") and wb.summary["rows"] == 2


def test_logger_wandb_without_the_package_is_one_line(tmp_path, monkeypatch):
    pred = tmp_path / "p.jsonl"
    pred.write_text(json.dumps({"id": "a", "prediction": "x", "answer": "x", "category": 1}) + "\n")
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` raises ImportError
    p = run_cli("score", f"predictions={pred}", "logger=wandb", f"hydra.run.dir={tmp_path / 'o'}", env=ENV)
    assert p.returncode == 2
    assert p.stderr.strip().splitlines()[-1].endswith(
        "logger=wandb needs the wandb package: pip install wandb (or use logger=none)")
    assert not (tmp_path / "o" / "results.json").exists()  # refused before any work


def test_summary_and_rows_of_a_failed_answer():
    from ctxbench.runs.wandb_log import held_tokens, judge_label, sample_rows, summary_values

    results = {"metrics": {"f1": {}, "llm_judge": {}}, "overall": {"n": 2, "f1": 0.5, "f1_stderr": 0.5, "failed_n": 1},
               "by_category": {"temporal": {"id": 2, "n": 2, "f1": 0.5}},
               "cost": {"version": "ctxbench-cost-5", "held_per_question": {"total": 10.0},
                        "latency_s": {"x": float("nan")}},
               "health": {"status": "failed", "warnings": [{"kind": "a"}, {"kind": "b"}]}}
    s = summary_values(results)
    assert s["overall/failed_n"] == 1 and s["by_category/temporal/f1"] == 0.5 and s["cost/latency_s/x"] is None
    assert s["health/status"] == "failed" and s["health/warnings"] == 2 and s["cost/version"] == "ctxbench-cost-5"
    recs = [{"id": 1, "category": 2, "question": "q", "answer": 7, "prediction": "7", "f1": 1.0, "llm_judge": 0.5,
             "usage": {"held_text": 3, "held_kv_slots": 4}},
            {"id": 2, "category": 2, "question": "q2", "answer": "x", "prediction": "", "failed": True}]
    rows = sample_rows(recs, results)
    assert rows[0] == {"id": "1", "category": "2", "question": "q", "gold": "7", "prediction": "7", "f1": 1.0,
                       "llm_judge": 0.5, "llm_judge_label": "mixed", "context_tokens": 7, "failed": False}
    assert rows[1]["failed"] is True and rows[1]["f1"] is None and rows[1]["llm_judge_label"] is None
    assert rows[1]["context_tokens"] is None and held_tokens({"held_text": 0}) == 0
    assert (judge_label(1.0), judge_label(0), judge_label(True)) == ("CORRECT", "WRONG", None)


def test_run_guard_does_not_enter_wandbs_own_folder(tmp_path):
    from ctxbench.runs.guard import links_inside

    (tmp_path / "wandb" / "offline-run-x" / "logs").mkdir(parents=True)
    (tmp_path / "wandb" / "offline-run-x" / "logs" / "debug-core.log").symlink_to(tmp_path / "elsewhere.log")
    assert links_inside(tmp_path) == []  # wandb's own link, in its own folder
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "wandb").symlink_to(tmp_path / "wandb")  # only the run folder's own wandb/ is skipped
    (tmp_path / "predictions.jsonl").symlink_to(tmp_path / "elsewhere.jsonl")
    assert links_inside(tmp_path) == [tmp_path / "predictions.jsonl", tmp_path / "sub" / "wandb"]
    other = tmp_path / "other"
    other.mkdir()
    (other / "wandb").symlink_to(tmp_path / "wandb")  # the wandb folder itself a link: refused
    assert links_inside(other) == [other / "wandb"]
