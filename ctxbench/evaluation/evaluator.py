"""The one evaluator: ``python -m ctxbench eval`` runs a system over a dataset, ``score`` scores a file.

Every system (compression method or memory system) is judged here with the same prompts, metrics
and cost accounting::

    for each history:   system.ingest(history)            (once; skipped if all its questions are done)
        for each question:  system.answer(question) → Prediction(text, usage)
                            → one line appended to predictions.jsonl (flushed, fsynced)
    at the end:         metrics per line → predictions.jsonl, results.json, results.md

This module holds the entry points (:func:`main`, :func:`evaluate_samples`; ``score``'s
:func:`~ctxbench.evaluation.score.score_main`); each step is a module of its own:

- :mod:`~ctxbench.evaluation.systems`: the system of ``method=`` / ``memory=``, one per history
- :mod:`~ctxbench.evaluation.run`: the run loop (plan, resume, answer), on :mod:`~ctxbench.evaluation.pool`'s workers
- :mod:`~ctxbench.evaluation.resume`: what a rerun in the same run folder (``hydra.run.dir=DIR``) skips
- :mod:`~ctxbench.evaluation.cost`: the cost recorded for every answer and ingest
- :mod:`~ctxbench.evaluation.shard`: histories split across processes under ``accelerate launch``
- :mod:`~ctxbench.evaluation.finalize`: the three result files; :mod:`~ctxbench.evaluation.score`: metrics
- :mod:`~ctxbench.evaluation.tasks`: ``task=perplexity|reconstruction|choice``, the papers' own measures
- :mod:`~ctxbench.evaluation.protocol`: ``task=compression`` (the kvpress protocol), the QA path at a ratio

Models run where :mod:`ctxbench.models.loading` resolves ``model.device`` / ``llm.device`` (``auto``:
accelerate's device, bfloat16 on a GPU); results.json records the device and dtype they ran in
(``provenance.placement``).
"""
from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

from ctxbench.core.errors import CtxbenchError
from ctxbench.core.system import System
from ctxbench.core.types import Sample
from ctxbench.data.dates import report_line as report_dates_line, session_date_report
from ctxbench.data.errors import DataError
from ctxbench.evaluation.finalize import RESULTS_JSON, finalize, summary_line
from ctxbench.evaluation.protocol import protocol_of, protocol_record, query_aware_samples
from ctxbench.evaluation.resume import SHARD_GLOB, beyond_plan
from ctxbench.evaluation.resume import answered as _answered  # noqa: F401  (tests/test_bad_input_run_files.py)
from ctxbench.evaluation.run import run_system
from ctxbench.evaluation.score import default_metrics, load_prediction_file, metrics_of, score_main  # noqa: F401
from ctxbench.evaluation.shard import merge_records, process_state, run_sharded
from ctxbench.evaluation.systems import (HistorySystems, build_history_systems, build_system,  # noqa: F401
                                         history_dir, qa_prompt_record, resolve_concurrency)
from ctxbench.metrics.base import build_metrics
from ctxbench.metrics.health import health_line
from ctxbench.metrics.structured import report_line
from ctxbench.runs.guard import claim as claim_run_dir
from ctxbench.runs.results import run_dir
from ctxbench.runs.wandb_log import check_logger, log_results


class EvalFailed(CtxbenchError, RuntimeError):
    """Too many LLM calls, structured outputs or answers failed for the numbers to mean anything."""


def bind_ruler_tokenizer(cfg: Any) -> None:
    """``dataset=ruler`` with ``dataset.tokenizer`` null: the evaluated model's tokenizer
    (:func:`ctxbench.data.ruler.loader.model_tokenizer`), as RULER counts its length; the packaged
    SmolLM2's, with one warning, when the config does not name one."""
    if str(cfg.dataset.get("name")) != "ruler" or cfg.dataset.get("tokenizer"):
        return
    from ctxbench.data.ruler.loader import PACKAGED, model_tokenizer

    tok, where = model_tokenizer(cfg)
    if tok is None:
        print(f"warning: dataset=ruler: {where} names no tokenizer; dataset.length counts SmolLM2's tokens "
              "(set dataset.tokenizer= to the evaluated model's tokenizer)", file=sys.stderr)
    cfg.dataset.tokenizer = tok or PACKAGED


