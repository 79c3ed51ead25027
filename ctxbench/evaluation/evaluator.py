"""The one evaluator: ``python -m ctxbench eval`` runs a system over a dataset, ``score`` scores a file.

Every system (compression method or memory system) is judged here with the same prompts, metrics
and cost accounting::

    for each history:   system.ingest(history)            (once; skipped if all its questions are done)
        for each question:  system.answer(question) → Prediction(text, usage)
                            → one line appended to predictions.jsonl (flushed, fsynced)
    at the end:         metrics per line → predictions.jsonl, results.json, results.md

A rerun in the same run folder (``hydra.run.dir=DIR``) skips questions already in
predictions.jsonl, so a killed run resumes without answering anything twice.

Models run where :mod:`ctxbench.models.loading` resolves ``model.device`` / ``llm.device`` (``auto``:
accelerate's device, bfloat16 on a GPU); results.json records the device and dtype they ran in
(``provenance.placement``). Under ``accelerate launch`` (or torchrun) the histories are split across
the processes with accelerate (``split_between_processes``); each rank appends its answers to
``predictions.rank<k>.jsonl`` (a killed run resumes from them, at any process count) and rank 0
gathers every record (``gather_object``) into one predictions.jsonl in dataset order.
"""
from __future__ import annotations

import random
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from tqdm import tqdm

from ctxbench.data.errors import DataError
from ctxbench.core.errors import CtxbenchError
from ctxbench.evaluation.systems import (HistorySystems, build_history_systems, build_system, history_dir,  # noqa: F401
                           qa_prompt_record, resolve_concurrency)
from ctxbench.llm.base import preflight
from ctxbench.llm.scope import call_scope
from ctxbench.metrics.aggregate import aggregate, metric_versions, score_records
from ctxbench.metrics.base import Metric, answer_text, build_metrics
from ctxbench.metrics.cost import aggregate_cost
from ctxbench.metrics.health import DEFAULT_MAX_FAILED_FRACTION, health_line, run_health
from ctxbench.metrics.structured import report_line
from ctxbench.runs.results import run_dir as results_run_dir
from ctxbench.runs.results import (JsonlAppender, atomic_write_text, read_jsonl_tolerant, results_markdown, run_metadata,
                      write_json, write_jsonl)
from ctxbench.runs.guard import claim as claim_run_dir
from ctxbench.core.secrets import scrub_text
from ctxbench.core.system import ContractError, System
from ctxbench.core.types import Prediction, Question, Sample, Usage

DEFAULT_METRICS = ["f1", "f1_set", "bleu1", "rouge1", "rouge2", "rougeL"]
PREDICTIONS, RESULTS_JSON, RESULTS_MD = "predictions.jsonl", "results.json", "results.md"


# ---- run folder and common output ----------------------------------------------------------------

def run_dir(cfg: Any) -> Path:
    return results_run_dir(cfg, ".")


class EvalFailed(CtxbenchError, RuntimeError):
    """Too many LLM calls, structured outputs or answers failed for the numbers to mean anything."""


def finalize(out_dir: Path, records: list[dict[str, Any]], metrics: list[Metric], cfg: Any, command: str,
             with_cost: bool, extra: dict[str, Any] | None = None, progress: bool = True,
             max_failed_fraction: float = DEFAULT_MAX_FAILED_FRACTION,
             placement: dict[str, Any] | None = None) -> dict[str, Any]:
    """Score ``records``; write predictions.jsonl (with metric fields), results.json, results.md.

    Failed answers (``failed: true``) are kept in predictions.jsonl but not scored; ``health``
    says how many calls, structured outputs and answers failed (:mod:`ctxbench.metrics.health`).
    ``placement`` (where the models ran: device, dtype, processes) goes into ``provenance``.
    """
    names = [m.name for m in metrics]
    answered = [r for r in records if not r.get("failed")]
    scored = score_records(answered, metrics, progress=progress)
    results = aggregate(scored, names)
    results["metrics"] = metric_versions(metrics)
    if with_cost:
        results["cost"] = aggregate_cost(records)
        results["health"] = run_health(records, max_failed_fraction)
    by_id = {str(r["id"]): r for r in scored}
    scored = [by_id.get(str(r["id"]), r) for r in records]  # failed ones as they are, in dataset order
    results.update(run_metadata(cfg, command, extra, placement=placement))
    write_jsonl(out_dir / PREDICTIONS, scored)
    write_json(out_dir / RESULTS_JSON, results)
    ex = extra or {}
    title = command + (f": {ex['system']}" if ex.get("system") else "")
    title += f" on {ex['dataset']}" if ex.get("dataset") else ""
    atomic_write_text(out_dir / RESULTS_MD, results_markdown(results, names, title=title))
    return results


