"""``suite=train_step``: tokens/s and peak memory of one training step, every trainable method vs ``lm``.

Each method runs in a fresh subprocess (:mod:`.train_step_worker`) so its memory is its own: the
model, method and data are built from the real ``train`` config (``method=X model=M``), then one
fixed batch is stepped ``warmup_steps`` + ``steps`` times. Methods run in the same bench run, one
after another (``rounds`` > 1 interleaves them again), and every ratio is taken against the
baseline method (``lm``) measured in this run. Tokens are the tokens the method's loss covers
(``MethodOutput.n_tokens``), as the training loop logs them.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from ctxbench.core.registry import register
from ctxbench.bench.common import CONF_DIR, REPO_ROOT, median, registered, rnd


def method_names(cfg: Any) -> list[str]:
    """The methods to measure: ``methods`` as given, or every registered one with a conf/method yaml."""
    baseline = cfg.baseline
    want = cfg.methods
    if want in (None, "auto", "all"):
        reg = set(registered("method"))
        names = [n for n in reg if (CONF_DIR / "method" / f"{n}.yaml").exists()]
    else:
        names = [str(m) for m in want]
    names = sorted(set(names) - {baseline})
    return [baseline, *names]


def probe_trainable(name: str, dataset: str) -> str | None:
    """Why ``name`` cannot be trained (built on the tiny model, in this process), or None if it can.

    Saves a subprocess for training-free methods (StreamingLLM, H2O, full cache), whose
    ``train_examples`` refuses with the reason recorded in bench.json.
    """
    from ctxbench.models.loading import load_model
    from ctxbench.core.registry import build
    from ctxbench.bench.common import compose

    cfg = compose("train", [f"method={name}", "model=tiny", f"dataset={dataset}"])
    method = build("method", cfg.method, bundle=load_model(cfg.model))
    if not any(p.requires_grad for p in method.parameters()):
        return "no trainable parameters"
    try:
        method.train_examples(build("dataset", cfg.dataset))
    except ValueError as e:
        if "training-free" in str(e) or "no training loss" in str(e):
            return str(e).split("\n")[0]
    return None


def run_worker(spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    try:
        p = subprocess.run([sys.executable, "-m", "ctxbench.bench.train_step_worker", json.dumps(spec)],
                           cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"status": "skipped", "reason": f"timed out after {timeout:.0f}s (train_step.timeout_s)"}
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("BENCH_RESULT "):
            return json.loads(line[len("BENCH_RESULT "):])
    tail = (p.stderr or p.stdout).strip().splitlines()[-1:] or ["no output"]
    return {"status": "error", "reason": f"worker exited {p.returncode}: {tail[0][:300]}"}


def summarise(method: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in runs if r.get("status") == "ok"]
    if not ok:
        r = runs[-1] if runs else {"status": "skipped", "reason": "not run"}
        return {"method": method, "status": r.get("status", "error"), "reason": r.get("reason", "")}
    steps = [t for r in ok for t in r["step_s"]]
    step_s = median(steps)
    tokens = ok[0]["loss_tokens"]
    return {"method": method, "status": "ok", "model": ok[0]["model"], "dataset": ok[0]["dataset"],
            "batch_size": ok[0]["batch_size"], "loss_tokens": tokens, "step_s": rnd(step_s),
            "step_s_min": rnd(min(steps)), "step_s_max": rnd(max(steps)), "n_steps": len(steps),
            "tokens_per_s": rnd(tokens / step_s) if step_s else None,
            "first_step_s": rnd(median([t for r in ok for t in r["first_step_s"]])),
            "trainable_params": ok[0]["trainable_params"], "total_params": ok[0]["total_params"],
            "setup_rss_mb": rnd(median([r["setup_rss_mb"] for r in ok]), 1),
            "first_step_peak_extra_mb": rnd(median([r["first_step_peak_extra_mb"] for r in ok]), 1),
            "step_peak_extra_mb": rnd(median([r["step_peak_extra_mb"] for r in ok]), 1),
            "peak_rss_mb": rnd(median([r["peak_rss_mb"] for r in ok]), 1),
            "peak_reset_exact": all(r.get("peak_reset_exact") for r in ok)}


def reference_rows(ref: Any, timeout: float, dataset: str, warmup_steps: int) -> list[dict[str, Any]]:
    """The method on the reference's settings at each batch size, beside the plain HF LoRA LM step
    measured in the same process (:func:`.train_step_worker.measure_reference`). "× reference" is read
    through the in-run ratio: the reference's step is ``ref_step_vs_lm`` × the LM step, so
    × reference = ref_step_vs_lm × LM step ÷ this step (the same tokens per step on both sides)."""
    rows = []
    for bs in ref.batch_sizes:
        spec = {"kind": "reference", "method": ref.method, "model": ref.model, "dataset": dataset,
                "batch_size": int(bs), "warmup_steps": warmup_steps, "steps": ref.steps,
                "lm_tokens": ref.lm_tokens, "overrides": list(ref.overrides or [])}
        r = run_worker(spec, timeout)
        if r.get("status") != "ok":
            rows.append({"batch_size": int(bs), "status": r.get("status", "error"), "reason": r.get("reason", "")})
            continue
        step, lm = median(r["method_s"]), median(r["lm_s"])
        ratio = step / lm
        x_ref = ref.ref_step_vs_lm / ratio
        mem = r["peak_rss_mb"] / ref.ref_peak_rss_mb
        row = {"batch_size": int(bs), "status": "ok", "method": ref.method, "model": r["model"],
               "loss_tokens": r["loss_tokens"], "step_s": rnd(step), "step_s_alone": rnd(median(r["step_s_alone"])),
               "lm_tokens": r["lm_tokens"], "lm_step_s": rnd(lm), "step_vs_lm": rnd(ratio),
               "ref_step_vs_lm": ref.ref_step_vs_lm, "tokens_per_s": rnd(r["loss_tokens"] / step),
               "ref_tokens_per_s": ref.ref_tokens_per_s, "x_reference": rnd(x_ref),
               "peak_rss_mb": rnd(r["peak_rss_mb"], 1), "ref_peak_rss_mb": ref.ref_peak_rss_mb,
               "peak_vs_reference": rnd(mem), "peak_reset_exact": r["peak_reset_exact"],
               "speed_goal": f"≥ {ref.goal_speed:g}×", "memory_goal": f"≤ {ref.goal_memory:g}×"}
        if int(bs) == 1:  # the reference's figures are batch-1 figures
            row["speed_met"] = x_ref >= ref.goal_speed
            row["memory_met"] = mem <= ref.goal_memory
            row["met"] = row["speed_met"] and row["memory_met"]
        rows.append(row)
    return rows


REFERENCE_COLUMNS = [["batch_size", "batch"], ["loss_tokens", "tokens/step"], ["step_s", "step s"],
                     ["lm_step_s", "HF LoRA LM step s"], ["step_vs_lm", "step ÷ LM step"],
                     ["ref_step_vs_lm", "reference ÷ LM step"], ["x_reference", "× reference (in-run)"],
                     ["speed_goal", "speed goal"], ["tokens_per_s", "tokens/s"], ["ref_tokens_per_s", "reference tokens/s"],
                     ["peak_rss_mb", "peak RSS MB"], ["ref_peak_rss_mb", "reference peak MB"],
                     ["peak_vs_reference", "÷ reference"], ["memory_goal", "memory goal"], ["met", "met (batch 1)"]]


@register("bench", "train_step")
def run(cfg: Any, ctx: dict[str, Any]) -> dict[str, Any]:
    from tqdm.auto import tqdm

    baseline = cfg.baseline
    names = method_names(cfg)
    datasets = dict(cfg.datasets or {})
    model = cfg.model
    rounds = max(1, cfg.rounds)
    timeout = float(cfg.timeout_s)
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    for name in names:
        try:
            why = probe_trainable(name, str(datasets.get(name, cfg.dataset)))
        except Exception:  # noqa: BLE001 - the worker reports the real failure
            why = None
        if why:
            runs[name].append({"status": "skipped", "reason": why})
    bar = tqdm(total=rounds * len(names), desc="train_step", leave=False)
    for _ in range(rounds):
        for name in names:
            if runs[name] and runs[name][-1].get("status") != "ok":  # skipped / failed once: do not retry
                bar.update(1)
                continue
            spec = {"method": name, "model": model, "dataset": str(datasets.get(name, cfg.dataset)),
                    "batch_size": cfg.batch_size, "warmup_steps": cfg.warmup_steps,
                    "steps": cfg.steps, "overrides": list(cfg.overrides or [])}
            bar.set_postfix_str(name)
            runs[name].append(run_worker(spec, timeout))
            bar.update(1)
    bar.close()
    rows = [summarise(n, runs[n]) for n in names]
    base = next((r for r in rows if r["method"] == baseline and r["status"] == "ok"), None)
    for r in rows:
        if r["status"] == "ok" and base:
            r["tokens_per_s_vs_lm"] = rnd(r["tokens_per_s"] / base["tokens_per_s"]) if base["tokens_per_s"] else None
            r["step_s_vs_lm"] = rnd(r["step_s"] / base["step_s"]) if base["step_s"] else None
            r["step_peak_vs_lm"] = (rnd(r["first_step_peak_extra_mb"] / base["first_step_peak_extra_mb"])
                                    if base["first_step_peak_extra_mb"] else None)
    notes = [f"one fixed batch of {cfg.batch_size} examples per method from dataset "
             f"{cfg.dataset} (" + ", ".join(f"{k}: {v}" for k, v in datasets.items()) + "), "
             f"model={model}; step = forward + backward + grad clip + AdamW step; median of "
             f"{cfg.steps} timed steps × {rounds} round(s) after {cfg.warmup_steps} warm-up step(s).",
             "tokens = tokens the loss covers (MethodOutput.n_tokens, as train.py's tokens_per_s); each method's "
             "example length comes from its own config, so tokens/s (not step time) is the comparable figure.",
             "memory = resident set size of the method's own process: 'first step +MB' is the peak during the "
             "first step above the RSS before it (activations, gradients, AdamW state); 'later step +MB' the same "
             "for steady-state steps; 'peak RSS' includes the model and data."]
    tables = []
    ref = cfg.reference
    if ref:
        ref_rows = reference_rows(ref, timeout, str(cfg.dataset), int(cfg.warmup_steps))
        tables.append({"title": f"{ref.method} on getao/icae v2's settings (model={ref.model}; "
                                + " ".join(ref.overrides or []) + ")",
                       "columns": REFERENCE_COLUMNS, "rows": ref_rows})
        notes.append(f"{ref.method} vs getao/icae v2: the reference's figures ({ref.ref_tokens_per_s:g} tokens/s, "
                     f"{ref.ref_peak_rss_mb:g} MB peak RSS, its step = {ref.ref_step_vs_lm:g} × a plain HF LoRA LM "
                     f"step over {ref.lm_tokens} tokens) were measured by issue 41's filer; '× reference' is "
                     f"{ref.ref_step_vs_lm:g} × the LM step ÷ this step, both timed interleaved in one process "
                     f"({ref.steps} pairs, medians), so it does not depend on how loaded the machine is; tokens/s "
                     "and peak RSS are absolute (this machine, now). Goal: ≥ "
                     f"{ref.goal_speed:g}× its speed at ≤ {ref.goal_memory:g}× its memory, at batch 1.")
    return {"tables": tables,
            "description": f"One training step per method, model={model}, ratios against method={baseline} "
                           "measured in the same run.",
            "params": {"model": model, "methods": names, "rounds": rounds},
            "columns": [["method", "method"], ["loss_tokens", "tokens/step"], ["step_s", "step s (median)"],
                        ["tokens_per_s", "tokens/s"], ["tokens_per_s_vs_lm", "tokens/s ÷ lm"], ["step_s_vs_lm", "step ÷ lm step"],
                        ["trainable_params", "trainable params"], ["first_step_peak_extra_mb", "first step +MB"],
                        ["step_peak_extra_mb", "later step +MB"], ["step_peak_vs_lm", "first step +MB ÷ lm"],
                        ["peak_rss_mb", "peak RSS MB"]],
            "rows": rows, "notes": notes}
