"""Ranges and choices of config values, checked at compose time: one line naming the key, exit 2.

Also: every numeric key of every YAML under conf/ has a declared range (or a reason to have none),
so a new numeric key cannot skip validation; and the choice lists agree with the code's own tables.
"""
from __future__ import annotations

import sys

import pytest

from ctxbench.config import bounds as cb
from ctxbench.config.compose import option_config

def refused(monkeypatch, capsys, tmp_path, *argv: str) -> str:
    """Run the real CLI in-process; it must exit 2 with one stderr line and no traceback."""
    from ctxbench.__main__ import main

    argv = (*argv, f"hydra.run.dir={tmp_path / 'run'}", f"hydra.sweep.dir={tmp_path / 'sweep'}")  # if it ran after all
    monkeypatch.setattr(sys, "argv", ["ctxbench", *argv])
    with pytest.raises(SystemExit) as e:
        main(list(argv))
    err = capsys.readouterr().err
    assert e.value.code == 2, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


# the cases of issue 23: each was a traceback, or silently accepted, before
ISSUE_CASES = [
    (("eval", "limit=-1"), "config key 'limit' must be >= 0 (0 or null = all), got -1"),
    (("eval", "llm=openai", "llm.max_retries=-1"), "config key 'llm.max_retries' must be >= 0, got -1"),
    (("train", "trainer.batch_size=0"), "config key 'trainer.batch_size' must be >= 1, got 0"),
    (("eval", "llm.batch_size=0"), "config key 'llm.batch_size' must be >= 1, got 0"),
    (("eval", "memory=rag", "embedder.batch_size=0"), "config key 'embedder.batch_size' must be >= 1, got 0"),
    (("eval", "memory=rag", "memory.chunk_size=0"), "config key 'memory.chunk_size' must be >= 1, got 0"),
    (("train", "trainer.scheduler=foo"),
     "config key 'trainer.scheduler' must be one of cosine | linear | constant, got 'foo'"),
    (("eval", "llm=openai", "llm.base_url=notaurl"),
     "config key 'llm.base_url' must be an http(s) URL (e.g. http://127.0.0.1:8080/v1), got 'notaurl'"),
]


@pytest.mark.parametrize("argv,line", ISSUE_CASES, ids=[" ".join(a) for a, _ in ISSUE_CASES])
def test_issue_cases_fail_in_one_line(monkeypatch, capsys, tmp_path, argv, line):
    assert refused(monkeypatch, capsys, tmp_path, *argv) == f"ctxbench: error: {line}"


@pytest.mark.parametrize("argv,key", [
    (("train", "trainer.lr=0"), "'trainer.lr' must be > 0"),
    (("train", "trainer.log_every=0"), "'trainer.log_every' must be >= 1"),            # step % 0
    (("train", "trainer.max_eval_batches=0"), "'trainer.max_eval_batches' must be >= 1"),  # mean of no batches
    (("train", "trainer.eval_fraction=1.0"), "'trainer.eval_fraction' must be in [0, 1)"),
    (("train", "trainer.precision=fp8"), "'trainer.precision' must be one of fp32 | bf16 | fp16"),
    (("train", "seed=-1"), "'seed' must be in [0, 4294967295] (numpy's seed range)"),
    (("train", "method=ccm_concat", "method.mode=pretrain"), "'method.mode' must be one of concat | merge"),
    (("train", "method=icae", "method.mode=merge"), "'method.mode' must be one of pretrain | finetune"),
    (("train", "method=lococo", "method.hh_keep_rate=1.0"), "'method.hh_keep_rate' must be in [0, 1)"),
    (("train", "method=lococo", "method.rope_scaling_factor=fast"), "'method.rope_scaling_factor' must be one of auto"),
    (("train", "model=tiny", "model.dtype=float64"), "'model.dtype' must be one of float32"),
    (("eval", "memory=memgpt", "memory.evict_frac=0"), "'memory.evict_frac' must be in (0, 1]"),
    (("eval", "memory=rag", "memory.index=ivf"), "'memory.index' must be one of flat | hnsw"),
    (("eval", "max_failed_fraction=1.5"), "'max_failed_fraction' must be in [0, 1]"),
    (("eval", "concurrency=0"), "'concurrency' must be >= 1"),
    (("eval", "concurrency=many"), "'concurrency' must be one of auto"),
    (("eval", "judge_llm={name:openai,max_retries:-2}"), "'judge_llm.max_retries' must be >= 0"),
    (("bench", "suite=everything"), "'suite' must be one of all | train_step"),
    (("train", "trainer.scheduler=1"), "'trainer.scheduler' must be one of cosine"),  # Hydra reads 1 as an int
    (("train", "trainer.betas=[2,0.9]"), "'trainer.betas' item 0 must be a number in [0, 1)"),  # torch's ValueError
    (("train", "trainer.betas=[0.9]"), "'trainer.betas' must be two numbers"),
    (("eval", "metrics=[]"), "'metrics' is an empty list"),  # silently meant the default metrics
    (("score", "predictions=x.jsonl", "metrics=[]"), "'metrics' is an empty list"),
])
def test_out_of_range_and_unknown_choices_fail(monkeypatch, capsys, tmp_path, argv, key):
    assert f"config key {key}" in refused(monkeypatch, capsys, tmp_path, *argv)


