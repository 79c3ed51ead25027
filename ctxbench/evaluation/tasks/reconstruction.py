"""``eval task=reconstruction method=NAME``: the context decoded back from its compression (ICAE).

For each ``task.lengths`` L, ``task.windows`` passages of L tokens (the same for every run, so a
``-m method.mem_size=...`` sweep compares memory sizes on the same text); the method compresses each
and decodes it greedily (:meth:`reconstruct_ids`, at most L + ``task.extra_tokens`` tokens). Scored
with :mod:`ctxbench.metrics.reconstruction`: BLEU-4, exact match, token accuracy, each ± bootstrap SE.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ctxbench.metrics import reconstruction as R
from ctxbench.core.registry import register
from ctxbench.core.types import Sample
from ctxbench.evaluation.tasks.common import Records, mean_se, no_items, progress_bar, task_method, token_windows, tokenizer_of, write_results

METRICS = ("bleu4", "exact_match", "token_accuracy")


@register("task", "reconstruction")
def run(cfg: Any, out_dir: Path, samples: list[Sample]) -> dict[str, Any]:
    tcfg = cfg.task
    method, name = task_method(cfg, out_dir, "reconstruction", "reconstruct_ids")
    tok = tokenizer_of(method)
    lengths = [int(x) for x in tcfg.lengths]
    items = [(length, wid, ids) for length in lengths
             for wid, ids in token_windows(samples, tok, length, int(tcfg.windows), int(tcfg.skip_tokens))]
    if not items:
        raise no_items("reconstruction", cfg, f"no passage of {lengths} tokens after skip_tokens={tcfg.skip_tokens}")
    slots_of = getattr(method, "memory_slots", None)
    records = Records(out_dir)
    try:
        with torch.no_grad():
            for length, wid, ids in progress_bar(items, "reconstruction", bool(cfg.progress)):
                def make(ids=ids, length=length) -> dict[str, Any]:
                    hyp = list(method.reconstruct_ids(ids, max_new_tokens=length + int(tcfg.extra_tokens)))
                    ref_text, hyp_text = tok.decode(ids), tok.decode(hyp)
                    return {"length": length, "reference": ref_text, "reconstruction": hyp_text,
                            "bleu4": R.bleu4(ref_text, hyp_text), "exact_match": R.exact_match(ids, hyp),
                            "token_accuracy": R.token_accuracy(ids, hyp),
                            "memory_slots": int(slots_of(len(ids))) if callable(slots_of) else None}
                records.get_or_make(f"L{length}:{wid}", make)
    finally:
        records.close()
    rows = []
    for length in lengths:
        recs = [records.done[f"L{ln}:{w}"] for ln, w, _ in items if ln == length]
        row: dict[str, Any] = {"length": length, "n": len(recs), "memory_slots": recs[0].get("memory_slots")}
        for m in METRICS:
            row[m], row[f"{m}_stderr"] = mean_se([r[m] for r in recs])
        rows.append(row)
    header = ["context tokens", "passages", "memory slots", *(f"{m} ± SE" for m in METRICS)]
    cells = [[r["length"], r["n"], r["memory_slots"],
              *(f"{r[m]:.4f}" + ("" if r[f"{m}_stderr"] is None else f" ± {r[f'{m}_stderr']:.4f}") for m in METRICS)]
             for r in rows]
    ex = next(iter(records.done.values()))
    notes = [f"Metrics (ctxbench/metrics/reconstruction.py v{R.VERSION}): BLEU-4 over lowercased word tokens "
             "(nltk, smoothing method1); exact match of the token ids; token accuracy by position. "
             "± = bootstrap standard error over passages.", "",
             f"Example — context: {ex['reference'][:300]!r}", f"decoded: {ex['reconstruction'][:300]!r}"]
    return write_results(out_dir, cfg, method, "reconstruction", name, rows, header, cells,
                         {"metrics_version": R.VERSION}, notes)
