"""Every paper-table cell config composes at both scales and names its table cell."""
from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from ctxbench.report.tables import load_table, table_names

CONF = Path(__file__).resolve().parents[1] / "conf"
EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))


def _host_and_scale(name: str) -> tuple[str, str]:
    text = (CONF / "experiment" / f"{name}.yaml").read_text()
    host = next(ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("# host:"))
    scale = next(ln.split("/scale/", 1)[1].split(":", 1)[0] for ln in text.splitlines() if "- /scale/" in ln)
    return host, scale


@pytest.mark.parametrize("name", EXPERIMENTS)
@pytest.mark.parametrize("scale", ["cpu", "paper"])
def test_experiment_composes_at_each_scale(name, scale):
    host, group = _host_and_scale(name)
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose(config_name=host, overrides=[f"experiment={name}", f"scale/{group}={scale}"])
    assert cfg.experiment.name == name and cfg.experiment.scale == scale
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
