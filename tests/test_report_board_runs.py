"""``report board=NAME|FILE runs=DIR,...``: rows filled from any run folders by system, dataset and
settings (never experiment.name), one line per run used or skipped, a plug-in's runs added to
locomo_all, a user's board file anywhere, columns from the metric registry (a test-registered one)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from ctxbench.config.compose import option_config
from ctxbench.core import registry
from ctxbench.core.system import System
from ctxbench.core.types import History, Prediction, Question, Sample, Session, Turn, Usage
from ctxbench.evaluation.evaluator import evaluate_samples
from ctxbench.memory.baselines import NoContext
from ctxbench.memory.rag import RAG
from ctxbench.report.board import run_board
from ctxbench.report.board_file import board_out, load_board
from ctxbench.report.runs import ReportError
from tests.board_runs import eval_config
from tests.conftest import run_cli
from tests.memory_scripted import BowEmbedder
from tests.scripted_llm import ScriptedLLM

PLUG, METRIC = "testplug", "board_testmetric"
WORDS = "apple banana cherry dolphin eagle falcon grape harbor".split()


class LastTurns(System):
    """A plug-in's memory system as a user writes it: answers with the last ``n_turns`` turns."""

    def __init__(self, n_turns: int = 1):
        self.n_turns, self.turns = n_turns, []

    def ingest(self, history: History) -> None:
        self.turns = [t for s in history.sessions for t in s.turns]

    def answer(self, question: Question) -> Prediction:
        return Prediction(" ".join(t.text for t in self.turns[-self.n_turns:]), Usage(answer_prompt_tokens=5))


class SaysApple:
    """A plug-in's metric: 1 when the prediction names an apple."""

    name, version, reference = METRIC, "1", "tests"

    def score(self, prediction: str, question: Question) -> float:
        return float("apple" in prediction.lower())


@pytest.fixture(scope="module")
def plugin():
    """``testplug`` (a System subclass) and ``board_testmetric`` registered as a plug-in would register them."""
    registry.register("memory", PLUG)(LastTurns)
    registry.register("metric", METRIC)(SaysApple)
    yield
    for kind, name in (("memory", PLUG), ("metric", METRIC)):
        registry._REGISTRY[kind].pop(name, None)
        registry._ORIGIN[kind].pop(name, None)


def samples() -> list[Sample]:
    turns = [Turn("Alice" if i % 2 == 0 else "Bob", f"I like {w} today", f"D1:{i + 1}") for i, w in enumerate(WORDS)]
    h = History(id="h", sessions=[Session("s1", turns, "1 May, 2023")], speakers=["Alice", "Bob"])
    return [Sample(h, [Question("q1", "Which fruit did Alice like?", "apple", category=4),
                       Question("q2", "What did Bob like?", "banana", category=4)])]


def make_run(d: Path, system: System, name: str, *, dataset: str = "locomo", metrics=("f1",), overrides=(),
             created: str = "2026-12-01T00:00:00Z", settings: dict | None = None, **config) -> Path:
    """A real run folder: ``system`` evaluated on the scripted chat model, with the .hydra files eval leaves
    (the config records the system's ``settings`` under its group)."""
    llm = ScriptedLLM(lambda messages, **kw: "apple")
    cfg = eval_config(name, dataset, **config)
    cfg[name.partition("=")[0]].update(settings or {})
    evaluate_samples(system, samples(), d, llm=llm, metrics=list(metrics), cfg=cfg,
                     extra={"system": name, "dataset": dataset})
    (d / ".hydra").mkdir()
    (d / ".hydra" / "config.yaml").write_text(yaml.safe_dump(cfg))
    (d / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([name, f"dataset={dataset}", *overrides]))
    res = json.loads((d / "results.json").read_text())
    (d / "results.json").write_text(json.dumps({**res, "created": created}))
    return d


RAG_SETTINGS = {"k": 2, "chunk_size": 2, "overlap": 0, "progress": False}