def summary_line(results: dict[str, Any], names: list[str]) -> str:
    ov = results["overall"]
    parts = [f"n={ov['n']}"] + [f"{m}={ov[m]:.4f}" for m in names if ov.get(m) is not None]
    return " ".join(parts)


def _judge_llm(cfg: Any, llm: Any = None) -> Any:
    names = [str(m) for m in (cfg.get("metrics") or DEFAULT_METRICS)]
    if "llm_judge" not in names:
        return None
    from ctxbench.core.registry import build

    judge_cfg = cfg.get("judge_llm") or cfg.get("llm")
    if judge_cfg is None:
        raise DataError("metrics", "llm_judge needs a judge LLM: set judge_llm or llm", field="llm_judge")
    if llm is not None and cfg.get("judge_llm") is None:
        return llm
    judge = build("llm", judge_cfg)
    preflight(judge)
    return judge


# ---- score ---------------------------------------------------------------------------------------

PREDICTIONS_HINT = ("predictions= takes the predictions.jsonl that `python -m ctxbench eval` writes in its run folder "
                    "(outputs/eval/<run>/predictions.jsonl, or that folder)")


def load_prediction_file(path: str | Path) -> list[dict[str, Any]]:
    """Lines {id, prediction, answer, category, [category_name, adversarial_answer, question, ...]}.

    Any problem is a :class:`DataError` naming the file, the line and the field; what each field
    accepts is in :mod:`ctxbench.data.predictions`.
    """
    from ctxbench.data.paths import resolve
    from ctxbench.data.predictions import read_prediction_lines

    p = resolve(path, what="predictions", hint=PREDICTIONS_HINT)
    if p.is_dir():  # an eval run folder: its predictions.jsonl
        if not (p / "predictions.jsonl").is_file():
            raise DataError(p, f"a folder without predictions.jsonl; {PREDICTIONS_HINT}")
        p = p / "predictions.jsonl"
    return read_prediction_lines(p)


def score_main(cfg: Any) -> dict[str, Any]:
    """``python -m ctxbench score predictions=FILE.jsonl [metrics=[...]] hydra.run.dir=DIR``."""
    if not cfg.get("predictions"):
        raise DataError("score", "set predictions=FILE.jsonl", field="predictions")
    records = load_prediction_file(cfg.predictions)
    metrics = build_metrics([str(m) for m in (cfg.get("metrics") or DEFAULT_METRICS)], llm=_judge_llm(cfg),
                            judge=cfg.get("judge"))
    out = run_dir(cfg)
    results = finalize(out, records, metrics, cfg, "score", with_cost=False,
                       extra={"predictions": str(cfg.predictions)}, progress=bool(cfg.get("progress", True)))
    print(f"score: {summary_line(results, [m.name for m in metrics])} → {out}")
    return results


# ---- eval ----------------------------------------------------------------------------------------

def question_record(q: Question, history_id: str) -> dict[str, Any]:
    rec: dict[str, Any] = {"id": q.id, "history_id": history_id, "question": q.question,
                           "answer": answer_text(q.answer), "category": q.category,
                           "category_name": q.category_name}
    if q.adversarial_answer is not None:
        rec["adversarial_answer"] = q.adversarial_answer
    if q.evidence:
        rec["evidence"] = list(q.evidence)
    return rec


