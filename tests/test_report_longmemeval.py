"""``report table=longmemeval``: the published rows (papers/longmemeval.yaml, each with its source), our runs'
results.json ``longmemeval`` / ``evidence_recall`` blocks (hand-written to the issue-40 contract), the
"not comparable" rule (release, reader, judge model and prompts) and the files written."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ctxbench.report.longmemeval import check_table, model_key, why_not
from ctxbench.report.runs import ReportError
from ctxbench.report.tables import PAPERS_DIR, read_yaml, table_kind, table_names, table_report
from ctxbench.reproduce.plan import Options, plan
from conftest import run_cli

TYPES = ["single-session-user", "single-session-assistant", "single-session-preference", "multi-session",
         "temporal-reasoning", "knowledge-update"]


def write_run(root: Path, name: str, *, model: str = "gpt-4o", judge_model: str = "gpt-4o-2024-08-06",
              judge: str = "longmemeval", release: str = "s", dataset: str = "longmemeval",
              by_type: dict[str, float] | None = None, recall: bool = True, system: str = "rag") -> Path:
    """A run folder with results.json as the evaluator writes it for LongMemEval questions (the contract's blocks)."""
    d = root / name
    d.mkdir(parents=True)
    by_type = by_type or {t: 0.5 for t in TYPES}
    block = {"source": "LongMemEval print_qa_metrics.py", "by_type": {t: {"n": 2, "llm_judge": v} for t, v in by_type.items()},
             "overall": {"n": 12, "llm_judge": sum(by_type.values()) / len(by_type)},
             "task_averaged": {"types": 6, "llm_judge": sum(by_type.values()) / len(by_type)},
             "abstention": {"n": 2, "llm_judge": 0.25}}
    results = {"system": system, "dataset": dataset, "overall": {"n": 12, "llm_judge": 0.5},
               "by_category": {}, "longmemeval": block,
               "judges": {judge: {"model": judge_model, "prompt_version": f"{judge}-judge-1", "metrics": ["llm_judge"]}},
               "config": {"dataset": {"name": dataset, "release": release}, "llm": {"model": model},
                          "memory": {"name": system}}}
    if recall:
        results["evidence_recall"] = {"n": 10, "session": {"recall_any@5": 0.9, "recall_all@5": 0.7, "ndcg@5": 0.8},
                                      "turn": {"recall_any@5": 0.6}, "by_category": {}}
    (d / "results.json").write_text(json.dumps(results))
    return d


def test_the_table_is_data_with_a_source_for_every_row():
    assert "longmemeval" in table_names("longmemeval") and "longmemeval" not in table_names()
    assert table_kind("longmemeval") == "longmemeval"
    t = check_table(read_yaml("longmemeval"), "longmemeval.yaml")
    assert t["types"] == TYPES
    for row in t["rows"]:
        src = t["sources"][row["source"]]
        assert src.get("retrieved_from") and (src.get("arxiv") or src.get("url")), row["row"]
        assert row["release"] in ("s", "m", "oracle") and row["reader"], row["row"]
    zep = {r["row"]: r for r in t["rows"]}
    # Zep's Table 2 / Table 3 as printed (arXiv 2501.13956)
    assert zep["zep_full_context_gpt4o"]["values"]["overall"] == 60.2
    assert zep["zep_gpt4o"]["values"]["single-session-preference"] == 56.7
    assert zep["zep_full_context_gpt4o_mini"]["values"]["temporal-reasoning"] == 36.5
    assert "not_found" in t  # the numbers looked for and not read are said, not invented


def test_a_malformed_row_is_one_line_naming_it():
    t = read_yaml("longmemeval")
    t["rows"][0]["values"]["single-session-usr"] = 1.0
    with pytest.raises(ReportError, match=r"rows\[0\] \(zep_full_context_gpt4o_mini\): values has single-session-usr"):
        check_table(t, "longmemeval.yaml")
    t = read_yaml("longmemeval")
    t["rows"][1]["source"] = "nowhere"
    with pytest.raises(ReportError, match="source 'nowhere' is not in sources"):
        check_table(t, "longmemeval.yaml")


def test_model_names_compare_without_provider_or_date():
    assert model_key("openai/gpt-4o-2024-08-06") == model_key("GPT-4o") == "gpt-4o"
    assert model_key("gpt-4o-mini") != model_key("gpt-4o")
    pub = {"release": "s", "reader": "gpt-4o", "judge": "gpt-4o", "judge_prompt": "longmemeval"}
    same = {"release": "s", "reader": "gpt-4o-2024-08-06", "judge": "gpt-4o-2024-08-06", "judge_prompt": "longmemeval"}
    assert why_not(pub, same) is None
    assert why_not(pub, {**same, "judge_prompt": "mem0"}) == "judge prompts longmemeval vs ours mem0"
    assert why_not(pub, {**same, "release": "sample"}) == "release s vs ours sample"
    assert why_not({**pub, "judge": None}, same) == "judge not stated vs ours gpt-4o-2024-08-06"


def test_report_puts_ours_beside_the_published_rows(tmp_path):
    comparable = write_run(tmp_path / "runs", "fc_gpt4o", by_type={t: (i + 1) / 10 for i, t in enumerate(TYPES)},
                           system="full_context")
    write_run(tmp_path / "runs", "rag_smollm", model="smollm2_135m", judge_model="smollm2_135m",
              release="sample", dataset="longmemeval_sample")
    (tmp_path / "runs" / "locomo_run").mkdir()  # a run without the block is not a row
    (tmp_path / "runs" / "locomo_run" / "results.json").write_text(json.dumps({"overall": {"n": 1}}))
    out = tmp_path / "rep" / "lme.md"
    res = table_report("longmemeval", [tmp_path / "runs"], out)
    assert res["found"] == ["fc_gpt4o", "rag_smollm"]
    ours = {r["row"]: r for r in res["records"] if r["kind"] == "ours"}
    fc = ours["fc_gpt4o"]
    assert fc["values"]["single-session-user"] == pytest.approx(10.0)
    assert fc["values"]["knowledge-update"] == pytest.approx(60.0)
    assert fc["values"]["abstention"] == pytest.approx(25.0) and fc["abstention_n"] == 2
    assert (fc["reader"], fc["judge"], fc["judge_prompt"], fc["release"], fc["n"]) == \
        ("gpt-4o", "gpt-4o-2024-08-06", "longmemeval", "s", 12)
    assert ours["rag_smollm"]["release"] == "sample"
    assert fc["evidence_recall"]["session"]["recall_any@5"] == 0.9
    pub = {r["row"]: r for r in res["records"] if r["kind"] == "published"}
    assert pub["zep_full_context_gpt4o"]["comparable_with"] == [str(comparable)]
    assert any(x["run"] == str(comparable) and x["why"] == "reader gpt-4o-mini vs ours gpt-4o"
               for x in pub["zep_full_context_gpt4o_mini"]["not_comparable"])
    assert pub["mastra_om_gpt4o"]["comparable_with"] == []  # its judge is not stated: never comparable
    md = out.read_text()
    assert md == res["markdown"]
    assert re.search(r"comparable with fc_gpt4o; not comparable \(release, reader(, judge)? differ: rag_smollm\)", md)
    assert "comparable with fc_gpt4o" in md and "## Evidence recall" in md and "| 10.0 |" in md
    assert json.loads(out.with_suffix(".json").read_text()) == res["records"]
    assert not list(out.parent.glob("*.tmp*"))


def test_report_without_runs_prints_the_published_rows(tmp_path):
    out = tmp_path / "lme.md"
    p = run_cli("report", "table=longmemeval", f"runs={tmp_path}", f"out={out}")
    assert p.returncode == 0, p.stderr
    assert "no run of ours found" in p.stdout and "LongMemEval runs found: none" in p.stdout
    assert "| 71.2 |" in p.stdout  # Zep with gpt-4o, Table 2


def test_reproduce_lists_the_published_rows_as_having_no_experiment(tmp_path):
    jobs, idle = plan("longmemeval", Options(scale="cpu", out=tmp_path))
    assert jobs == [] and {c["cell"] for c in idle} == {r["row"] for r in read_yaml("longmemeval")["rows"]}
    assert (PAPERS_DIR / "longmemeval.yaml").exists()


def test_departures_from_longmemevals_reading_make_a_run_not_comparable():
    """LongMemEval's reader answers in up to 500 tokens and reads every haystack session; a run that caps the
    answer lower or dropped sessions dated after the question is not comparable, and the table says why."""
    from ctxbench.report.longmemeval import departures, why_not

    res = {"qa_prompt": {"answer_max_tokens": 64}, "dataset_quirks": {"sessions_after_question": 3}}
    got = departures(res)
    assert got[0].startswith("answer-cap 64 tokens") and got[1].startswith("sessions-after-question 3 dropped")
    assert departures({"qa_prompt": {"answer_max_tokens": 500}}) == []
    pub = {"release": "s", "reader": "gpt-4o", "judge": "gpt-4o", "judge_prompt": "longmemeval"}
    ours = dict(pub, departures=[])
    assert why_not(pub, ours) is None
    assert "answer-cap 64" in why_not(pub, dict(ours, departures=got))

