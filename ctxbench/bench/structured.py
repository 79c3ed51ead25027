"""``suite=structured``: generation speed with and without schema constraints on the local model.

The structured prompts are the real ones (Mem0 fact extraction over the first message pairs of the
dataset's first conversation, with its schema). Each prompt is generated under its grammar
(``llm=hf``'s xgrammar processor); the same prompt is then generated *without* constraints for
exactly as many new tokens (``min_new_tokens = max_new_tokens``), so both sides do the same
forward passes and the ratio is the constraint's own cost (mask fill + apply per step). Rounds
alternate the two, and the grammar's compile time is reported apart (it is cached per schema).
"""
from __future__ import annotations

import time
from typing import Any

from ctxbench.core.registry import register
from ctxbench.bench.common import median, rnd


def _prompts(cfg: Any) -> list[tuple[list[dict[str, str]], dict[str, Any]]]:
    from ctxbench.memory.mem0 import render_turns
    from ctxbench.memory.prompts import mem0 as P
    from ctxbench.core.registry import build
    from ctxbench.bench.common import compose

    dcfg = compose("eval", [f"dataset={cfg.dataset}"]).dataset
    sample = list(build("dataset", dcfg))[0]
    session = sample.history.sessions[0]
    schema = P.facts_schema(list(sample.history.speakers), cfg.max_facts)
    out = []
    for i in range(0, min(len(session.turns), 2 * cfg.prompts), 2):
        pair = session.turns[i:i + 2]
        out.append((P.extract_messages("", render_turns(session.turns[:i][-4:]), session.date, render_turns(pair)), schema))
    return out


@register("bench", "structured")
def run(cfg: Any, ctx: dict[str, Any]) -> dict[str, Any]:
    import torch
    from transformers import GenerationConfig

    from ctxbench.config.compose import option_config
    from ctxbench.llm.hf import HFChatLLM

    llm = HFChatLLM(option_config("llm", {"name": "hf", "model": cfg.model, "context_window": cfg.context_window}))
    prompts = _prompts(cfg)
    max_new = cfg.max_new_tokens
    t0 = time.perf_counter()
    for _, schema in prompts:
        llm.grammar().compiled(schema)
    compile_s = time.perf_counter() - t0
    device = next(llm.model.parameters()).device

    def generate(ids: list[int], n: int, processor: Any) -> tuple[float, int]:
        x = torch.tensor([ids], device=device)
        gen = GenerationConfig(max_new_tokens=n, min_new_tokens=n if processor is None else 0, do_sample=False,
                               pad_token_id=llm.tokenizer.pad_token_id, eos_token_id=llm.eos_ids)
        t = time.perf_counter()
        with torch.no_grad():
            out = llm.model.generate(input_ids=x, attention_mask=torch.ones_like(x), generation_config=gen,
                                     logits_processor=[processor] if processor is not None else None)
        return time.perf_counter() - t, int(out.shape[1] - x.shape[1])

    rows, ratios = [], []
    for j, (msgs, schema) in enumerate(prompts):
        ids = llm.encode_chat(msgs)
        generate(ids, 2, None)  # warm-up
        con, free, n = [], [], 0
        for _ in range(cfg.rounds):
            s, n = generate(ids, max_new, llm.grammar().processor(schema))
            con.append(s)
            s2, n2 = generate(ids, n, None)
            assert n2 == n, (n2, n)
            free.append(s2)
        c, f = median(con), median(free)
        ratios.append(c / f)
        rows.append({"prompt": j, "prompt_tokens": len(ids), "new_tokens": n, "constrained_s": rnd(c),
                     "free_s": rnd(f), "constrained_tok_s": rnd(n / c, 2), "free_tok_s": rnd(n / f, 2),
                     "ratio": rnd(c / f, 3)})
    ratio = median(ratios)
    return {"description": f"Constrained (xgrammar) vs free generation on {llm.model_name}: Mem0 fact extraction "
                           f"prompts with their schema, the same number of new tokens on both sides.",
            "params": {"model": llm.model_name, "prompts": len(prompts), "rounds": cfg.rounds,
                       "max_new_tokens": max_new, "compile_s": rnd(compile_s), "torch_threads": torch.get_num_threads()},
            "columns": [["prompt", "prompt"], ["prompt_tokens", "prompt tokens"], ["new_tokens", "new tokens"],
                        ["constrained_s", "constrained s"], ["free_s", "free s"],
                        ["constrained_tok_s", "constrained tok/s"], ["free_tok_s", "free tok/s"],
                        ["ratio", "constrained ÷ free"]],
            "rows": rows, "ratio": rnd(ratio, 3),
            "notes": [f"median ratio {ratio:.3f} (goal ≤ 1.15); grammar compile {compile_s * 1000:.0f} ms for "
                      f"{len(prompts)} schemas (cached by xgrammar per schema)."]}