def _read_predictions(pred_path: Path) -> dict[str, dict[str, Any]]:
    """The answers an earlier run wrote (a torn last line dropped and re-answered); a line whose
    id, prediction or failed flag has the wrong type is a DataError naming the file and line."""
    existing, dropped = read_jsonl_tolerant(pred_path, required=("id",))
    for i, r in enumerate(existing, 1):
        for key, ok, want in (("id", isinstance(r["id"], (str, int)) and not isinstance(r["id"], bool),
                               "a string or an integer"),
                              ("prediction", isinstance(r.get("prediction", ""), str), "a string"),
                              ("failed", isinstance(r.get("failed", False), bool), "true or false")):
            if not ok:
                raise DataError(pred_path, f"{r.get(key)!r:.40} is not {want}; fix or delete the line "
                                           "to resume", record=i, field=key)
    if dropped:
        tqdm.write(f"eval: dropped a torn last line of {pred_path} (interrupted write); it will be re-answered")
        write_jsonl(pred_path, existing)
    return {str(r["id"]): r for r in existing}


def _answered(out_dir: Path) -> dict[str, dict[str, Any]]:
    """Every answer already written: the merged file and any per-rank shard files."""
    done: dict[str, dict[str, Any]] = {}
    for path in [out_dir / PREDICTIONS, *sorted(out_dir.glob(SHARD_GLOB))]:
        done.update(_read_predictions(path))
    return done


SHARD_GLOB = "predictions.rank*.jsonl"


def merge_records(out_dir: Path, records: list[dict[str, Any]], order: list[str]) -> list[dict[str, Any]]:
    """Rank 0, with every rank's records gathered: one predictions.jsonl in dataset order, shard files removed.

    The merged file is written (atomically) before any shard file goes, so a crash in between loses nothing.
    """
    done = {str(r["id"]): r for r in records}
    missing = [q for q in order if q not in done]
    if missing:
        raise RuntimeError(f"{len(missing)} questions have no prediction after gathering the ranks' answers "
                           f"(first: {missing[0]})")
    rows = [done[q] for q in order]
    write_jsonl(out_dir / PREDICTIONS, rows)
    for f in out_dir.glob(SHARD_GLOB):
        f.unlink()
    return rows


def plan(samples: list[Sample], limit: int | None) -> list[tuple[Sample, list[Question]]]:
    """The histories and questions to answer: the first ``limit`` questions in dataset order."""
    work: list[tuple[Sample, list[Question]]] = []
    seen: set[str] = set()
    budget = None if limit in (None, 0) else int(limit)
    for s in samples:
        qs = []
        for q in s.questions:
            if budget is not None and budget <= 0:
                break
            if q.id in seen:
                raise DataError(s.history.id, "duplicate question id (ids must be unique across the dataset)",
                                record=q.id, field="id")
            seen.add(q.id)
            qs.append(q)
            if budget is not None:
                budget -= 1
        if qs:
            work.append((s, qs))
    return work


