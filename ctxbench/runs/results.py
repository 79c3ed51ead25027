"""Run outputs: atomic writes of results.json / results.md / predictions.jsonl, and run metadata.

Metadata written with every result: the resolved config with secrets redacted
(:func:`ctxbench.core.secrets.redact`; ``*_env`` keys only *name* a variable and are kept), the seed,
the git commit (and whether tracked files were modified), the metric versions, and ``provenance``:
the versions of python, ctxbench and the libraries that change numbers, the platform and the device.
"""
from __future__ import annotations

import functools
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterable

from ctxbench.core.secrets import redact, redact_override
from ctxbench.core.write_faults import names_write_faults, writing
from ctxbench.core.plain import json_kind, plain_config  # noqa: F401 - re-exported

REPO_ROOT = Path(__file__).resolve().parents[2]
# distributions whose version is recorded (deepspeed is looked up, never imported: importing it is slow)
TRACKED_PACKAGES = ("ctxbench", "torch", "transformers", "peft", "accelerate", "deepspeed", "datasets",
                    "hydra-core", "sentence-transformers", "faiss-cpu", "numpy")


def run_dir(cfg: Any, default: str = ".") -> Path:
    """Hydra's output folder for this job (``hydra.run.dir``), else ``cfg.run_dir``, else ``default``."""
    try:
        from hydra.core.hydra_config import HydraConfig

        if HydraConfig.initialized():
            return Path(HydraConfig.get().runtime.output_dir)
    except ImportError:  # pragma: no cover
        pass
    return Path(cfg.get("run_dir") or default)