def test_a_sweep_checks_every_value(monkeypatch, capsys, tmp_path):
    line = refused(monkeypatch, capsys, tmp_path, "eval", "-m", "memory=rag", "memory.k=5,0")
    assert "config key 'memory.k' must be >= 1, got 0" in line and "sweep job memory.k=0" in line


@pytest.mark.parametrize("argv", [
    ("eval", "limit=0"), ("eval", "limit=null"), ("eval", "limit=3"), ("train", "trainer.max_steps=0"),
    ("train", "trainer.eval_every=0"), ("train", "method=lococo", "method.rope_scaling_factor=auto"),
    ("eval", "llm=llamacpp", "llm.base_url=http://127.0.0.1:9/v1"), ("eval", "llm=openai", "llm.max_retries=0"),
    ("train", "trainer.lr=1"),
])
def test_values_at_the_edges_pass(argv):
    from ctxbench.__main__ import check_overrides

    check_overrides(argv[0], list(argv[1:]))


def schema_fields():
    """(schema, dotted key, field) of every key of every schema (commands and group options)."""
    from ctxbench.config.schemas import COMMANDS as CMDS, GROUPS, command_schema, group_schemas
    from ctxbench.config.setting import walk

    sources = [(c, command_schema(c)) for c in CMDS]
    sources += [(f"{g}/{n}", s) for g in GROUPS for n, s in group_schemas(g).items()]
    for where, source in sources:
        for key, f in walk(source):
            yield where, key, f


def test_every_numeric_key_has_a_range_or_a_reason():
    from ctxbench.config.setting import type_names

    numeric = [(w, k, f) for w, k, f in schema_fields() if type_names(f)[0] & {"int", "float"}]
    assert len(numeric) > 100  # the walk sees the schemas (some 150 numeric keys)
    missing = sorted(f"{w}: {k}" for w, k, f in numeric if f.metadata.get("range") is None)
    assert not missing, f"declare a bound on these keys in ctxbench/config/schemas/: {missing}"


def test_every_bound_can_hold():
    """A range on a key that is never a number, or choices that rule out the key's own default, check nothing useful."""
    import dataclasses

    from ctxbench.config.setting import type_names

    wrong = []
    for where, key, f in schema_fields():
        types, _ = type_names(f)
        if f.metadata.get("range") is not None and not types & {"int", "float"}:
            wrong.append(f"{where}: {key} has a range but takes no number")
        choices = f.metadata.get("choices")
        default = f.default if f.default is not dataclasses.MISSING else None
        if choices and default is not None and isinstance(default, (str, bool)) and default not in choices:
            wrong.append(f"{where}: {key} default {default!r} is not one of its choices")
    assert not wrong, wrong