def run_system(system: System | Any, samples: list[Sample], out_dir: str | Path, *, llm: Any = None,
               limit: int | None = None, progress: bool = True, shard: int | None = None,
               concurrency: int = 1, log_samples: bool = False) -> list[dict[str, Any]]:
    """Answer every question (the first ``limit``), resuming from what ``out_dir`` already holds.

    ``system`` is one :class:`System` that ingests every history in turn, or a :class:`HistorySystems`
    (one instance per history, each in its own folder: what ``eval`` uses). With ``concurrency`` N > 1
    the histories and questions run on N workers (:mod:`ctxbench.evaluation.pool`); one shared instance
    opens one history at a time. Answers are appended to predictions.jsonl as they complete; the
    records returned are this dataset's questions in dataset order, whatever order they completed in.
    A question whose answer failed (its LLM calls failed) is written with ``failed: true`` and
    answered again on the next run; it is never scored. With ``shard=rank`` the answers go to
    ``predictions.rank<rank>.jsonl`` (``samples`` being this rank's part: :func:`run_sharded`).
    ``log_samples``: every answer's and construction's calls to ``samples.jsonl`` /
    ``construction_calls.jsonl`` (:mod:`ctxbench.evaluation.sample_log`).
    """
    from ctxbench.evaluation.pool import Gate, run_tasks
    from ctxbench.llm.shared import SharedLLM
    from ctxbench.evaluation.sample_log import SampleLog

    systems = system if isinstance(system, HistorySystems) else HistorySystems.one(system)
    proto = systems.prototype
    if not isinstance(proto, System):
        raise ContractError(f"{type(proto).__qualname__} is not a ctxbench.core.system.System; eval runs Systems only")
    out_dir = Path(out_dir)
    pred_path = out_dir / (PREDICTIONS if shard is None else f"predictions.rank{shard}.jsonl")
    done = _answered(out_dir)
    qa = proto.answer_prompt  # its post-processing is applied here, once per answer

    work = plan(samples, limit)
    order = [q.id for _, qs in work for q in qs]
    pending_total = sum(1 for qid in order if _needs_answer(done, qid))
    workers = max(1, int(concurrency))
    gate = Gate() if workers > 1 else None
    shared = llm if isinstance(llm, SharedLLM) else None
    if shared is not None:
        shared.serve(gate, batch=gate is not None and shared.batch_size() > 1)

    bar = tqdm(total=len(order), initial=len(order) - pending_total, desc="eval", unit="q",
               disable=not progress, dynamic_ncols=True)
    with JsonlAppender(pred_path) as out, SampleLog(out_dir if log_samples else None, shard) as samples_log:
        histories = []
        for sample, qs in work:
            pending = [q for q in qs if _needs_answer(done, q.id)]
            if pending:
                histories.append(_history_work(sample, pending, systems, llm, qa, out, done, bar,
                                               samples_log, gate))
        try:
            run_tasks(histories, workers, gate, open_limit=workers if systems.per_history else 1)
        finally:
            if shared is not None:
                shared.serve(None, batch=False)
    bar.close()
    return [done[qid] for qid in order]


def _history_work(sample: Sample, pending: list[Question], systems: HistorySystems, llm: Any,
                  qa: Any, out: Any, done: dict[str, dict[str, Any]], bar: Any, samples_log: Any,
                  gate: Any = None) -> Any:
    """One history's ingest and answer tasks for :func:`ctxbench.evaluation.pool.run_tasks`.

    Under N workers the seconds recorded (``answer_seconds``, ``construction.seconds``) leave out
    the task's waits for the workers' lock (recorded apart as ``lock_wait_seconds``); waits for the
    backend's own slots or a batch stay in, as a user of that backend would see them.
    """
    def waited() -> float:
        return gate.waited_s() if gate is not None else 0.0

    from ctxbench.evaluation.pool import HistoryWork

    hid = sample.history.id
    st: dict[str, Any] = {}

    def ingest() -> None:
        system = st["system"] = systems.get(hid)
        system.reset()
        bar.set_postfix_str(f"ingest {hid}")
        t0, w0 = time.perf_counter(), waited()
        with call_scope(sink=samples_log.construction_sink(hid)) as scope:
            system.ingest(sample.history)
        st["ingest_s"] = time.perf_counter() - t0 - (waited() - w0)
        st["meter_con"] = _scope_phase(scope, llm, "construction")
        bar.set_postfix_str(hid)

    def answer_task(q: Question) -> Any:
        def run() -> None:
            system = st["system"]
            t1, w1 = time.perf_counter(), waited()
            with call_scope(keep_calls=samples_log.enabled) as scope:
                pred = system.answer(q)
            lock_wait = waited() - w1
            answer_s = time.perf_counter() - t1 - lock_wait
            usage = account_answer(pred, llm, _scope_phase(scope, llm, "answer"))
            if "construction" not in st:  # the history's cost, from its first completed answer
                st["construction"] = account_construction(system, usage, st["meter_con"], st["ingest_s"])
            rec = question_record(q, hid)
            rec.update(prediction=qa.postprocess(q, pred.text), raw_prediction=pred.text,
                       usage=usage.to_dict(), answer_seconds=round(answer_s, 4), construction=st["construction"],
                       outputs=system.output_counts())
            meta = {k: scrub_text(v) if isinstance(v, str) else v for k, v in (pred.meta or {}).items()
                    if k != "context"}
            if meta:
                rec["meta"] = meta
            if lock_wait > 0:
                rec["lock_wait_seconds"] = round(lock_wait, 4)
            if _failed_answer(pred, usage):
                rec["failed"] = True
                rec["error"] = scrub_text(str(meta.get("error") or "the answer's LLM calls failed"))
            out.append(rec)
            samples_log.answer(rec, pred, scope.calls)
            done[q.id] = rec
            bar.update(1)
        return run

    def finish() -> None:
        systems.release(st.pop("system"))

    return HistoryWork(ingest=ingest, answers=[answer_task(q) for q in pending],
                       in_order=bool(getattr(systems.prototype, "answer_writes_state", False)), finish=finish)


