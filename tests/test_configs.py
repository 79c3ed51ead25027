"""Every config file in conf/ composes (so a broken config fails CI), and every registered name has a config."""
from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from ctxbench.core import registry
from ctxbench.config.schema import check_types
from ctxbench.config.schemas import load_option

CONF = Path(__file__).resolve().parents[1] / "conf"
PRIMARY = sorted(p.stem for p in CONF.glob("*.yaml"))
GROUPS = sorted(p.name for p in CONF.iterdir() if p.is_dir() and not p.name.startswith("_"))
# which primary config each group is composed under
HOST = {"model": "train", "method": "train", "dataset": "train", "launcher": "train", "logger": "train",
        "experiment": "train", "memory": "eval", "task": "eval", "llm": "eval", "embedder": "eval", "sweep": "train"}


def group_options():
    for g in GROUPS:
        if g == "experiment":  # composed at each of its scales, types checked, in test_report_experiments.py
            continue
        for p in sorted((CONF / g).glob("*.yaml")):
            yield g, p.stem


@pytest.mark.parametrize("name", PRIMARY)
def test_primary_config_composes(name):
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose(config_name=name)
    OmegaConf.to_container(cfg, resolve=False)
    check_types(cfg, name)  # every default has the type its own schema expects


@pytest.mark.parametrize("group,option", list(group_options()))
def test_group_option_composes(group, option):
    host = HOST.get(group, "train")
    if not (CONF / f"{host}.yaml").exists():
        pytest.skip(f"{host}.yaml not present")
    text = (CONF / group / f"{option}.yaml").read_text()
    override = f"+{group}={option}" if group in ("experiment", "sweep") else f"{group}={option}"
    if group == "sweep":  # sweep files configure hydra.sweeper; compose them as experiments
        override = f"+sweep={option}"
    if group == "experiment":  # train.yaml/eval.yaml list `optional experiment: null`: select, don't append;
        override = f"experiment={option}"  # an experiment targets train or eval (its `# host:` line, default train)
        host = next((ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("# host:")), host)
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose(config_name=host, overrides=[override])
    check_types(cfg, host)  # no option, experiment or scale file sets a value of the wrong type
    if group in ("model", "method", "memory", "dataset", "llm", "embedder") and "# @package" not in text:
        name = cfg[group].name
        registry.get(group, name)  # the config names a registered object


def test_every_registered_name_has_a_config():
    missing = []
    for kind in ("method", "memory", "dataset", "model", "llm", "embedder"):
        configured = set()
        for p in (CONF / kind).glob("*.yaml"):
            cfg = load_option(kind, p.stem)  # the file itself keeps only what differs from its schema
            if "name" in cfg:
                configured.add(cfg.name)
        missing += [f"{kind}/{n}" for n in registry.builtin_names(kind) if n not in configured]
    assert not missing, f"registered without a config: {missing}"