def test_choices_agree_with_the_code():
    from omegaconf import OmegaConf

    from ctxbench.methods.ccm import MODES
    from ctxbench.methods.icae import ICAE
    from ctxbench.methods.lococo import ACTIVATIONS
    from ctxbench.models.loading import DTYPES
    from ctxbench.training.optim import SCHEDULERS

    assert set(cb.choices_of("trainer.scheduler")) == set(SCHEDULERS)
    assert set(cb.choices_of("model.dtype")) == set(DTYPES) == set(cb.choices_of("llm.dtype"))
    assert set(cb.choices_of("method.hidden_act")) == {k for k in ACTIVATIONS if k}
    ccm = OmegaConf.create({"method": {"name": "ccm_concat"}})
    icae = OmegaConf.create({"method": {"name": "icae_finetune"}})
    assert set(cb.choices_of("method.mode", ccm)) == set(MODES)
    assert set(cb.choices_of("method.mode", icae)) == set(ICAE.MODES)


@pytest.mark.parametrize("r,text", [
    (cb.ge(0, "0 or null = all"), ">= 0 (0 or null = all)"), (cb.gt(0), "> 0"),
    (cb.between(0, 1, high_open=True), "in [0, 1)"), (cb.between(0, 1, low_open=True), "in (0, 1]"),
    (cb.between(-1, 0.5), "in [-1, 0.5]"),
])
def test_range_describes_itself(r, text):
    assert r.describe() == text


def test_nan_is_out_of_every_range():
    assert not cb.ge(0).accepts(float("nan"))
    assert cb.problem("trainer.lr", float("nan")) is not None
    assert cb.problem("trainer.lr", float("inf")) is None  # unbounded above


def listed_alternatives():
    """(schema, dotted key, field) of every str key whose meaning lists its default among others (``a | b``)."""
    import re

    for where, key, f in schema_fields():
        meaning = f.metadata.get("meaning", "")
        if "|" in meaning and isinstance(f.default, str) and f.default in re.findall(r"[\w.]+", meaning):
            yield where, key, f


def test_every_listed_set_of_values_is_a_choice():
    """A key whose meaning reads ``a | b | c`` has choices (or an ``open=`` reason)."""
    found = list(listed_alternatives())
    keys = {k for _, k, _ in found}
    assert {"trainer.scheduler", "index", "mode", "answer_format"} <= keys
    missing = sorted(f"{w}: {k}" for w, k, f in found if not f.metadata.get("choices") and not f.metadata.get("open"))
    assert not missing, f"declare choices= (or open=) on these keys in ctxbench/config/schemas/: {missing}"


def test_a_run_folder_that_is_a_file_fails_in_one_line(monkeypatch, capsys, tmp_path):
    """Hydra's own mkdir traceback before; now one line naming the file."""
    from ctxbench.__main__ import main

    f = tmp_path / "afile"
    f.write_text("x")
    for value in (f, f / "sub"):
        monkeypatch.setattr(sys, "argv", ["ctxbench", "eval", f"hydra.run.dir={value}"])
        with pytest.raises(SystemExit) as e:
            main(["eval", f"hydra.run.dir={value}"])
        err = capsys.readouterr().err
        assert e.value.code == 2 and "Traceback" not in err
        assert err.strip() == f"ctxbench: error: hydra.run.dir={value}: {f} is a file, not a folder " \
                              "(a run folder is created there)"


def test_tiny_model_heads_must_divide_the_hidden_size():
    """transformers' ValueError (a traceback) before; now a one-line ModelLoadError naming the keys."""
    from omegaconf import OmegaConf

    from ctxbench.core.errors import CtxbenchError
    from ctxbench.models.loading import tiny_dir

    with pytest.raises(CtxbenchError, match=r"model.hidden_size=64 must be a multiple of model.num_heads=3"):
        tiny_dir(option_config("model", {"name": "tiny", "hidden_size": 64, "num_heads": 3, "num_kv_heads": 1}))
    with pytest.raises(CtxbenchError, match=r"num_heads a multiple of model.num_kv_heads=3"):
        tiny_dir(option_config("model", {"name": "tiny", "hidden_size": 64, "num_heads": 4, "num_kv_heads": 3}))
