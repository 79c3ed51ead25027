"""``eval task=choice method=NAME``: option ranking by likelihood (as CCM scores MetaICL).

Every question with ``options`` (DialSim's A–E, MetaICL rows with options) is one item: context = the
history's sessions (one chunk each; a document is one chunk), prompt = the question, and each option a
target. The option with the lowest NLL (``task.normalize: mean`` per token, the default, or ``sum``)
is the prediction; it is correct when it is the gold option (the answer text, or its letter).
Accuracy per category and overall, with bootstrap standard errors, for the method and the baselines.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ctxbench.core.errors import ConfigError
from ctxbench.core.registry import register
from ctxbench.core.render import render_session
from ctxbench.core.types import Question, Sample
from ctxbench.core.task_protocol import start_ids
from ctxbench.evaluation.tasks.common import (Records, baseline_nll, encode, mean_se, no_items, progress_bar, task_method,
                     tokenizer_of, whole_or_round, write_results)

LETTERS = "ABCDEFGHIJ"


def gold_index(q: Question) -> int | None:
    """The gold option: the option equal to the answer (case and spaces ignored), or the answer's letter."""
    opts = [str(o).strip().lower() for o in q.options or []]
    ans = str(q.answer).strip()
    if ans.lower() in opts:
        return opts.index(ans.lower())
    letter = ans.rstrip(").:").upper()
    if len(letter) == 1 and letter in LETTERS[:len(opts)]:
        return LETTERS.index(letter)
    return None


def option_ids(tok: Any, prompt: str, option: str) -> list[int]:
    """The option's tokens as they follow the prompt (tokenized together, so a merge at the seam counts)."""
    p, joint = encode(tok, prompt), encode(tok, prompt + " " + option)
    return joint[len(p):] if joint[:len(p)] == p and len(joint) > len(p) else encode(tok, " " + option)


def items_of(samples: list[Sample], tok: Any) -> list[dict[str, Any]]:
    out = []
    for s in samples:
        chunks = [encode(tok, render_session(sess)) for sess in s.history.sessions] or \
                 ([encode(tok, s.history.text)] if s.history.text else [])
        for q in s.questions:
            gold = gold_index(q) if q.options else None
            if gold is None:
                continue
            prompt = q.question.rstrip() + "\n"
            out.append({"id": str(q.id), "category": q.category, "category_name": q.category_name or str(q.category),
                        "context": chunks, "prompt": encode(tok, prompt), "gold": gold,
                        "options": [option_ids(tok, prompt, str(o)) for o in q.options or []]})
    return out


@register("task", "choice")
def run(cfg: Any, out_dir: Path, samples: list[Sample]) -> dict[str, Any]:
    tcfg = cfg.task
    norm = str(tcfg.normalize)
    if norm not in ("mean", "sum"):
        raise ConfigError(f"task.normalize must be mean or sum, got {norm!r}")
    method, name = task_method(cfg, out_dir, "choice", "score_continuation", "plain_lm")
    tok = tokenizer_of(method)
    items = items_of(samples, tok)
    if not items:
        raise no_items("choice", cfg, "no question has options with the answer among them")
    progress = bool(cfg.progress)
    system = str(cfg.method.name)
    baselines = [str(b) for b in tcfg.baselines or []]
    records = Records(out_dir)

    def rank(scores: list[tuple[float, int]]) -> int:
        vals = [nll / max(n, 1) if norm == "mean" else nll for nll, n in scores]
        return min(range(len(vals)), key=vals.__getitem__)

    try:
        with torch.no_grad():
            for it in progress_bar(items, f"choice {system}", progress):
                def mine(it=it) -> dict[str, Any]:
                    sc = [method.score_continuation(it["context"], o, it["prompt"]) for o in it["options"]]
                    return {"nll": [s.nll for s in sc], "tokens": [s.tokens for s in sc],
                            "memory_slots": sc[0].memory_slots, "context_tokens": sc[0].context_tokens}
                records.get_or_make(f"{system}|{it['id']}", mine)
            if baselines:
                start = start_ids(tok)
                with method.plain_lm() as lm:
                    for kind in baselines:
                        for it in progress_bar(items, kind, progress):
                            def base(it=it, kind=kind) -> dict[str, Any]:
                                sc = [baseline_nll(lm, kind, it["context"], it["prompt"], o, start) for o in it["options"]]
                                return {"nll": [s[0] for s in sc], "tokens": [s[1] for s in sc],
                                        "memory_slots": sc[0][2], "context_tokens": sum(map(len, it["context"]))}
                            records.get_or_make(f"{kind}|{it['id']}", base)
    finally:
        records.close()
    rows = []
    for sysname in [system] + baselines:
        per = []
        for it in items:
            r = records.done[f"{sysname}|{it['id']}"]
            pred = rank(list(zip(r["nll"], r["tokens"])))
            per.append((it, pred, float(pred == it["gold"]), r))
        groups: dict[str, list[Any]] = {"overall": per}
        for p in per:
            groups.setdefault(p[0]["category_name"], []).append(p)
        for cat, ps in groups.items():
            acc, se = mean_se([p[2] for p in ps])
            rows.append({"system": sysname, "category": cat, "n": len(ps), "accuracy": acc, "accuracy_stderr": se,
                         "memory_slots": whole_or_round(sum(p[3]["memory_slots"] for p in ps) / len(ps)),
                         "chance": round(sum(1 / len(p[0]["options"]) for p in ps) / len(ps), 4)})
    header = ["system", "category", "n", "accuracy ± SE", "chance", "slots read"]
    cells = [[r["system"], r["category"], r["n"], f"{r['accuracy']:.4f}" + ("" if r["accuracy_stderr"] is None else
                                                                          f" ± {r['accuracy_stderr']:.4f}"),
              r["chance"], r["memory_slots"]] for r in rows]
    notes = [f"Options ranked by {'mean NLL per token' if norm == 'mean' else 'summed NLL'}; ± = bootstrap "
             "standard error over questions; chance = mean of 1 / options."]
    return write_results(out_dir, cfg, method, "choice", name, rows, header, cells, {"normalize": norm}, notes)
