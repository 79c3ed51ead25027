"""``eval task=perplexity method=NAME``: continuation perplexity given the compressed context.

Text datasets: for each ``task.lengths`` L, windows of L context tokens then ``task.target_tokens``
scored tokens (the same windows for every system). The method reads the context compressed its way
(:meth:`score_continuation`, ctxbench/core/task_protocol.py); the baselines are the base model with the
adapters off reading the whole context (``full_context``) or none of it (``no_context``, just its start
token). Datasets whose questions carry continuations (``dataset=ccm_dailydialog``: the dialogue so far
as sessions, the last turn but one as the question, the response as the answer): context = the
sessions (one chunk each), prompt = the question, target = the answer: the response perplexity CCM
reports. Perplexity = exp(summed NLL / scored tokens) over all windows of a (system, length).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ctxbench.core.errors import ConfigError
from ctxbench.models.loading import kv_bytes_per_token
from ctxbench.core.registry import register
from ctxbench.core.render import render_session
from ctxbench.core.types import Sample
from ctxbench.core.task_protocol import start_ids
from ctxbench.evaluation.tasks.common import (Records, baseline_nll, encode, mean_se, no_items, ppl, progress_bar,
                     task_method, token_windows, tokenizer_of, whole_or_round, write_results)

Item = tuple[str, Any, list[list[int]], list[int], list[int]]  # (id, length, context chunks, prompt, target)


def text_items(samples: list[Sample], tok: Any, tcfg: Any) -> list[Item]:
    items: list[Item] = []
    target = int(tcfg.target_tokens)
    for length in [int(x) for x in tcfg.lengths]:
        for wid, ids in token_windows(samples, tok, length + target, int(tcfg.windows), int(tcfg.skip_tokens)):
            items.append((f"L{length}:{wid}", length, [ids[:length]], [], ids[length:]))
    return items


def answer_items(samples: list[Sample], tok: Any) -> list[Item]:
    items: list[Item] = []
    for s in samples:
        chunks = [encode(tok, render_session(sess)) for sess in s.history.sessions] or \
                 ([encode(tok, s.history.text)] if s.history.text else [])
        for q in s.questions:
            target = encode(tok, str(q.answer))
            if target and chunks:
                items.append((str(q.id), "answers", chunks, encode(tok, q.question + "\n"), target))
    return items


@register("task", "perplexity")
def run(cfg: Any, out_dir: Path, samples: list[Sample]) -> dict[str, Any]:
    tcfg = cfg.task
    score = str(tcfg.score)
    if score == "stream":
        return run_stream(cfg, out_dir, samples)
    if score != "continuation":
        raise ConfigError(f"task.score must be continuation or stream, got {score!r}")
    method, name = task_method(cfg, out_dir, "perplexity", "score_continuation", "plain_lm")
    tok = tokenizer_of(method)
    has_answers = any(s.questions for s in samples)
    items = answer_items(samples, tok) if has_answers else text_items(samples, tok, tcfg)
    if not items:
        raise no_items("perplexity", cfg, f"no windows of {list(tcfg.lengths)} + {tcfg.target_tokens} tokens "
                       f"after skip_tokens={tcfg.skip_tokens}" if not has_answers else "no question has an answer")
    progress = bool(cfg.progress)
    records = Records(out_dir)
    system = str(cfg.method.name)
    try:
        with torch.no_grad():
            for iid, length, ctx, prompt, target in progress_bar(items, f"perplexity {system}", progress):
                def score(ctx=ctx, prompt=prompt, target=target) -> dict[str, Any]:
                    s = method.score_continuation(ctx, target, prompt)
                    return {"nll": s.nll, "tokens": s.tokens, "context_tokens": s.context_tokens,
                            "memory_slots": s.memory_slots, "kv_bytes": s.kv_bytes}
                records.get_or_make(f"{system}|{iid}", score)
            baselines = [str(b) for b in tcfg.baselines or []]
            if baselines:
                start = start_ids(tok)
                with method.plain_lm() as lm:
                    per_token = kv_bytes_per_token(lm)
                    for kind in baselines:
                        for iid, length, ctx, prompt, target in progress_bar(items, kind, progress):
                            def base(kind=kind, ctx=ctx, prompt=prompt, target=target) -> dict[str, Any]:
                                nll, n, read = baseline_nll(lm, kind, ctx, prompt, target, start)
                                return {"nll": nll, "tokens": n, "context_tokens": sum(map(len, ctx)),
                                        "memory_slots": read, "kv_bytes": read * per_token}
                            records.get_or_make(f"{kind}|{iid}", base)
    finally:
        records.close()
    systems = [system] + baselines
    rows = summarize(records.done, items, systems)
    header = ["system", "context tokens", "windows", "scored tokens", "ppl", "NLL/token ± SE", "slots read",
              "compression", "KV bytes"]
    cells = [[r["system"], r["length"], r["n"], r["tokens"], r["ppl"], _nll_cell(r), r["memory_slots"],
              r["compression"], r["kv_bytes"]] for r in rows]
    notes = ["ppl = exp(summed NLL / scored tokens) over the windows; NLL/token ± bootstrap SE over windows; "
             "slots read = positions the target attended to in place of the context (full_context: every "
             "context token; no_context: none); compression = context tokens ÷ slots read; KV bytes = those "
             "slots' keys and values in every layer."]
    return write_results(out_dir, cfg, method, "perplexity", name, rows,
                         header, cells, {"source": "answers" if has_answers else "text windows",
                                         "target_tokens": None if has_answers else int(tcfg.target_tokens)}, notes)


def _nll_cell(r: dict[str, Any]) -> str:
    return f"{r['nll_per_token']:.4f}" + ("" if r["nll_stderr"] is None else f" ± {r['nll_stderr']:.4f}")


def summarize(done: dict[str, dict[str, Any]], items: list[Item], systems: list[str]) -> list[dict[str, Any]]:
    """One row per (system, length): windows, tokens, ppl, mean NLL/token ± SE, slots, compression."""
    rows = []
    lengths = list(dict.fromkeys(it[1] for it in items))
    for system in systems:
        for length in lengths:
            recs = [done[f"{system}|{it[0]}"] for it in items if it[1] == length and f"{system}|{it[0]}" in done]
            if not recs:
                continue
            nll, tokens = sum(r["nll"] for r in recs), sum(r["tokens"] for r in recs)
            mean, se = mean_se([r["nll"] / max(r["tokens"], 1) for r in recs])
            slots = sum(r["memory_slots"] for r in recs) / len(recs)
            ctx = sum(r["context_tokens"] for r in recs) / len(recs)
            kv = [r["kv_bytes"] for r in recs if r.get("kv_bytes") is not None]
            rows.append({"system": system, "length": length, "n": len(recs), "tokens": tokens, "ppl": ppl(nll, tokens),
                         "nll_per_token": round(nll / max(tokens, 1), 4), "nll_stderr": se, "mean_window_nll": mean,
                         "memory_slots": whole_or_round(slots), "context_tokens": whole_or_round(ctx),
                         "compression": round(ctx / slots, 2) if slots else None,
                         "kv_bytes": round(sum(kv) / len(kv)) if kv else None,
                         "seconds": round(sum(r.get("seconds", 0.0) for r in recs), 2)})
    return rows


# ---- task.score=stream: every token of a long text scored while the cache is compressed (LoCoCo's measure) --

@torch.no_grad()
def plain_stream(lm: Any, ids: list[int], marks: list[int]) -> list[dict[str, Any]]:
    """The base model over the whole window in one forward: summed NLL of tokens 2..m for each mark m."""
    from ctxbench.evaluation.tasks.common import model_device

    x = torch.tensor([ids], device=model_device(lm))
    logp = torch.nn.functional.cross_entropy(lm(input_ids=x).logits[0, :-1].float(), x[0, 1:], reduction="none")
    cum = torch.cumsum(logp, 0)
    per_token = kv_bytes_per_token(lm)
    return [{"tokens_in": m, "nll": float(cum[m - 2]) / (m - 1), "n_tokens": m - 1, "kv_slots": m,
             "kv_bytes": m * per_token} for m in marks]


def run_stream(cfg: Any, out_dir: Path, samples: list[Sample]) -> dict[str, Any]:
    """Windows of max(lengths) tokens streamed through the method's cache (:meth:`perplexity`), the
    perplexity of every token of each prefix of ``length`` recorded as it passes (the full_context
    baseline: the base model over the prefix in one forward)."""
    tcfg = cfg.task
    method, name = task_method(cfg, out_dir, "perplexity", "perplexity", "plain_lm")
    tok = tokenizer_of(method)
    lengths = sorted(int(x) for x in tcfg.lengths)
    windows = token_windows(samples, tok, lengths[-1], int(tcfg.windows), int(tcfg.skip_tokens))
    if not windows:
        raise no_items("perplexity", cfg, f"no window of {lengths[-1]} tokens after skip_tokens={tcfg.skip_tokens}")
    system = str(cfg.method.name)
    baselines = [str(b) for b in tcfg.baselines or [] if str(b) == "full_context"]  # none reads no context
    records = Records(out_dir)
    progress = bool(cfg.progress)
    try:
        for wid, ids in progress_bar(windows, f"perplexity {system} (stream)", progress):
            records.get_or_make(f"{system}|stream:{wid}", lambda ids=ids: {"at": [
                {k: a[k] for k in ("tokens_in", "nll", "n_tokens", "kv_slots", "kv_bytes", "peak_rss_bytes", "seconds")}
                for a in method.perplexity(ids, marks=lengths)["at"]]})
        if baselines:
            with method.plain_lm() as lm:
                for wid, ids in progress_bar(windows, "full_context (stream)", progress):
                    records.get_or_make(f"full_context|stream:{wid}", lambda ids=ids: {"at": plain_stream(lm, ids, lengths)})
    finally:
        records.close()
    rows = []
    for sysname in [system] + baselines:
        recs = [records.done[f"{sysname}|stream:{wid}"] for wid, _ in windows]
        for length in lengths:
            at = [next(a for a in r["at"] if a["tokens_in"] == length) for r in recs]
            nll, n = sum(a["nll"] * a["n_tokens"] for a in at), sum(a["n_tokens"] for a in at)
            mean, se = mean_se([a["nll"] for a in at])
            rss = [a["peak_rss_bytes"] for a in at if a.get("peak_rss_bytes")]
            rows.append({"system": sysname, "length": length, "n": len(at), "tokens": n, "ppl": ppl(nll, n),
                         "nll_per_token": round(nll / max(n, 1), 4), "nll_stderr": se, "mean_window_nll": mean,
                         "memory_slots": at[0]["kv_slots"], "kv_bytes": round(sum(a["kv_bytes"] for a in at) / len(at)),
                         "peak_rss_bytes": max(rss) if rss else None, "context_tokens": length,
                         "compression": round(length / at[0]["kv_slots"], 2) if at[0]["kv_slots"] else None,
                         "seconds": round(max(a.get("seconds") or 0.0 for a in at), 2)})
    header = ["system", "tokens in", "windows", "scored tokens", "ppl", "NLL/token ± SE", "KV slots", "compression",
              "KV bytes"]
    cells = [[r["system"], r["length"], r["n"], r["tokens"], r["ppl"], _nll_cell(r), r["memory_slots"],
              r["compression"], r["kv_bytes"]] for r in rows]
    notes = ["task.score=stream: every token after the first of each window's first `tokens in` tokens is scored "
             "as the text streams through the cache (segment by segment); full_context = the base model over the "
             "same prefix in one forward. KV slots / bytes = what the cache holds after that prefix."]
    return write_results(out_dir, cfg, method, "perplexity", name, rows, header, cells,
                         {"source": "text windows, streamed", "score": "stream"}, notes)