def _scope_phase(scope: Any, llm: Any, phase: str) -> tuple[int, int, int, int]:
    """(prompt tokens, completion tokens, calls, failures) of ``llm``'s calls in one task's scope."""
    if llm is None or not hasattr(llm, "meter"):
        return (0, 0, 0, 0)
    c = scope.count(llm.meter, phase)
    return (c.prompt_tokens, c.completion_tokens, c.calls, c.failures)


def _needs_answer(done: dict[str, dict[str, Any]], qid: str) -> bool:
    """Not answered yet, or answered with a failure (re-answered, never counted)."""
    rec = done.get(qid)
    return rec is None or bool(rec.get("failed"))


def _failed_answer(pred: Prediction, usage: Usage) -> bool:
    """Every LLM call of the answer failed, or one failed and left no text."""
    failed = int(usage.extra.get("failed_calls", 0) or 0)
    return failed > 0 and (failed >= usage.answer_calls or not pred.text.strip())


# ---- cost accounting: the one code path for every system ------------------------------------------

def account_answer(pred: Prediction, llm: Any, meter: tuple[int, ...]) -> Usage:
    """The Usage recorded for one answer.

    A system on the shared LLM backend (``llm`` given) is metered: its answer tokens, calls and
    failures are the backend meter's delta over ``answer()``, whatever the system says. A system
    that decodes with its own model (methods) counts its tokens itself. Everything else (context
    tokens, memory footprint, extras) is the system's own report.
    """
    usage = pred.usage if isinstance(pred.usage, Usage) else Usage.from_dict(dict(pred.usage or {}))
    if llm is not None:
        usage.answer_prompt_tokens, usage.answer_completion_tokens, usage.answer_calls = meter[:3]
        usage.extra["failed_calls"] = int(meter[3])
    return usage


def account_construction(system: System, usage: Usage, meter: tuple[int, ...], seconds: float) -> dict[str, Any]:
    """What ingesting one history cost: the system's own count if it keeps one (a resumed store
    remembers calls an earlier process made), else the backend meter's delta over ``ingest()``."""
    cu = system.construction_usage() or usage
    reported = (cu.construction_prompt_tokens, cu.construction_completion_tokens, cu.construction_calls)
    tokens = reported if any(reported) else meter[:3]
    return {"prompt_tokens": int(tokens[0]), "completion_tokens": int(tokens[1]), "calls": int(tokens[2]),
            "failed_calls": int(meter[3]), "seconds": round(max(seconds, float(cu.ingest_seconds or 0.0)), 4),
            "memory_items": int(usage.memory_items), "memory_tokens": int(usage.memory_tokens),
            "kv_bytes": int(usage.kv_bytes)}


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:  # pragma: no cover
        pass
    import sys

    if "torch" in sys.modules:
        sys.modules["torch"].manual_seed(seed)


