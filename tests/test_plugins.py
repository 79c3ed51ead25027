"""Plug-ins without a fork: entry points of an installed distribution and ``plugins=`` files, through the real CLI.

An installed distribution is made the way pip leaves one (a ``*.dist-info`` folder with ``METADATA`` and
``entry_points.txt`` beside the package, on ``sys.path``), so importlib.metadata finds it as it finds any.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ctxbench.config import plugin_options
from ctxbench.core import plugins, registry
from tests.conftest import TINY_ANSWERS, run_cli
from tests.plugin_dist import make_dist


def forget_plugins() -> None:
    """What loading plug-ins left in this process: their names, options, registrations and modules."""
    registry.forget_plugins()
    plugin_options.forget()
    for mod in [m for m in sys.modules if m.split(".")[0] in ("lastturns_pkg", "other_pkg", "bad_pkg")
                or m.startswith("ctxbench_plugin_")]:
        sys.modules.pop(mod)


@pytest.fixture(autouse=True)
def _clean_plugins():
    forget_plugins()
    yield
    forget_plugins()

LAST_TURNS = '''
from dataclasses import dataclass
from ctxbench.api import System, Prediction, Usage


class LastTurns(System):
    """The last n turns, then the question."""

    @dataclass
    class Settings:
        n_turns: int = 5

    def __init__(self, cfg, *, llm, embedder=None, workdir=None):
        self.cfg, self.llm, self.turns = cfg, llm, []

    def ingest(self, history):
        self.turns = [t for s in history.sessions for t in s.turns][-self.cfg.n_turns:]

    def answer(self, question):
        context = "\\n".join(f"{t.speaker}: {t.text}" for t in self.turns)
        r = self.llm.chat([{"role": "user", "content": context + "\\nQ: " + question.question}],
                          max_new_tokens=self.answer_max_tokens())
        return Prediction(text=r.text, usage=Usage(answer_prompt_tokens=r.prompt_tokens,
                                                   answer_completion_tokens=r.completion_tokens, answer_calls=1),
                          meta={"n_turns": len(self.turns)})
'''

FILE_PLUGIN = '''
from dataclasses import dataclass
from ctxbench.api import History, Question, Sample, Session, Turn, register


@register("dataset", "tinyqa")
def tinyqa(cfg):
    return [Sample(History(id=f"h{i}", speakers=["Ann", "Bob"], sessions=[Session(id="s1", date="1 May 2024", turns=[
        Turn("Ann", f"My lucky number is {i + 7}.", id="D1:1"), Turn("Bob", "Nice.", id="D1:2")])]),
        [Question(id=f"h{i}-q1", question="What is Ann's lucky number?", answer=str(i + 7), category=4)])
        for i in range(cfg.n)]


@dataclass
class TinySettings:
    n: int = 2


tinyqa.Settings = TinySettings


@register("metric", "has_digit")
class HasDigit:
    name, version, reference = "has_digit", "1", "a test metric"

    def score(self, prediction, question):
        return float(any(c.isdigit() for c in prediction))
'''


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """lastturns-pkg 0.2.0 installed: ``lastturns`` (good), ``rag`` (a built-in's name), ``broken`` (no such class)."""
    root = make_dist(tmp_path / "site", "lastturns-pkg", "0.2.0", "lastturns_pkg", LAST_TURNS, {
        "ctxbench.memory": {"lastturns": "lastturns_pkg:LastTurns", "rag": "lastturns_pkg:LastTurns",
                            "broken": "lastturns_pkg:Nope"}})
    monkeypatch.syspath_prepend(str(root))
    plugins.reset()
    yield root


def _eval(run: Path, *extra: str):
    return run_cli("eval", "dataset=locomo_sample", "llm.model=tiny", TINY_ANSWERS, "llm.cache=false", "progress=false",
                   "limit=3", f"hydra.run.dir={run}", *extra, timeout=300)


def test_ls_lists_entry_points_without_importing_them(installed):
    p = run_cli("ls", "kind=memory")
    assert p.returncode == 0, p.stderr
    assert "plug-in lastturns: lastturns-pkg 0.2.0 (lastturns_pkg:LastTurns)" in p.stdout
    assert "plug-in rag: lastturns-pkg 0.2.0" in p.stdout and "has the name of a built-in: the built-in is used" in p.stdout
    assert "lastturns_pkg" not in sys.modules  # metadata only
    assert "lastturns" in registry.names("memory") and "broken" in registry.names("memory")


def test_ls_is_torch_free_with_a_plugin_installed(installed):
    code = ("import sys, builtins; real = builtins.__import__\n"
            "def guard(name, *a, **k):\n"
            "    if name.split('.')[0] in ('torch', 'transformers', 'lastturns_pkg'): raise ImportError('blocked ' + name)\n"
            "    return real(name, *a, **k)\n"
            "builtins.__import__ = guard\n"
            "from ctxbench.__main__ import main\n"
            "main(['ls'])\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**__import__("os").environ, "PYTHONPATH": f"{installed}:{Path(__file__).parents[1]}"})
    assert p.returncode == 0, p.stderr[-2000:]
    assert "plug-in lastturns: lastturns-pkg 0.2.0" in p.stdout


def test_an_installed_plugin_runs_like_a_built_in(installed, tmp_path):
    p = _eval(tmp_path / "run", "memory=lastturns", "memory.n_turns=2")
    assert p.returncode == 0, p.stderr[-3000:]
    rows = [json.loads(x) for x in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 3
    res = json.loads((tmp_path / "run" / "results.json").read_text())
    assert res["system"] == "memory=lastturns" and res["config"]["memory"] == {"name": "lastturns", "n_turns": 2}
    assert res["provenance"]["plugins"] == [{"kind": "memory", "name": "lastturns", "target": "lastturns_pkg:LastTurns",
                                             "distribution": "lastturns-pkg", "version": "0.2.0"}]
    assert "plug-in memory=lastturns from lastturns-pkg 0.2.0" in (tmp_path / "run" / "results.md").read_text()
    board = tmp_path / "mine.yaml"  # a board of the user's: the plug-in's row says where it came from
    board.write_text("dataset: locomo_sample\nrows:\n  - {system: lastturns, label: Last turns}\n")
    rep = run_cli("report", f"board={board}", f"runs={tmp_path / 'run'}", f"out={tmp_path / 'board.md'}")
    assert rep.returncode == 0, rep.stderr[-2000:]
    assert "Plug-ins: Last turns: memory=lastturns from lastturns-pkg 0.2.0." in (tmp_path / "board.md").read_text()
    again = _eval(tmp_path / "run", "memory=lastturns", "memory.n_turns=2")  # a rerun resumes: nothing asked again
    assert again.returncode == 0, again.stderr[-2000:]
    assert len((tmp_path / "run" / "predictions.jsonl").read_text().splitlines()) == 3


def test_a_plugins_settings_are_typed_checked_and_swept(installed, tmp_path):
    bad = _eval(tmp_path / "bad", "memory=lastturns", "memory.n_turns=abc")
    assert bad.returncode == 2 and "config key 'memory.n_turns' must be int, got 'abc'" in bad.stderr
    typo = _eval(tmp_path / "typo", "memory=lastturns", "memory.n_turn=3")
    assert typo.returncode == 2 and "Did you mean 'memory.n_turns'?" in typo.stderr
    helped = run_cli("eval", "memory=lastturns", "--help")
    assert "== Settings of memory=lastturns (plug-in: lastturns-pkg 0.2.0) ==" in helped.stdout
    assert "memory.n_turns: int = 5" in helped.stdout
    sweep = run_cli("eval", "-m", "memory=lastturns", "memory.n_turns=1,4", "dataset=locomo_sample", "llm.model=tiny",
                    TINY_ANSWERS, "llm.cache=false", "progress=false", "limit=1", f"hydra.sweep.dir={tmp_path / 'sw'}",
                    timeout=300)
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    held = [json.loads((tmp_path / "sw" / str(i) / "predictions.jsonl").read_text().splitlines()[0]) for i in (0, 1)]
    assert [json.loads((tmp_path / "sw" / str(i) / "results.json").read_text())["config"]["memory"]["n_turns"]
            for i in (0, 1)] == [1, 4]
    assert held[0] != held[1]


def test_a_broken_plugin_breaks_only_its_own_name(installed, tmp_path):
    p = _eval(tmp_path / "b", "memory=broken")
    assert p.returncode == 2
    line = p.stderr.strip().splitlines()[-1]
    assert line == ("ctxbench: error: memory 'broken' from lastturns-pkg 0.2.0: cannot load 'lastturns_pkg:Nope': "
                    "AttributeError: module 'lastturns_pkg' has no attribute 'Nope'")
    # the built-in keeps its name: memory=rag is ctxbench's RAG, not the plug-in's
    assert registry.get("memory", "rag").__module__ == "ctxbench.memory.rag"
    assert run_cli("ls").returncode == 0


def test_two_plugins_with_one_name_and_an_unsupported_api(tmp_path, monkeypatch, installed):
    other = make_dist(tmp_path / "site2", "other-pkg", "1.0", "other_pkg",
                      LAST_TURNS.replace("class LastTurns(System):", "ctxbench_api = '>=2'\n\nclass LastTurns(System):"),
                      {"ctxbench.memory": {"lastturns": "other_pkg:LastTurns", "newer": "other_pkg:LastTurns"}})
    monkeypatch.syspath_prepend(str(other))
    plugins.reset()
    p = _eval(tmp_path / "c", "memory=lastturns")
    assert p.returncode == 2 and "is declared by more than one plug-in" in p.stderr
    assert "lastturns-pkg 0.2.0" in p.stderr and "other-pkg 1.0" in p.stderr
    q = _eval(tmp_path / "d", "memory=newer")
    assert q.returncode == 2
    assert "memory 'newer' from other-pkg 1.0 supports ctxbench API >=2; this ctxbench has API 1.0" in q.stderr


def test_a_contract_breaking_plugin_is_one_line(tmp_path, monkeypatch):
    root = make_dist(tmp_path / "site", "bad-pkg", "0.1", "bad_pkg", "class NotASystem:\n    pass\n",
                     {"ctxbench.memory": {"notasystem": "bad_pkg:NotASystem"}})
    monkeypatch.syspath_prepend(str(root))
    plugins.reset()
    try:
        p = _eval(tmp_path / "r", "memory=notasystem")
        assert p.returncode == 2
        assert "memory 'notasystem' from bad-pkg 0.1:" in p.stderr and "does not derive from" in p.stderr
    finally:
        plugins.reset()
        sys.modules.pop("bad_pkg", None)


def test_unpublished_code_by_plugins_key(tmp_path):
    f = tmp_path / "myplug.py"
    f.write_text(FILE_PLUGIN + "\n" + LAST_TURNS.replace("class LastTurns(System):",
                                                           "@register('memory', 'lastturns_file')\nclass LastTurns(System):")
                 .replace("from ctxbench.api import System, Prediction, Usage",
                          "from ctxbench.api import System, Prediction, Usage, register"))
    plugins.reset()
    try:
        p = run_cli("eval", "memory=lastturns_file", f"plugins={f}", "dataset=tinyqa", "dataset.n=3", "metrics=[f1,has_digit]",
                    "llm.model=tiny", TINY_ANSWERS, "llm.cache=false", "progress=false",
                    f"hydra.run.dir={tmp_path / 'run'}", timeout=300)
        assert p.returncode == 0, p.stderr[-3000:]
        res = json.loads((tmp_path / "run" / "results.json").read_text())
        assert res["overall"]["n"] == 3 and "has_digit" in res["overall"]
        kinds = {(x["kind"], x["name"]): x for x in res["provenance"]["plugins"]}
        assert set(kinds) == {("memory", "lastturns_file"), ("dataset", "tinyqa"), ("metric", "has_digit")}
        import hashlib

        assert kinds[("metric", "has_digit")]["sha256"] == hashlib.sha256(f.read_bytes()).hexdigest()
        missing = run_cli("eval", "memory=rag", f"plugins={tmp_path / 'nope.py'}", "dataset=locomo_sample")
        assert missing.returncode == 2 and f"plugins={tmp_path / 'nope.py'}: no such file" in missing.stderr
    finally:
        plugins.reset()


def test_a_plugin_file_cannot_take_a_built_in_name(tmp_path):
    f = tmp_path / "shadow.py"
    f.write_text("from ctxbench.api import register, System\n\n@register('metric', 'f1')\nclass F1:\n"
                 "    name, version, reference = 'f1', '9', 'x'\n    def score(self, p, q): return 1.0\n")
    plugins.reset()
    try:
        plugins.use([str(f)])
        assert "has the name of a built-in" in registry.plugin_names("metric")["f1"].problem
        assert registry.get("metric", "f1").__module__ == "ctxbench.metrics.qa"
    finally:
        plugins.reset()


def test_the_api_is_what_the_built_ins_use():
    import ctxbench.api as api
    from ctxbench.core.plugins import API_VERSION
    from ctxbench.core.system import System
    from ctxbench.memory.base import MemorySystem
    from ctxbench.methods.base import TrainableMethod, TrainingFreeMethod
    from ctxbench.methods.press import Press

    assert api.API_VERSION == API_VERSION and api.System is System
    assert (api.MemorySystem, api.TrainableMethod, api.TrainingFreeMethod, api.Press) == (
        MemorySystem, TrainableMethod, TrainingFreeMethod, Press)
    registry.discover()
    for kind in ("memory", "method"):
        for name in registry.names(kind):
            if registry.plugin_of(kind, name) is None and name in registry.registry_index.entries(registry.PACKAGES)[kind]:
                cls = registry.get(kind, name)
                assert issubclass(cls, api.MemorySystem if kind == "memory" and name not in
                                  ("full_context", "no_context", "http") else api.System), (kind, name)
    with pytest.raises(AttributeError, match="its names"):
        api.NotThere  # noqa: B018


def test_importing_the_api_imports_no_torch():
    p = subprocess.run([sys.executable, "-c", "import sys, ctxbench.api; print('torch' in sys.modules)"],
                       capture_output=True, text=True, timeout=60, cwd=Path(__file__).parents[1])
    assert p.returncode == 0 and p.stdout.strip() == "False", p.stderr


def test_wandb_summary_names_the_plugins():
    from ctxbench.runs.wandb_log import summary_values

    s = summary_values({"system": "memory=x", "provenance": {"plugins": [
        {"kind": "memory", "name": "x", "distribution": "x-pkg", "version": "0.3"},
        {"kind": "metric", "name": "m", "file": "/a/m.py", "sha256": "ab" * 32}]}})
    assert s["plugins/memory/x"] == "x-pkg 0.3" and s["plugins/metric/m"] == "/a/m.py sha256:" + "ab" * 32


def test_a_press_plugin_runs_in_the_fixed_cache(tmp_path):
    """docs/examples/keep_norms.py: a Press and the FixedKVMethod it runs in, from ctxbench.api alone."""
    example = Path(__file__).parents[1] / "docs" / "examples" / "keep_norms.py"
    p = run_cli("eval", f"plugins={example}", "method=keep_norms", "method.mem_size=24", "method.window=4",
                "method.max_new_tokens=3", "model=tiny", "dataset=locomo_sample", "limit=3", "progress=false",
                f"hydra.run.dir={tmp_path / 'run'}", timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    rows = [json.loads(x) for x in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and all(0 < r["usage"]["held_kv_slots"] <= 24 for r in rows)
    res = json.loads((tmp_path / "run" / "results.json").read_text())
    assert res["system"] == "method=keep_norms" and res["config"]["method"]["window"] == 4
    assert [x["name"] for x in res["provenance"]["plugins"]] == ["keep_norms"]


def test_the_press_keeps_low_key_norms_and_the_window():
    import torch

    from ctxbench.core.plugins import Plugin, _load_file
    from ctxbench.methods.press import LayerKV, SegmentInfo

    example = Path(__file__).parents[1] / "docs" / "examples" / "keep_norms.py"
    mod = _load_file(Plugin("method", "keep_norms", str(example), file=str(example), sha256="x"))
    k = torch.ones(1, 1, 10, 2)
    k[0, 0, 2] = 0.1  # the smallest norm among the older slots
    kv = LayerKV(k, torch.zeros_like(k), torch.arange(10).view(1, 1, 10), torch.zeros(1, 1, 10))
    kept = mod.KeepNormsPress(window=2).compress(kv, SegmentInfo(0, 1, 10, None, "ingest"), budget=3)
    assert kept.pos.flatten().tolist() == [2, 8, 9]


PROMPT_AND_JUDGE = '''
import dataclasses
from ctxbench.api import register
from ctxbench.metrics.judges.mem0 import JUDGE as MEM0
from ctxbench.qa.prompts.brief import PROMPT as BRIEF

register("qa_prompt", "terse")(dataclasses.replace(BRIEF, name="terse", version="terse-1", max_new_tokens=4))
register("judge", "lenient_test")(dataclasses.replace(MEM0, name="lenient_test", version="lenient-1"))
'''


def test_an_answer_prompt_and_a_judge_from_a_plugin(tmp_path):
    f = tmp_path / "prompts.py"
    f.write_text(PROMPT_AND_JUDGE)
    p = run_cli("eval", f"plugins={f}", "memory=no_context", "qa_prompt=terse", "judge.panel=[lenient_test]",
                "metrics=[f1,llm_judge]", "dataset=locomo_sample", "llm.model=tiny", TINY_ANSWERS, "llm.cache=false",
                "progress=false", "limit=2", f"hydra.run.dir={tmp_path / 'run'}", timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    res = json.loads((tmp_path / "run" / "results.json").read_text())
    assert res["qa_prompt"]["name"] == "terse" and res["qa_prompt"]["version"] == "terse-1"
    assert "lenient-1" in json.dumps(res["judges"])
    assert {(x["kind"], x["name"]) for x in res["provenance"]["plugins"]} >= {("qa_prompt", "terse"),
                                                                              ("judge", "lenient_test")}
    bad = run_cli("eval", f"plugins={f}", "memory=no_context", "qa_prompt=tersee", "dataset=locomo_sample")
    assert bad.returncode == 2 and "config key 'qa_prompt' must be one of" in bad.stderr and "terse" in bad.stderr
