"""eval task=perplexity|reconstruction|choice on real methods over a tiny random model: the method's own
path equals the base model's where the method keeps everything, differs where it compresses, and a run
folder resumes, refuses another config and says clearly what a task needs."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from conftest import run_cli
from ctxbench.core.errors import ConfigError
from ctxbench.evaluation.evaluator import main as eval_main
from ctxbench.evaluation.tasks.choice import gold_index
from ctxbench.core.types import Question

CONF = Path(__file__).resolve().parents[1] / "ctxbench" / "conf"
ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1"}
PPL = ["task=perplexity", "model=tiny", "dataset=text_sample", "task.lengths=[48,96]", "task.target_tokens=16",
       "task.windows=2", "progress=false", "method.segment_len=16"]


def run(out: Path, overrides: list[str]) -> dict:
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose(config_name="eval", overrides=[*overrides, f"+run_dir={out}"])
    return eval_main(cfg)


def rows(res: dict) -> dict[tuple[str, object], dict]:
    return {(r["system"], r.get("length", r.get("category"))): r for r in res["rows"]}


def test_full_cache_perplexity_equals_the_base_model_and_a_small_cache_does_not(tmp_path):
    full = rows(run(tmp_path / "full", ["method=full_cache", *PPL]))
    for length in (48, 96):
        assert full[("full_cache", length)]["ppl"] == pytest.approx(full[("full_context", length)]["ppl"], rel=1e-4)
        assert full[("full_cache", length)]["memory_slots"] == length
        assert full[("no_context", length)]["ppl"] != pytest.approx(full[("full_context", length)]["ppl"], rel=1e-3)
        assert full[("no_context", length)]["memory_slots"] == 0
    small = rows(run(tmp_path / "small", ["method=streamingllm", "method.mem_size=32", *PPL]))
    r = small[("streamingllm", 96)]
    assert r["memory_slots"] <= 32 and r["compression"] == pytest.approx(96 / r["memory_slots"], rel=0.01)
    assert r["ppl"] != pytest.approx(small[("full_context", 96)]["ppl"], rel=1e-4)
    assert small[("full_context", 96)]["ppl"] == pytest.approx(full[("full_context", 96)]["ppl"], rel=1e-6)
    res = json.loads((tmp_path / "small" / "results.json").read_text())
    assert res["task"] == "perplexity" and res["git"] and res["provenance"]["packages"]
    md = (tmp_path / "small" / "results.md").read_text()
    assert "| streamingllm | 96 |" in md and "Provenance:" in md
    exact = math.exp(r["nll_per_token"])
    assert r["ppl"] == pytest.approx(exact, rel=1e-3)


def test_a_rerun_resumes_from_the_records_and_another_config_is_refused(tmp_path):
    out = tmp_path / "run"
    first = run(out, ["method=full_cache", *PPL])
    lines = (out / "records.jsonl").read_text().splitlines()
    assert len(lines) == 3 * 4  # (method + 2 baselines) × (2 lengths × 2 windows)
    (out / "records.jsonl").write_text("\n".join(lines[:5]) + "\n")  # as if killed after 5 records
    again = run(out, ["method=full_cache", *PPL])
    assert len((out / "records.jsonl").read_text().splitlines()) == 12
    assert [r["ppl"] for r in again["rows"]] == [r["ppl"] for r in first["rows"]]
    with pytest.raises(Exception, match="config"):
        run(out, ["method=full_cache", *PPL[:-1], "method.segment_len=8"])


def test_choice_on_dialsim_options_full_cache_ranks_as_the_base_model(tmp_path):
    res = run(tmp_path / "c", ["task=choice", "method=full_cache", "model=tiny", "dataset=dialsim_sample",
                               "progress=false"])
    r = rows(res)
    assert r[("full_cache", "overall")]["accuracy"] == r[("full_context", "overall")]["accuracy"]
    assert r[("full_cache", "overall")]["n"] == 5 and 0.0 <= r[("no_context", "overall")]["accuracy"] <= 1.0
    recs = [json.loads(x) for x in (tmp_path / "c" / "records.jsonl").read_text().splitlines()]
    mine = {x["key"].split("|")[1]: x for x in recs if x["key"].startswith("full_cache|")}
    base = {x["key"].split("|")[1]: x for x in recs if x["key"].startswith("full_context|")}
    for k in mine:  # the same NLL of every option, through the press path and the plain model
        assert mine[k]["nll"] == pytest.approx(base[k]["nll"], rel=1e-4)


def test_gold_option_by_text_or_letter():
    q = Question(id="q", question="?", answer="Paris", options=["London", "paris", "Rome"])
    assert gold_index(q) == 1
    assert gold_index(Question(id="q", question="?", answer="(C)".strip("()"), options=["a", "b", "c"])) == 2
    assert gold_index(Question(id="q", question="?", answer="Berlin", options=["a", "b"])) is None


def test_reconstruction_needs_a_method_that_decodes_its_context(tmp_path):
    with pytest.raises(ConfigError, match="reconstruct_ids"):
        run(tmp_path / "r", ["task=reconstruction", "method=streamingllm", "model=tiny", "dataset=text_sample"])


def test_cli_task_without_a_method_is_one_clear_line(tmp_path):
    p = run_cli("eval", "task=perplexity", "model=tiny", "dataset=text_sample", f"hydra.run.dir={tmp_path / 'x'}",
                env=ENV, timeout=300)
    assert p.returncode != 0
    assert "task=perplexity scores a compression method: pass method=NAME" in p.stderr
    assert "Traceback" not in p.stderr


def test_stream_scoring_full_cache_equals_one_forward_and_a_fixed_cache_stays_at_m(tmp_path):
    over = ["task=perplexity", "task.score=stream", "model=tiny", "dataset=text_sample", "task.lengths=[32,80]",
            "task.windows=2", "progress=false", "method.segment_len=16"]
    full = rows(run(tmp_path / "f", ["method=full_cache", *over]))
    for length in (32, 80):
        assert full[("full_cache", length)]["ppl"] == pytest.approx(full[("full_context", length)]["ppl"], rel=1e-4)
        assert full[("full_cache", length)]["tokens"] == 2 * (length - 1)
    small = rows(run(tmp_path / "s", ["method=streamingllm", "method.mem_size=24", *over]))
    assert small[("streamingllm", 80)]["memory_slots"] <= 24 < small[("full_context", 80)]["memory_slots"]
    # a tiny random model hardly uses its context: the evicted tokens still move the perplexity
    assert small[("streamingllm", 80)]["ppl"] != pytest.approx(small[("full_context", 80)]["ppl"], abs=5e-4)
    assert small[("streamingllm", 80)]["kv_bytes"] < small[("full_context", 80)]["kv_bytes"]
