"""Every experiment config composes at each of its scales and names its table cell (or board row)."""
from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from ctxbench.config.schema import check_types
from ctxbench.report.board_file import load_board
from ctxbench.report.board_match import config_value, same
from ctxbench.report.tables import PAPERS_DIR, load_table, read_yaml, table_kind, table_names

CONF = Path(__file__).resolve().parents[1] / "conf"
EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))


def _host_and_scale(name: str) -> tuple[str, str | None]:
    text = (CONF / "experiment" / f"{name}.yaml").read_text()
    host = next(ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("# host:"))
    scale = next((ln.split("/scale/", 1)[1].split(":", 1)[0] for ln in text.splitlines() if "- /scale/" in ln), None)
    return host, scale


def _scales(name: str) -> list[str | None]:
    """cpu and the big scale (paper, or full for a board) of an experiment's scale group; [None] without one."""
    group = _host_and_scale(name)[1]
    if group is None:
        return [None]
    return sorted(p.stem for p in (CONF / "scale" / group).glob("*.yaml") if p.stem in ("cpu", "paper", "full"))


CASES = [(name, scale) for name in EXPERIMENTS for scale in _scales(name)]


def test_every_scaled_experiment_has_a_cpu_scale_and_a_big_one():
    for name in EXPERIMENTS:
        scales = [s for n, s in CASES if n == name]
        assert scales == [None] or ("cpu" in scales and len(scales) >= 2), (name, scales)


@pytest.mark.parametrize("name,scale", CASES)
def test_experiment_composes_at_each_scale(name, scale):
    host, group = _host_and_scale(name)
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        overrides = [f"experiment={name}"] + ([f"scale/{group}={scale}"] if group else [])
        cfg = compose(config_name=host, overrides=overrides)
    check_types(cfg, host)  # no experiment or scale file sets a value of the wrong type
    if group is None:  # a one-off experiment (icae_overfit): no table reads it
        assert cfg.experiment.name == name and cfg.experiment.table is None and host == "train", name
        return
    if cfg.experiment.table is not None and table_kind(cfg.experiment.table) == "board":
        rows = read_yaml(cfg.experiment.table)["rows"]
        assert cfg.experiment.name == name and cfg.experiment.scale == scale
        assert name in {r["experiment"] for r in rows}
        # the run this experiment makes fills its row: the row's system, and the board's settings hold
        board = load_board(cfg.experiment.table)
        row = next(r for r in board["rows"] if r.get("experiment") == name)
        group = "method" if cfg.get("method") is not None else "memory"
        assert row["system"] == f"{group}={cfg[group].name}" and row["dataset"] == cfg.dataset.name, name
        plain = OmegaConf.to_container(cfg, resolve=False)
        assert all(same(config_value(plain, k), v) for k, v in row["settings"].items()), (name, row["settings"])
        assert (cfg.llm.name, cfg.dataset.name, list(cfg.dataset.categories)) == ("hf", "locomo", [1, 2, 3, 4])
        if scale == "cpu":  # the CPU slice: conv-26, its first 2 sessions, on the packaged SmolLM2
            assert (list(cfg.dataset.conversations), cfg.dataset.sessions, cfg.model.name) == (["conv-26"], 2,
                                                                                               "smollm2_135m")
        assert (cfg.get("method") is not None) == (cfg.experiment.cell in {r["row"] for r in rows
                                                                    if r.get("paradigm") == "compression"})
        return
    assert cfg.experiment.name == name and cfg.experiment.scale == scale
    if cfg.experiment.table is not None and table_kind(cfg.experiment.table) == "ruler":  # methods x ratios
        rows = read_yaml(cfg.experiment.table)["methods"]
        assert name in {f"{cfg.experiment.table}_{r['row']}" for r in rows} and host == "eval"
        assert (cfg.dataset.name, cfg.task.name, cfg.qa_prompt, list(cfg.metrics)) == ("ruler", "compression", "ruler",
                                                                                      ["ruler_match"])
        assert cfg.model.name == ("smollm2_135m" if scale == "cpu" else "hf")
        return
    if cfg.experiment.table is not None:  # null: a train experiment no paper table reads (locomo_all does)
        cells = load_table(cfg.experiment.table)["cells"]
        # a cell runs the experiment, or (a train experiment) trains the checkpoint a cell's eval reads
        assert name in {c.get("experiment") for c in cells} | {c.get("trained_by") for c in cells}
    else:
        assert host == "train", name
    if host == "eval" and cfg.task.name != "qa":  # the papers' own measures: a method= on its text
        assert cfg.method is not None and cfg.model.name == ("smollm2_135m" if scale == "cpu" else "hf")
    elif host == "eval":  # LoCoMo tables: a local SmolLM2 on the sample vs GPT-4o-mini on the full set
        assert (cfg.llm.name, cfg.dataset.name) == (("hf", "locomo_sample") if scale == "cpu" else ("openai", "locomo"))
        if scale == "paper":
            assert cfg.llm.model == "gpt-4o-mini"
    else:
        assert cfg.model.label if scale == "paper" else cfg.model.name == "smollm2_135m"
    if name.startswith("mem0_"):
        assert list(cfg.dataset.categories) == [1, 2, 3, 4]  # the Mem0 paper drops adversarial


def test_every_table_cell_with_an_experiment_has_its_config():
    for t in table_names():
        for cell in load_table(t)["cells"]:
            for key in ("experiment", "trained_by"):
                if cell.get(key):
                    assert cell[key] in EXPERIMENTS, (t, cell["cell"], key)
    for t in table_names("board"):
        for row in read_yaml(t)["rows"]:
            for key in ("experiment", "trained_by"):
                if row.get(key):
                    assert row[key] in EXPERIMENTS, (t, row["row"], key)
    for t in table_names("ruler"):  # each method row runs ruler_<row> (trained rows: trained_by's train experiment)
        for row in read_yaml(t)["methods"]:
            assert f"{t}_{row['row']}" in EXPERIMENTS, (t, row["row"])
            if row.get("trained_by"):
                assert row["trained_by"] in EXPERIMENTS, (t, row["row"])
    assert (PAPERS_DIR / "locomo_all.yaml").exists() and "locomo_all" in table_names("board")