def rag(workdir: Path) -> RAG:
    cfg = option_config("memory", {"name": "rag", **RAG_SETTINGS})
    return RAG(cfg, llm=ScriptedLLM(lambda m, **kw: "apple"), embedder=BowEmbedder(), workdir=workdir)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, plugin):
    """rag (and an older rag, a rag on another dataset, a rag on another answer prompt), no_context,
    and the plug-in at n_turns=1 and 5 (one of them also older), under one folder, in nested folders."""
    tmp_path = tmp_path_factory.mktemp("board_runs")
    root = tmp_path / "outputs" / "eval"
    make_run(root / "rag", rag(tmp_path / "s1"), "memory=rag", created="2026-12-02T00:00:00Z",
             settings=RAG_SETTINGS)
    make_run(root / "old" / "rag", rag(tmp_path / "s2"), "memory=rag", created="2026-11-01T00:00:00Z")
    make_run(root / "rag_sample", rag(tmp_path / "s3"), "memory=rag", dataset="locomo_sample")
    make_run(root / "rag_mem0", rag(tmp_path / "s4"), "memory=rag", qa_prompt="mem0")
    nc = NoContext(option_config("memory", {"name": "no_context"}), llm=ScriptedLLM(lambda m, **kw: "pear"))
    make_run(root / "none", nc, "memory=no_context", metrics=("f1", METRIC))
    make_run(root / "plug1", LastTurns(1), f"memory={PLUG}", metrics=("f1", METRIC), overrides=["memory.n_turns=1"],
             settings={"n_turns": 1})
    make_run(root / "plug5", LastTurns(5), f"memory={PLUG}", metrics=("f1", METRIC), overrides=["memory.n_turns=5"],
             created="2026-12-03T00:00:00Z", settings={"n_turns": 5})
    make_run(root / "plug5_old", LastTurns(5), f"memory={PLUG}", overrides=["memory.n_turns=5"],
             settings={"n_turns": 5})
    failed = make_run(root / "failed", rag(tmp_path / "s5"), "memory=rag", created="2026-12-05T00:00:00Z",
                      settings=RAG_SETTINGS)
    res = json.loads((failed / "results.json").read_text())
    res["health"].update(status="failed", reason="2 of 2 answer calls failed")
    (failed / "results.json").write_text(json.dumps(res))
    (root / "train" / "icae").mkdir(parents=True)  # a training run: no results.json, a loss log
    (root / "train" / "icae" / "metrics.jsonl").write_text('{"step": 1, "loss": 2.0}\n')
    return root


def lines(stdout: str, root: Path) -> dict[str, str]:
    """``report: used|skipped <run>...`` lines by the run folder's path below ``root``."""
    out = {}
    for ln in stdout.splitlines():
        if ln.startswith(("report: used ", "report: skipped ")):
            out[Path(ln.split()[2].rstrip(":")).relative_to(root).as_posix()] = ln
    return out


def test_locomo_all_fills_rows_from_any_runs_and_adds_the_plugin(runs, tmp_path, plugin):
    out = tmp_path / "board" / "locomo_all.md"
    p = run_cli("report", "table=locomo_all", f"runs={runs}", f"out={out}")
    assert p.returncode == 0, p.stderr
    got = lines(p.stdout, runs)
    assert got["rag"].startswith(f"report: used {runs / 'rag'} for row RAG (memory=rag on locomo)")
    assert got["none"].startswith(f"report: used {runs / 'none'} for row no context")
    assert got["old/rag"] == (f"report: skipped {runs / 'old' / 'rag'}: duplicate of row RAG — newest kept "
                          f"({runs / 'rag'})")
    assert got["rag_sample"] == f"report: skipped {runs / 'rag_sample'}: other dataset (locomo_sample; board: locomo)"
    assert got["rag_mem0"] == (f"report: skipped {runs / 'rag_mem0'}: memory=rag on locomo, settings differ on "
                               "qa_prompt (run 'mem0', board 'brief')")
    assert got["failed"] == f"report: skipped {runs / 'failed'}: failed run (2 of 2 answer calls failed)"
    assert got["train/icae"] == f"report: skipped {runs / 'train' / 'icae'}: not an eval run (train)"
    # the plug-in: no row names it, so each of its settings gets a row of its own, newest kept
    assert "for row testplug (n_turns=1) (added from runs" in got["plug1"]
    assert "for row testplug (n_turns=5) (added from runs" in got["plug5"]
    assert "duplicate of row testplug (n_turns=5) — newest kept" in got["plug5_old"]
    md = out.read_text()
    assert "| testplug (n_turns=1) (added from runs) | memory | 2 |" in md
    assert "| RAG | memory | 2 |" in md and "| ICAE | compression | no run found |" in md
    assert "rows filled: no_context, rag, testplug[n_turns=1], testplug[n_turns=5]" in p.stdout
    recs = {r["row"]: r for r in json.loads(out.with_suffix(".json").read_text())}
    assert recs["rag"]["run"] == str(runs / "rag") and recs["testplug[n_turns=5]"]["run"] == str(runs / "plug5")
    assert recs["testplug[n_turns=1]"]["added"] is True and recs["rag"]["added"] is False


