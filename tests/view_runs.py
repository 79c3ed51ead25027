"""Synthetic run folders for the viewer's tests: predictions.jsonl (f1, a two-judge panel, usage,
meta.retrieved), results.json (overall and by_category with standard errors, health, provenance) and,
optionally, samples.jsonl with each answer's context. Deterministic for a seed."""
from __future__ import annotations

import json
import random
from pathlib import Path

CATEGORIES = ("single-hop", "multi-hop", "temporal", "open-domain", "adversarial")
SECRET = "sk-proj-ABCDEFGHIJKLMNOPQRSTUVWXyz0123456789"  # key-shaped: the page must never show it


def make_run(folder: Path, n: int = 20, seed: int = 0, samples: bool = True, context_chars: int = 3000,
             results: bool = True, system: str = "memory=rag", ids: list[str] | None = None) -> Path:
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    recs, ctx_lines = [], []
    for i, qid in enumerate(ids or [f"conv-{i // 50}_q{i}" for i in range(n)]):
        cat = CATEGORIES[i % len(CATEGORIES)]
        good = rng.random() < 0.6
        pred = f"answer {i}" if good else f"something else {rng.randint(0, 99)}"
        f1 = 1.0 if good else round(rng.random() * 0.4, 3)
        recs.append({"id": qid, "history_id": qid.split("_")[0], "question": f"What did speaker {i} say about topic {i}?",
                     "answer": f"answer {i}", "category": CATEGORIES.index(cat) + 1, "category_name": cat,
                     "prediction": pred, "raw_prediction": f"Answer: {pred}\n(extra line)",
                     "usage": {"held_text": 100 + i, "answer_prompt_tokens": 150 + i, "answer_completion_tokens": 5,
                               "answer_calls": 1, "memory_items": 3, "extra": {"big": "x" * 50}},
                     "meta": {"retrieved": [{"session": f"s{i % 7}", "turns": [f"D{i % 7}:1", f"D{i % 7}:2"]}]},
                     "f1": f1, "llm_judge": 1.0 if good else 0.0,
                     "llm_judge_strict": 1.0 if good and rng.random() < 0.8 else 0.0})
        ctx_lines.append({"id": qid, "history_id": recs[-1]["history_id"], "calls": [],
                          "context": f"context of {qid}: my key is {SECRET} " + "lorem ipsum " * (context_chars // 12),
                          "raw_prediction": recs[-1]["raw_prediction"], "prediction": pred})
    (folder / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
    if samples:
        (folder / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ctx_lines), encoding="utf-8")
    if results:
        def group(rows):
            out = {"n": len(rows)}
            for m in ("f1", "llm_judge", "llm_judge_strict"):
                vals = [r[m] for r in rows]
                mean = sum(vals) / len(vals)
                out[m] = round(mean, 4)
                out[f"{m}_stderr"] = round((sum((v - mean) ** 2 for v in vals) / max(1, len(vals) - 1) / len(vals)) ** .5, 4)
            return out
        by_cat = {c: {"id": CATEGORIES.index(c) + 1, **group([r for r in recs if r["category_name"] == c])}
                  for c in CATEGORIES if any(r["category_name"] == c for r in recs)}
        res = {"overall": group(recs), "by_category": by_cat, "command": "eval", "system": system,
               "dataset": "locomo_sample", "created": "2026-12-07T10:00:00Z",
               "qa_prompt": {"name": "brief", "version": "brief-v1"},
               "metrics": {"f1": {"version": "locomo-official-1"}, "llm_judge": {"version": "mem0-judge-2"}},
               "judges": {"mem0": {"prompt_version": "mem0-judge-2", "model": "gpt-4o-mini"},
                          "strict": {"prompt_version": "strict-judge-1", "model": "gpt-4o-mini"}},
               "llm": {"backend": "openai", "model": "gpt-4o-mini", "api_key": SECRET},
               "config": {"llm": {"api_key": SECRET}},
               "provenance": {"python": "3.11.7", "packages": {"ctxbench": "0.1.0"}},
               "git": {"commit": "0123456789abcdef", "dirty": False},
               "health": {"status": "ok", "warnings": [{"kind": "held_context", "message": "held context is large"}]}}
        (folder / "results.json").write_text(json.dumps(res), encoding="utf-8")
    return folder