def main(cfg: Any) -> dict[str, Any]:
    """``python -m ctxbench eval memory=NAME|method=NAME dataset=NAME [limit=N] [hydra.run.dir=DIR]``."""
    from ctxbench.core.registry import build

    seed_everything(int(cfg.seed))
    out = run_dir(cfg)
    out.mkdir(parents=True, exist_ok=True)
    claim_run_dir(out, cfg)  # this process only, and this config only (ctxbench/runs/guard.py)
    check_logger(cfg)  # logger=wandb without the package: one line now, not after the answers
    bind_ruler_tokenizer(cfg)  # dataset=ruler counts its length in the evaluated model's tokenizer
    samples = build("dataset", cfg.dataset)
    if cfg.task.name not in ("qa", "compression"):  # the papers' own measures (evaluation/tasks/): same results files
        return run_task(cfg, str(cfg.task.name), out, samples)
    protocol = protocol_of(cfg)  # task=compression: the QA path, every system at task.ratio (evaluation/protocol.py)
    if protocol is not None and protocol.query_aware:
        samples = query_aware_samples(samples, protocol.ask_again)
    if not any(s.questions for s in samples):
        raise DataError(f"dataset={cfg.dataset.name}", "has no questions to answer (eval needs a QA dataset)")
    if cfg.estimate:  # the cost before any run: nothing built but tokenizers (evaluation/estimate.py)
        from ctxbench.evaluation.estimate import estimate, print_estimate

        record = estimate(cfg, samples, out)
        print_estimate(record, out)
        return record
    dates = session_date_report(samples)  # what the session dates did not say: results.json, warned once
    if report_dates_line(dates):
        print(f"warning: dataset={cfg.dataset.name}: {report_dates_line(dates)}", file=sys.stderr)
    systems, llm, name = build_history_systems(cfg, out)
    resumed = bool(_answered(out))  # answers written before this process: reuse counts only what follows
    metrics = metrics_of(cfg, llm)  # with a judge LLM: built before any question, so a bad one fails now
    workers, workers_from = resolve_concurrency(cfg.concurrency, llm)
    state = process_state()
    records = answer_all(cfg, systems, llm, workers, list(samples), out, state)
    if records is None:  # not rank 0: rank 0 has written the results
        return {}
    system = systems.first
    extra = {"system": name, "dataset": str(cfg.dataset.name), "qa_prompt": qa_prompt_record(system),
             "concurrency": {"workers": workers, "from": workers_from,
                             "answers": "in dataset order" if system.answer_writes_state or workers == 1
                             or getattr(system, "borrows_backend", False) else "in parallel"},
             "llm": llm_record(cfg, llm), "session_dates": dates, **baseline_record(system)}
    if systems.lent_record is not None:  # a system borrowed the backend (evaluation/lend.py)
        extra["lent_backend"] = systems.lent_record
    quirks = {k: int(v) for k, v in (getattr(samples, "quirks", None) or {}).items() if v}
    if quirks:  # odd records the loader handled, in the file read (report table=longmemeval reads the drops)
        extra["dataset_quirks"] = quirks
    if llm is not None:  # a memory system: work shared across histories (evaluation/reuse.py)
        extra["reuse"] = reuse_record(cfg, samples, llm, getattr(system, "embedder", None), resumed)
    if protocol is not None:
        extra["protocol"] = protocol_record(protocol)
    results = finalize(out, records, metrics, cfg, "eval", with_cost=True, extra=extra, progress=bool(cfg.progress),
                       max_failed_fraction=float(cfg.max_failed_fraction), placement=placement_of(system, llm, state),
                       bypass_held_share=float(cfg.bypass_held_share),
                       kept=beyond_plan(out, [str(r["id"]) for r in records]), errata=getattr(samples, "errata", None))
    if state is not None:
        state.wait_for_everyone()
    log_results(cfg, out, "eval")  # logger=wandb: results.json, its tables (ctxbench/runs/wandb_log.py)
    health = results["health"]
    structured = report_line((results.get("cost") or {}).get("structured_output") or {})
    print(f"eval {name} on {cfg.dataset.name}: {summary_line(results, [m.name for m in metrics])}; "
          f"{health_line(health)}{'; ' + structured if structured else ''} → {out}")
    if health["status"] != "ok":
        raise EvalFailed(f"eval {name}: {health['reason']}; the numbers in {out / RESULTS_JSON} do not measure the "
                         f"system ({health['remedy']})")
    return results


def answer_all(cfg: Any, systems: HistorySystems, llm: Any, workers: int, samples: list[Sample], out: Path,
               state: Any) -> list[dict[str, Any]] | None:
    """Every question answered in this process, or split across ``state``'s processes (None on ranks > 0,
    once rank 0 has written the results)."""
    run_kw = dict(llm=llm, limit=cfg.limit, progress=bool(cfg.progress), concurrency=workers,
                  log_samples=bool(cfg.log_samples), protocol_pure=bool(cfg.protocol_pure))
    if state is None:
        records = run_system(systems, samples, out, **run_kw)
        if any(out.glob(SHARD_GLOB)):  # resumed from a killed multi-process run: its shard files are merged
            records = merge_records(out, records, [str(r["id"]) for r in records])
        return records
    gathered = run_sharded(systems, samples, out, state, **run_kw)  # `accelerate launch -m ctxbench eval ...`
    if gathered is None:
        state.wait_for_everyone()
    return gathered