def test_add_unmatched_false_skips_the_plugin_with_its_reason(runs, tmp_path):
    p = run_cli("report", "board=locomo_all", f"runs={runs / 'plug1'},{runs / 'rag'}", "add_unmatched=false",
                f"out={tmp_path / 'b.md'}")
    assert p.returncode == 0, p.stderr
    got = lines(p.stdout, runs)
    assert got["plug1"] == (f"report: skipped {runs / 'plug1'}: no row for memory=testplug on locomo "
                            "(add_unmatched=true adds one)")
    assert "used" in got["rag"] and "testplug" not in (tmp_path / "b.md").read_text()


USER_BOARD = """\
title: My systems
dataset: locomo
columns: [f1, {column: board_testmetric, label: Apple}, held, answer_p50_s]
rows:
  - {system: rag, label: RAG}
  - {system: no_context, label: nothing}
  - {system: memory=testplug, label: last 5 turns, settings: {memory.n_turns: 5}}
"""


def test_a_user_board_file_anywhere_writes_where_told(runs, tmp_path, plugin):
    mine = tmp_path / "home" / "boards"
    mine.mkdir(parents=True)
    (mine / "mine.yaml").write_text(USER_BOARD)
    out = tmp_path / "elsewhere" / "mine.md"
    # ~ expanded (HOME), run from another folder: nothing is written beside the YAML
    p = run_cli("report", "board=~/boards/mine.yaml", f"runs={runs}", f"out={out}", env={"HOME": str(tmp_path / "home")})
    assert p.returncode == 0, p.stderr
    assert sorted(x.name for x in mine.iterdir()) == ["mine.yaml"]
    md = out.read_text()
    assert md.startswith("# My systems") and out.with_suffix(".json").exists()
    header = next(ln for ln in md.splitlines() if ln.startswith("| system"))
    assert header == "| system | paradigm | n | F1 ± SE | Apple ± SE | held / q | answer p50 s | Pareto | guards |"
    # the plug-in metric: no_context measured it (no apple: 0), RAG's run did not (—, and a footnote)
    assert "| nothing | memory | 2 | 0.000 ± 0.000 | 0.000 ± 0.000 |" in md
    assert "| RAG | memory | 2 |" in md and "| —" in next(ln for ln in md.splitlines() if ln.startswith("| RAG"))
    assert "the row's run did not measure it (not among its `metrics=`): Apple on RAG" in md
    got = lines(p.stdout, runs)
    assert "for row last 5 turns" in got["plug5"]
    assert got["plug1"].endswith("settings differ on memory.n_turns (run 1, board 5)")
    # a board file (add_unmatched off by default): nothing added; a relative path from the cwd works too
    assert "added from runs" not in md
    p = run_cli("report", "board=home/boards/mine.yaml", f"runs={runs / 'plug5'}", "out=rel/mine.md", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "| last 5 turns | memory | 2 |" in (tmp_path / "rel" / "mine.md").read_text()


def test_settings_pinned_by_a_row_match_recorded_config_values(runs, tmp_path):
    """A row's settings are compared with the run's recorded config (numbers by value, any type)."""
    board = tmp_path / "b.yaml"
    board.write_text("dataset: locomo\nrows:\n  - {system: rag, settings: {memory.k: 2.0, qa_prompt: brief}}\n"
                     "  - {system: rag, row: rag10, settings: {memory.k: 10}}\n")
    p = run_cli("report", f"table={board}", f"runs={runs / 'rag'}", f"out={tmp_path / 'o.md'}")  # table= a file: a board
    assert p.returncode == 0, p.stderr
    recs = {r["row"]: r for r in json.loads((tmp_path / "o.json").read_text())}
    assert recs["rag"]["run"] == str(runs / "rag") and recs["rag10"]["run"] is None


def _bad(tmp_path: Path, text: str) -> str:
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    with pytest.raises(ReportError) as e:
        load_board(str(f))
    assert len(str(e.value).splitlines()) == 1 and str(f) in str(e.value), e.value
    return str(e.value)


def test_a_bad_board_file_stops_the_cli_in_one_line(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("dataset: locomo\nrows:\n  - {system: ragg}\n")
    p = run_cli("report", f"board={f}", f"runs={tmp_path}", f"out={tmp_path / 'o.md'}")
    assert p.returncode != 0 and not (tmp_path / "o.md").exists()
    assert p.stderr.strip() == (f"ctxbench: error: report: {f}: rows[0] (ragg): field 'system': 'ragg' is not a "
                                "registered memory or method (a plug-in must be installed or loaded). Did you mean 'rag'? "
                                + p.stderr.strip().split("Did you mean 'rag'? ")[1])


@pytest.mark.parametrize("text,says", [
    ("dataset: locomo\nrows:\n  - {label: RAG}\n", "rows[0] (RAG): field 'system': required"),
    ("dataset: locomo\nrows:\n  - {system: ragg}\n", "rows[0] (ragg): field 'system': 'ragg' is not a registered memory or method"),
    ("dataset: locomo\nrows:\n  - {system: rag, sytem: x}\n", "rows[0] (rag): field 'sytem': not a board key. Did you mean 'system'?"),
    ("rows:\n  - {system: rag}\n", "rows[0] (rag): field 'dataset': no dataset"),
    ("dataset: locomo\nrows:\n  - {system: rag, settings: [memory.k]}\n", "rows[0] (rag): field 'settings'"),
    ("dataset: locomo\ncolumns: [f2]\nrows: []\n", "columns[0]: 'f2' is neither a registered metric nor a board column. Did you mean 'f1'"),
    ("dataset: locomo\nrows:\n  - {system: rag}\n  - {system: memory=rag}\n", "rows[1] (rag): field 'row': 'rag' is also rows[0]'s id"),
    ("dataset: locomo\nrows: {system: rag}\n", "field 'rows': a list of rows is required"),
    ("dataset: [locomo\n", "cannot read YAML"),
    ("name: ../up\ndataset: locomo\nrows: []\n", "field 'name': '../up' names the output file"),
    ("kind: paper\nrows: []\n", "field 'kind': 'paper' is not a board"),
])
def test_a_bad_board_file_is_one_line_naming_file_row_and_field(tmp_path, text, says):
    assert says in _bad(tmp_path, text)


def test_a_plugin_metric_column_is_known_once_registered(tmp_path, plugin):
    f = tmp_path / "m.yaml"
    f.write_text(f"dataset: locomo\ncolumns: [{METRIC}]\nrows:\n  - {{system: {PLUG}}}\n")
    board = load_board(str(f))
    assert [c.name for c in board["columns"]] == [METRIC] and board["rows"][0]["system"] == f"memory={PLUG}"


def test_out_never_writes_over_a_file_of_a_run_folder(runs, tmp_path):
    board = load_board("locomo_all")
    with pytest.raises(ReportError, match="would write over .*results.md, a file of the run folder"):
        board_out(board, runs / "rag" / "results.md")
    assert board_out(board, runs / "rag" / "board.md") == runs / "rag" / "board.md"  # a new name there is fine
    assert board_out(board, None) == Path("outputs/report/locomo_all.md")  # never beside the YAML
    p = run_cli("report", "board=locomo_all", f"runs={runs / 'rag'}", f"out={runs / 'rag' / 'results.md'}")
    assert p.returncode != 0 and len(p.stderr.strip().splitlines()) == 1 and "would write over" in p.stderr
    mine = runs.parent / "runs_copy"
    shutil.copytree(runs / "rag", mine / "rag")
    for _ in range(2):  # its own earlier output is replaced, the run's files are untouched
        res = run_board("locomo_all", [mine], mine / "rag" / "board.md", plot=False)
        assert res["path"].exists() and (mine / "rag" / "results.json").read_bytes() == (runs / "rag" / "results.json").read_bytes()


def test_board_paths_and_run_lists_reach_the_report_as_one_string():
    """Hydra's lexer refuses ``~`` and reads a comma as a sweep: the CLI quotes these report values."""
    from ctxbench.__main__ import quote_list_value

    assert quote_list_value("board=~/b.yaml") == "board='~/b.yaml'"
    assert quote_list_value("runs=outputs/eval,multirun/eval") == "runs='outputs/eval,multirun/eval'"
    assert quote_list_value("out=~/b.md") == "out='~/b.md'" and quote_list_value("out=a,b") == "out=a,b"
