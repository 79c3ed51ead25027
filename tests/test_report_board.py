"""report table=locomo_all: a board of every system on the same questions, with its Pareto plot."""
from __future__ import annotations

import json
from pathlib import Path

import yaml

from ctxbench.report import board as B
from ctxbench.report.tables import read_yaml, table_report
from tests.board_runs import eval_config, results_extra, row_system
from tests.conftest import run_cli


def board_run(d: Path, experiment: str, f1: float, tokens: float, ids: list[str], kv_bytes: float = 0.0,
              items: float = 0.0, judge: float | None = None, held: float | None = -1.0) -> Path:
    """A run folder; ``held`` = held context per question (-1: ``tokens * 0.8``; None: a pre-cost-4 run)."""
    (d / ".hydra").mkdir(parents=True)
    (d / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([f"experiment={experiment}"]))
    system = row_system(experiment)
    config = eval_config(system, experiment=experiment)
    (d / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
    overall = {"n": len(ids), "f1": f1, "f1_stderr": 0.01, "bleu1": f1 / 2, "bleu1_stderr": 0.005,
               "rougeL": f1, "rougeL_stderr": 0.01}
    if judge is not None:
        overall.update(llm_judge=judge, llm_judge_stderr=0.02)
    cost = {"tokens_per_question": {"answer_prompt": tokens * 0.9, "answer_completion": tokens * 0.1,
                                    "construction_prompt_amortised": 10.0, "construction_completion_amortised": 2.0},
            "memory_per_history": {"items": items, "tokens": items * 20, "kv_bytes": kv_bytes},
            "latency_s": {"answer": {"p50": 1.5}, "ingest": {"total": 30.0}}}
    if held is not None:
        total = tokens * 0.8 if held == -1.0 else held
        cost["held_per_question"] = {"axis": "text tokens + KV slots + soft slots", "text": total, "kv_slots": 0,
                                     "soft_slots": 0, "total": total, "kv_bytes": kv_bytes}
    res = {"overall": overall, "by_category": {}, "cost": cost, "health": {"status": "ok"},
           "created": "2026-12-01T00:00:00Z", "config": config, **results_extra(system)}
    (d / "results.json").write_text(json.dumps(res))
    (d / "predictions.jsonl").write_text("".join(json.dumps({"id": i}) + "\n" for i in ids))
    return d


def test_pareto_front_keeps_only_undominated_points():
    pts = [(100.0, 0.2), (50.0, 0.1), (200.0, 0.15), (50.0, 0.05), (400.0, 0.3)]
    assert B.pareto(pts) == [0, 1, 4]  # 2 is beaten by 0 (fewer tokens, more F1); 3 by 1 (same tokens, more F1)
    assert B.pareto([(1.0, 0.5), (1.0, 0.5)]) == [0, 1]  # ties dominate nothing


def test_board_reads_every_row_marks_other_questions_and_plots(tmp_path):
    same = ["conv-26_q0", "conv-26_q1", "conv-26_q2"]
    board_run(tmp_path / "rag", "locomo_all_rag", 0.30, 1000, same, items=47)
    board_run(tmp_path / "full", "locomo_all_full_context", 0.25, 2000, same)
    # a press costs more tokens per question than RAG here but holds far less: on the front of held context
    board_run(tmp_path / "stream", "locomo_all_streamingllm", 0.12, 5000, same, kv_bytes=5.6 * 2**20, held=128)
    board_run(tmp_path / "h2o", "locomo_all_h2o", 0.50, 500, same, held=None)  # pre cost-4: no held count
    board_run(tmp_path / "mem0", "locomo_all_mem0", 0.90, 10, ["conv-30_q0"])  # other questions: not compared
    out = tmp_path / "report" / "locomo_all.md"
    res = table_report("locomo_all", [tmp_path], out)
    md = res["markdown"]
    recs = {r["row"]: r for r in res["records"]}
    assert recs["rag"]["tokens_per_question"] == 1000 + 12 and recs["rag"]["n"] == 3
    assert recs["mem0"]["same_questions"] is False and "Mem0 (other questions)" in md
    # the front is on held context: full_context holds more for less F1; h2o has no held count (left off)
    assert {r for r, v in recs.items() if v.get("pareto")} == {"rag", "streamingllm"}
    assert recs["streamingllm"]["held"] == 128 and recs["h2o"]["held"] is None
    # read / written / construction / judging apart (— : a run before judging was counted)
    assert "| RAG | memory | 3 | 0.300 ± 0.010 | 0.150 ± 0.005 | 0.300 ± 0.010 | 800 | 900 | 100 | 12 | — | 47 items / 940 tok |" in md
    assert "| H2O | compression | 3 |" in md and "| not counted (pre cost-4) | 450 | 50 |" in md
    assert "5.6 MiB KV" in md and "| ICAE | compression | no run found |" in md
    assert "J ± SE" not in md  # no run was judged
    assert "from `train experiment=icae_pwc_finetune`" in md
    png = out.with_suffix(".png")
    assert res["png"] == str(png) and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"![F1 against held context per question]({png.name})" in md
    saved = json.loads(out.with_suffix(".json").read_text())
    assert {r["row"] for r in saved} == {r["row"] for r in read_yaml("locomo_all")["rows"]}


def test_board_shows_j_when_a_run_was_judged(tmp_path):
    board_run(tmp_path / "rag", "locomo_all_rag", 0.30, 1000, ["a"], judge=0.41)
    md = table_report("locomo_all", [tmp_path], tmp_path / "b.md")["markdown"]
    assert "J ± SE" in md and "0.410 ± 0.020" in md


def test_board_rows_cover_every_method_and_memory_system():
    rows = {r["row"]: r for r in read_yaml("locomo_all")["rows"]}
    assert {"icae", "ccm_concat", "ccm_merge", "lococo", "streamingllm", "h2o", "snapkv", "pyramidkv"} == \
        {r for r, v in rows.items() if v["paradigm"] == "compression"}
    assert {"rag", "memorybank", "mem0", "mem0g", "amem", "memgpt", "readagent"} == \
        {r for r, v in rows.items() if v["paradigm"] == "memory"}
    assert {"full_context", "no_context"} == {r for r, v in rows.items() if v["paradigm"] == "baseline"}


def test_report_cli_lists_boards_and_writes_the_board(tmp_path):
    board_run(tmp_path / "runs" / "rag", "locomo_all_rag", 0.30, 1000, ["a"])
    p = run_cli("report")
    assert p.returncode == 0 and "boards (systems side by side): locomo_all" in p.stdout
    assert "locomo_all" not in p.stdout.split("paper tables:")[1].split("\n")[0]
    out = tmp_path / "board.md"
    p = run_cli("report", "table=locomo_all", f"runs={tmp_path / 'runs'}", f"out={out}")
    assert p.returncode == 0, p.stderr
    assert out.exists() and out.with_suffix(".png").exists() and "rows filled: rag" in p.stdout and "report: used " in p.stdout



def test_rows_judged_by_another_model_are_marked():
    recs = [{"row": "rag", "judge_model": "gpt-4o-mini"}, {"row": "mem0", "judge_model": "gpt-4o-mini"},
            {"row": "amem", "judge_model": "smollm2-135m"}, {"row": "lm", "judge_model": None}]
    B.mark_judges(recs)
    assert recs[2]["guards"] == ["judged by smollm2-135m (other rows: gpt-4o-mini)"]
    assert all("guards" not in r for r in (recs[0], recs[1], recs[3]))
    assert B.judge_model({"metrics": {"llm_judge": {"model": "gpt-4o-mini"}}}) == "gpt-4o-mini"
    assert B.judge_model({"metrics": {"f1": {}}}) is None