def reuse_record(cfg: Any, samples: Any, llm: Any, embedder: Any, resumed: bool) -> dict[str, Any]:
    """results.json ``reuse`` over the histories this run plans (``limit`` applied as the estimate applies it)."""
    from ctxbench.evaluation.estimate import planned_questions
    from ctxbench.evaluation.reuse import measured

    return measured((h for h, _ in planned_questions(samples, cfg.limit)), llm, embedder, resumed)


def llm_record(cfg: Any, llm: Any) -> dict[str, Any] | None:
    """results.json ``llm``: the shared backend memory systems ran on (None for a method); ``served_models``:
    this process's successful calls per model the server said answered them (``"cache"``: a cached
    reply stored without it)."""
    if llm is None:
        return None
    from ctxbench.llm.token_count import token_counts_record

    return {"backend": str(cfg.llm.name), "model": llm.model_name, "context_window": llm.context_window,
            "served_models": llm.meter.served_models(), "meter": llm.meter.snapshot(), "token_counts": token_counts_record(llm),
            "truncated_calls": getattr(llm, "truncated_calls", None), **backend_record(llm)}


def baseline_record(system: Any) -> dict[str, Any]:
    """results.json ``whole_history_baseline: true`` for a system that answers from the whole history
    (``System.whole_history_baseline``: its held-context warning is expected, ctxbench/metrics/guards.py)."""
    return {"whole_history_baseline": True} if getattr(system, "whole_history_baseline", False) else {}


def backend_record(llm: Any) -> dict[str, Any]:
    """What the backend itself adds to results.json ``llm`` (``llm=openai``: ``structured_mode``, ``retries_saved``)."""
    own = getattr(llm, "results_record", None)
    return own() if callable(own) else {}


def placement_of(system: System, llm: Any, state: Any) -> dict[str, Any]:
    """Where the evaluated model ran (the system's own, else the ``llm=hf`` backend's; an API model
    has none: device and dtype null) and how many processes shared the histories."""
    own = system.placement()
    if own is None and llm is not None and callable(getattr(llm, "placement", None)):
        own = llm.placement()
    out: dict[str, Any] = dict(own or {"device": None, "dtype": None})
    out["processes"] = 1 if state is None else int(state.num_processes)
    return out


def seed_everything(seed: int) -> None:
    """Python's and numpy's generators, and torch's if it is already imported (an API-model eval stays torch-free)."""
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:  # pragma: no cover
        pass
    if "torch" in sys.modules:
        sys.modules["torch"].manual_seed(seed)


def run_task(cfg: Any, task: str, out: Path, samples: list[Sample]) -> dict[str, Any]:
    """``eval task=perplexity|reconstruction|choice``: a registered task (ctxbench/evaluation/tasks/) scores ``method=``."""
    from ctxbench.core.registry import get

    results = get("task", task)(cfg, out, samples)
    if (out / RESULTS_JSON).is_file():
        log_results(cfg, out, "eval")
    first = (results.get("rows") or [{}])[0]
    shown = ", ".join(f"{k}={first[k]}" for k in ("system", "length", "category", "ppl", "accuracy", "bleu4")
                      if first.get(k) is not None)
    print(f"eval task={task} {results['system']} on {cfg.dataset.name}: {len(results.get('rows') or [])} rows "
          f"({shown}) → {out}")
    return results


def evaluate_samples(system: Any, samples: list[Sample], out_dir: str | Path, *, cfg: Any = None,
                     llm: Any = None, metrics: list[str] | None = None, limit: int | None = None,
                     progress: bool = False, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run ``system`` on in-memory samples and write the three result files (no Hydra needed); a
    :class:`~ctxbench.data.samples.Samples` with ``errata`` is also scored under the corrected gold."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    records = run_system(system, samples, out, llm=llm, limit=limit, progress=progress)
    ms = build_metrics(metrics or default_metrics(), llm=llm)
    extra = extra or {"system": type(system).__name__}
    return finalize(out, records, ms, cfg if cfg is not None else {}, "eval", with_cost=True,
                    extra={"qa_prompt": qa_prompt_record(system), **baseline_record(system), **extra}, progress=progress,
                    kept=beyond_plan(out, [str(r["id"]) for r in records]), errata=getattr(samples, "errata", None))