def process_state() -> Any:
    """accelerate's ``PartialState`` under a multi-process launch (``accelerate launch``, torchrun), else None.

    A single process never imports torch for it (an API-model eval stays torch-free).
    """
    import os

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return None
    from ctxbench.models.loading import process_state as state

    st = state()
    if st.num_processes != world:  # every process would answer everything into the same file
        raise CtxbenchError(f"WORLD_SIZE={world} but accelerate sees {st.num_processes} process(es) (LOCAL_RANK "
                            f"{os.environ.get('LOCAL_RANK', 'unset')}): launch with `accelerate launch -m ctxbench "
                            "eval ...` or torchrun")
    return st


def run_sharded(system: Any, samples: list[Sample], out_dir: Path, state: Any, *, llm: Any = None,
                limit: int | None = None, progress: bool = True, concurrency: int = 1,
                log_samples: bool = False) -> list[dict[str, Any]] | None:
    """The histories split across the processes (``split_between_processes``: contiguous parts in
    dataset order), each rank answering its part into its shard file; every rank's records are
    gathered (``gather_object``) and rank 0 returns them all, merged into predictions.jsonl in
    dataset order. The other ranks return None."""
    from accelerate.utils import gather_object

    work = plan(samples, limit)  # the limit is applied to the whole dataset once, before splitting
    order = [q.id for _, qs in work for q in qs]
    parts = [replace(s, questions=list(qs)) for s, qs in work]
    with state.split_between_processes(parts) as mine:
        records = run_system(system, list(mine), out_dir, llm=llm, progress=progress and state.is_main_process,
                             shard=state.process_index, concurrency=concurrency, log_samples=log_samples)
    gathered = gather_object(records)
    if not state.is_main_process:
        return None
    return merge_records(out_dir, gathered, order)


def placement_of(system: System, llm: Any, state: Any) -> dict[str, Any]:
    """Where the evaluated model ran (the system's own, else the ``llm=hf`` backend's; an API model
    has none: device and dtype null) and how many processes shared the histories."""
    own = system.placement()
    if own is None and llm is not None and callable(getattr(llm, "placement", None)):
        own = llm.placement()
    out: dict[str, Any] = dict(own or {"device": None, "dtype": None})
    out["processes"] = 1 if state is None else int(state.num_processes)
    return out