@names_write_faults
def atomic_write_text(path: str | Path, text: str) -> None:
    """Write to a temp file in the same folder, fsync, rename over ``path``.

    The temp file is created with ``O_EXCL | O_NOFOLLOW`` (``mkstemp``), and the rename replaces a link
    at ``path`` itself: nothing is ever written through a link. A disk or permission fault: the temp
    file is removed and :class:`~ctxbench.core.write_faults.WriteFault` names ``path``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n")


def write_jsonl(path: str | Path, rows: Iterable[dict[str, Any]]) -> None:
    atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False, default=str) + "\n" for r in rows))


def open_append(path: str | Path) -> Any:
    """``path`` opened for appending bytes (unbuffered), created if missing, never through a link (``O_NOFOLLOW``): a
    run file that is a symbolic link is a one-line :class:`~ctxbench.runs.guard.RunFolderError`."""
    import errno

    path = Path(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as e:
        if e.errno != errno.ELOOP:
            raise
        from ctxbench.runs.guard import RunFolderError

        raise RunFolderError(path, f"{path} is a symbolic link; run files are never written through links "
                                   "(replace it with a real file, or use another hydra.run.dir)") from None
    return os.fdopen(fd, "ab", buffering=0)


class JsonlAppender:
    """Append one JSON line at a time, unbuffered and fsynced, so a crash loses at most one line; a disk
    or permission fault cuts the file back to its last whole line and is a one-line
    :class:`~ctxbench.core.write_faults.WriteFault` naming it."""

    @names_write_faults
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open_append(self.path)

    def append(self, row: dict[str, Any]) -> None:
        line = memoryview((json.dumps(row, ensure_ascii=False, default=str) + "\n").encode("utf-8"))
        start = self._f.seek(0, os.SEEK_END)
        with writing(self.path, cleanup=lambda: os.ftruncate(self._f.fileno(), start)):
            while line:
                line = line[self._f.write(line):]
            os.fsync(self._f.fileno())

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> "JsonlAppender":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def read_jsonl_tolerant(path: str | Path, required: tuple[str, ...] = ()) -> tuple[list[dict[str, Any]], int]:
    """Rows of a JSONL file the evaluator wrote; a torn last line (crash mid-write) is dropped.

    Returns (rows, number of dropped lines). A malformed line that is not the last, a line that is
    not a JSON object, or an object without one of the ``required`` keys is a one-line
    :class:`~ctxbench.data.errors.DataError` naming the file and the line.
    """
    from ctxbench.data.errors import DataError

    path = Path(path)
    if not path.exists():
        return [], 0
    lines = path.read_bytes().splitlines()
    rows, dropped = [], 0
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line.decode("utf-8"))
        except (ValueError, RecursionError) as e:  # JSONDecodeError, UnicodeDecodeError, nesting
            if i == len(lines):
                dropped += 1
                continue
            why = (e.msg if isinstance(e, json.JSONDecodeError) else "not UTF-8" if isinstance(e, UnicodeDecodeError)
                   else "nested too deeply" if isinstance(e, RecursionError) else str(e))
            raise DataError(path, f"malformed JSON ({why}); fix or delete the line to resume",
                            record=f"line {i}") from None
        if not isinstance(row, dict):
            raise DataError(path, f"expected a JSON object, got a JSON {json_kind(row)}; fix or delete the line "
                                  "to resume", record=f"line {i}")
        for key in required:
            if key not in row:
                raise DataError(path, "missing required field; fix or delete the line to resume",
                                record=f"line {i}", field=key)
        rows.append(row)
    return rows, dropped



def git_info(root: str | Path | None = None) -> dict[str, Any]:
    """``{"commit", "dirty"}`` of the ctxbench source tree (``root``, default the package's parent).

    ``dirty`` is True when a tracked file is modified (staged or not); untracked files do not count.
    Both are None when ``root`` is not the top of a git work tree (ctxbench installed from a wheel,
    even inside someone else's repository) or git is missing.
    """
    root = Path(root) if root is not None else REPO_ROOT

    def run(*args: str) -> str | None:
        try:
            p = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return p.stdout.strip() if p.returncode == 0 else None

    top = run("rev-parse", "--show-toplevel")
    if not top or Path(top).resolve() != root.resolve():
        return {"commit": None, "dirty": None}
    commit = run("rev-parse", "HEAD")
    status = run("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"commit": commit, "dirty": bool(status) if status is not None else None}


def package_version(dist: str) -> str | None:
    """Installed version of distribution ``dist`` (e.g. ``hydra-core``), None when not installed."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def device_info() -> dict[str, Any]:
    """``{"type": "cuda", "name", "count", "cuda"}`` when torch sees a GPU, else ``{"type": "cpu"}``.

    A process that never imported torch (``score``, an API model) ran nothing on a GPU: it is recorded
    as ``{"type": "cpu", "torch_loaded": False}`` rather than paying torch's import to ask.
    """
    torch = sys.modules.get("torch")
    if torch is None:
        return {"type": "cpu", "torch_loaded": False}
    try:
        if torch.cuda.is_available():
            return {"type": "cuda", "name": torch.cuda.get_device_name(0), "count": torch.cuda.device_count(),
                    "cuda": torch.version.cuda}
    except Exception as e:  # noqa: BLE001 - a broken driver must not lose the results
        return {"type": "cpu", "cuda_error": f"{type(e).__name__}: {e}"[:200]}
    return {"type": "cpu"}


@functools.lru_cache(maxsize=1)
def _installed() -> tuple[tuple[tuple[str, str | None], ...], tuple[tuple[str, str], ...]]:
    """Package versions and platform: fixed for a process, so looked up once."""
    return (tuple((d, package_version(d)) for d in TRACKED_PACKAGES),
            (("os", platform.system()), ("release", platform.release()), ("machine", platform.machine())))


def provenance(placement: dict[str, Any] | None = None) -> dict[str, Any]:
    """What produced a result: python, package versions (None = not installed), platform, device,
    and (eval) ``placement``: the device and dtype the evaluated model actually ran in (as loaded,
    ``auto`` resolved) and the number of processes.

    The git state is recorded beside it (:func:`git_info`).
    """
    from ctxbench.core.registry import used_plugins

    packages, plat = _installed()
    out = {"python": platform.python_version(), "packages": dict(packages), "platform": dict(plat),
           "device": device_info()}
    if used_plugins():  # plug-ins beside ctxbench's own: name, distribution and version, or file and sha256
        out["plugins"] = used_plugins()
    if placement is not None:
        out["placement"] = dict(placement)
    return out


def run_metadata(cfg: Any, command: str, extra: dict[str, Any] | None = None,
                 placement: dict[str, Any] | None = None) -> dict[str, Any]:
    plain = plain_config(cfg)
    seed = plain.get("seed") if isinstance(plain, dict) else None
    return {"command": command, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "argv": [redact_override(a) for a in sys.argv[1:]], "seed": seed, "git": git_info(),
            "provenance": provenance(placement), "config": redact(plain), **(extra or {})}


SUMMARY_PACKAGES = ("ctxbench", "torch", "transformers", "peft")


def provenance_line(results: dict[str, Any]) -> str:
    """``ctxbench 0.1.0 · python 3.12.3 · torch 2.13.0 · … · cpu · git abc1234 (dirty)`` for results.md."""
    prov = results.get("provenance") or {}
    pk = prov.get("packages") or {}
    parts = [f"{d} {pk[d]}" for d in SUMMARY_PACKAGES[:1] if pk.get(d)]
    parts += [f"python {prov['python']}"] if prov.get("python") else []
    parts += [f"{d} {pk[d]}" for d in SUMMARY_PACKAGES[1:] if pk.get(d)]
    dev = prov.get("device") or {}
    if dev.get("type"):
        parts.append(dev["type"] + (f" {dev['name']}" if dev.get("name") else "")
                     + (f" ×{dev['count']}" if (dev.get("count") or 1) > 1 else ""))
    place = prov.get("placement") or {}
    if place.get("device"):
        procs = int(place.get("processes") or 1)
        parts.append(f"model on {place['device']} {place.get('dtype')}"
                     + (f" ({procs} processes)" if procs > 1 else ""))
    for p in prov.get("plugins") or []:  # plug-ins beside ctxbench's own provenance
        parts.append(f"plug-in {p.get('kind')}={p.get('name')} from "
                     + (f"{p['distribution']} {p.get('version')}" if p.get("distribution")
                        else f"{os.path.basename(str(p.get('file')))} sha256:{str(p.get('sha256'))[:12]}"))
    git = results.get("git") or {}
    commit = git.get("commit")
    parts.append(f"git {commit[:7]}{' (dirty)' if git.get('dirty') else ''}" if commit else "git none")
    return " · ".join(parts)


def _fmt(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.1f}" if abs(v) >= 100 else f"{v:.4f}"
    return str(v)


def _fmt_se(row: dict[str, Any], metric: str) -> str:
    """``0.4123 ± 0.0321``; just the mean when the row has no stderr (n < 2, or an older results.json)."""
    se = row.get(f"{metric}_stderr")
    return _fmt(row.get(metric)) + (f" ± {se:.4f}" if row.get(metric) is not None and se is not None else "")


def _held(cost: dict[str, Any]) -> str:
    """results.json ``cost.held_per_question`` as one cell: the total and its kinds (or why there is none)."""
    h = cost.get("held_per_question")
    if not h:
        return "not counted (results predate ctxbench-cost-4)"
    return (f"{_fmt(h['total'])} ({_fmt(h['text'])} text + {_fmt(h['kv_slots'])} KV + "
            f"{_fmt(h['soft_slots'])} soft; {_fmt(h['kv_bytes'])} KV bytes)")


def _judging(cost: dict[str, Any]) -> str:
    """results.json ``cost.judging_per_question`` as one cell (or why there is none)."""
    j = cost.get("judging_per_question")
    if not j:
        return "not judged by an LLM"
    return f"{_fmt(j['prompt'])} + {_fmt(j['completion'])} = {_fmt(j['total'])} ({_fmt(j['calls'])} calls)"


def warnings_section(results: dict[str, Any]) -> list[str]:
    """results.json ``health.warnings`` (:mod:`ctxbench.metrics.guards`) as a list, or no lines."""
    warnings = (results.get("health") or {}).get("warnings") or []
    if not warnings:
        return []
    return ["", "## Warnings", ""] + [f"- {'expected: ' if w.get('expected') else ''}{w.get('message')}"
                                     for w in warnings]


def structured_table(rep: dict[str, Any]) -> list[str]:
    """The ``cost.structured_output`` table (one row per phase and kind of call), or no lines."""
    if not rep:
        return []
    fields = ("calls", "valid", "invalid", "truncated", "failed", "retried", "retries_saved", "normalised")
    out = ["", "## Structured output", "", "| phase | call | " + " | ".join(fields) + " |", "|---|---|" + "---|" * len(fields)]
    for phase, ph in rep.items():
        for kind, c in sorted((ph.get("by_kind") or {}).items()):
            out.append(f"| {phase} | {kind} | " + " | ".join(str(c.get(f, 0)) for f in fields) + " |")
    return out


def results_markdown(results: dict[str, Any], metric_names: list[str], title: str = "Results") -> str:
    """A per-category table (rows: categories then overall; cells: mean ± bootstrap stderr; failed answers
    count 0), the failed count and the answered-only numbers, the numbers by evidence age (LoCoMo), the corrected gold and its ceiling, the
    statistics (:mod:`ctxbench.runs.stats_markdown`) and cost."""
    from ctxbench.core.markdown_table import md_table
    from ctxbench.runs.stats_markdown import corrected_lines, evidence_age_lines, failed_lines, statistics_lines
    from ctxbench.metrics.judges.leniency import judges_section, lenient_metrics

    lines = [f"# {title}", ""]
    rows = [[name, _fmt(row.get("id")), _fmt(row["n"]), *(_fmt_se(row, m) for m in metric_names)]
            for name, row in results["by_category"].items()]
    ov = results["overall"]
    rows.append(["**overall**", "", _fmt(ov["n"]), *(_fmt_se(ov, m) for m in metric_names)])
    lenient = lenient_metrics(results)  # a judge flagged lenient on the calibration set: marked in the header
    header = [f"{m} (lenient)" if m in lenient else m for m in metric_names]
    lines += md_table(["category", "id", "n", *header], rows, formatter=str).split("\n")
    lines += failed_lines(results, metric_names, _fmt_se)
    lines += evidence_age_lines(results, metric_names, _fmt_se)
    lines += judges_section(results)
    qa = results.get("qa_prompt") or {}
    if qa.get("name"):
        lines += ["", f"Answer prompt: {qa['name']} ({qa.get('version')}; {qa.get('source')}), "
                      f"at most {qa.get('answer_max_tokens')} new tokens."]
    if results.get("kept_not_scored"):
        lines += ["", f"{results['kept_not_scored']} more answered questions (from a run with a higher limit) are "
                      "kept in predictions.jsonl, not scored here."]
    how = results.get("stderr") or {}
    if how.get("method") == "bootstrap":
        lines += ["", f"± = bootstrap standard error over the category's questions ({how.get('resamples')} "
                      f"resamples, seed {how.get('seed')}); none for n < 2."]
    lines += corrected_lines(results, metric_names, _fmt_se) + statistics_lines(results, metric_names)
    cost = results.get("cost")
    if cost and cost.get("n_questions"):
        tq, lat, mem = cost["tokens_per_question"], cost["latency_s"], cost["memory_per_history"]
        lines += ["", "## Cost", "",
                  "| measure | value |", "|---|---|",
                  f"| questions / histories | {cost['n_questions']} / {cost['n_histories']} |",
                  f"| held per question: text tokens + KV slots + soft slots | {_held(cost)} |",
                  f"| answering tokens per question: read (prompt) / written (completion) | "
                  f"{_fmt(tq['answer_prompt'])} / {_fmt(tq['answer_completion'])} |",
                  f"| construction tokens per question (amortised): prompt + completion | "
                  f"{_fmt(tq['construction_prompt_amortised'])} + {_fmt(tq['construction_completion_amortised'])} |",
                  f"| judging tokens per question: prompt + completion | {_judging(cost)} |",
                  f"| total tokens per question (answering + construction + judging) | {_fmt(tq['total'])} |",
                  f"| LLM calls per question (answer + construction) | {_fmt(cost['llm_calls_per_question']['total'])} |",
                  f"| failed LLM calls | {cost['failed_calls']} |",
                  f"| ingest latency p50 / p95 (s) | {_fmt(lat['ingest']['p50'])} / {_fmt(lat['ingest']['p95'])} |",
                  f"| answer latency p50 / p95 (s) | {_fmt(lat['answer']['p50'])} / {_fmt(lat['answer']['p95'])} |",
                  f"| memory per history: items / tokens / KV bytes | {_fmt(mem['items'])} / {_fmt(mem['tokens'])} / "
                  f"{_fmt(mem['kv_bytes'])} |"]
        lines += structured_table(cost.get("structured_output") or {})
    elif (cost or {}).get("judging_per_question"):  # score: only judging is this run's own cost
        lines += ["", f"Judging tokens per question: prompt + completion {_judging(cost)}."]
    lines += warnings_section(results)
    versions = results.get("metrics", {})
    if versions:
        lines += ["", "## Metrics", ""] + [f"- `{k}` {v['version']}: {v['reference']}" for k, v in versions.items()]
    git = results.get("git") or {}
    if results.get("provenance"):
        lines += ["", f"Provenance: {provenance_line(results)}"]
    lines += ["", f"git commit: {git.get('commit') or 'none'}{' (dirty)' if git.get('dirty') else ''}; "
                  f"seed: {results.get('seed')}; created {results.get('created')}", ""]
    return "\n".join(lines)