def main(cfg: Any) -> dict[str, Any]:
    """``python -m ctxbench eval memory=NAME|method=NAME dataset=NAME [limit=N] [hydra.run.dir=DIR]``."""
    from ctxbench.llm.token_count import token_counts_record
    from ctxbench.core.registry import build

    _seed_everything(int(cfg.get("seed", 0)))
    out = run_dir(cfg)
    out.mkdir(parents=True, exist_ok=True)
    claim_run_dir(out, cfg)  # this process only, and this config only (run_guard.py)
    samples = build("dataset", cfg.dataset)
    task = str((cfg.get("task") or {}).get("name") or "qa")
    if task != "qa":  # the papers' own measures (ctxbench/evaluation/tasks/): same run folder, results files, provenance
        return run_task(cfg, task, out, samples)
    n_q = sum(len(s.questions) for s in samples)
    if n_q == 0:
        raise DataError(f"dataset={cfg.dataset.name}", "has no questions to answer (eval needs a QA dataset)")
    systems, llm, name = build_history_systems(cfg, out)
    system = systems.prototype
    # metrics (and a judge LLM) are built before any question is answered, so a bad one fails now
    metrics = build_metrics([str(m) for m in (cfg.get("metrics") or DEFAULT_METRICS)], llm=_judge_llm(cfg, llm),
                            judge=cfg.get("judge"))
    progress = bool(cfg.get("progress", True))
    workers, workers_from = resolve_concurrency(cfg.get("concurrency", "auto"), llm)
    run_kw = dict(llm=llm, limit=cfg.get("limit"), progress=progress, concurrency=workers,
                  log_samples=bool(cfg.get("log_samples", False)))
    state = process_state()
    if state is None:
        records = run_system(systems, list(samples), out, **run_kw)
        if any(out.glob(SHARD_GLOB)):  # resumed from a killed multi-process run: its shard files are merged
            records = merge_records(out, records, [str(r["id"]) for r in records])
    else:  # `accelerate launch -m ctxbench eval ...`: histories split across processes
        gathered = run_sharded(systems, list(samples), out, state, **run_kw)
        if gathered is None:  # not rank 0: wait until rank 0 has written the results
            state.wait_for_everyone()
            return {}
        records = gathered
    extra = {"system": name, "dataset": str(cfg.dataset.name), "qa_prompt": qa_prompt_record(system),
             "concurrency": {"workers": workers, "from": workers_from,
                             "answers": "in dataset order" if system.answer_writes_state or workers == 1
                             else "in parallel"},
             "llm": None if llm is None else {"backend": str(cfg.llm.name), "model": llm.model_name,
                                              "context_window": llm.context_window,
                                              "meter": llm.meter.snapshot(),
                                              "token_counts": token_counts_record(llm),
                                              "truncated_calls": getattr(llm, "truncated_calls", None)}}
    results = finalize(out, records, metrics, cfg, "eval", with_cost=True, extra=extra, progress=progress,
                       max_failed_fraction=float(cfg.get("max_failed_fraction", DEFAULT_MAX_FAILED_FRACTION)),
                       placement=placement_of(system, llm, state))
    if state is not None:
        state.wait_for_everyone()
    health = results["health"]
    structured = report_line((results.get("cost") or {}).get("structured_output") or {})
    print(f"eval {name} on {cfg.dataset.name}: {summary_line(results, [m.name for m in metrics])}; "
          f"{health_line(health)}{'; ' + structured if structured else ''} → {out}")
    if health["status"] != "ok":
        raise EvalFailed(f"eval {name}: {health['reason']}; the numbers in {out / RESULTS_JSON} do not measure the "
                         "system (fix the backend, or raise max_failed_fraction)")
    return results


def run_task(cfg: Any, task: str, out: Path, samples: list[Sample]) -> dict[str, Any]:
    """``eval task=perplexity|reconstruction|choice``: a registered task (ctxbench/evaluation/tasks/) scores ``method=``."""
    from ctxbench.core.registry import get

    results = get("task", task)(cfg, out, samples)
    first = (results.get("rows") or [{}])[0]
    shown = ", ".join(f"{k}={first[k]}" for k in ("system", "length", "category", "ppl", "accuracy", "bleu4")
                      if first.get(k) is not None)
    print(f"eval task={task} {results['system']} on {cfg.dataset.name}: {len(results.get('rows') or [])} rows "
          f"({shown}) → {out}")
    return results


def evaluate_samples(system: Any, samples: list[Sample], out_dir: str | Path, *, cfg: Any = None,
                     llm: Any = None, metrics: list[str] | None = None, limit: int | None = None,
                     progress: bool = False, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run ``system`` on in-memory samples and write the three result files (no Hydra needed)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    records = run_system(system, samples, out, llm=llm, limit=limit, progress=progress)
    ms = build_metrics(metrics or DEFAULT_METRICS, llm=llm)
    extra = extra or {"system": type(system).__name__}
    return finalize(out, records, ms, cfg if cfg is not None else {}, "eval", with_cost=True,
                    extra={"qa_prompt": qa_prompt_record(system), **extra}, progress=progress)
