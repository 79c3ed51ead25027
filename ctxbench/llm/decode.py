"""``llm=hf``'s own greedy decode loop: each row stops at its own end and leaves the batch.

``generate`` runs a static batch until its last row ends: a batch of 16 answers whose prompt keeps
only the first line (``stop=["\\n"]``) would go on for ``max_new_tokens`` steps for every row because
one row writes a long first line. :func:`greedy_rows` decodes greedily with the KV cache and, after
each step, drops the rows that are done (a stop token, a stop string: :mod:`.stop`, or the token cap)
from the input, the attention mask and the cache (``batch_select_indices``), and the leading columns
that are padding in every row still running; the rest runs on fewer rows and fewer columns.

The prompts' common start (the chat template and system message every answer prompt of a batch
shares, at least :data:`SHARED_MIN` tokens) is computed once and its KV repeated for every row; each
row's rest follows it after its padding (``[shared][padding][rest]``, masked as padding).

What it computes is what ``generate`` computes for a greedy call: left-padded prompts, the
attention mask, position ids counted from each row's first real token (``cumsum(mask) - 1``, padding
at 0, as ``generate`` makes them), the argmax of the last position's logits. Each row's tokens are
the same as when it is decoded alone (tests/test_llm_stop.py on the tiny random model,
tests/test_llm_stop_smollm.py on the packaged SmolLM2).

:func:`stop_strings` is the same stop rule as a ``StoppingCriteria`` for the calls that still go
through ``generate`` (sampling, grammar-constrained decoding).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from ctxbench.llm.stop import find_stop


SHARED_MIN = 8  # a common start of at least this many tokens is computed once for the batch


def shared_prefix(seqs: list[list[int]]) -> int:
    """How many leading tokens every prompt of ``seqs`` shares (each keeps at least one of its own),
    0 when that is under :data:`SHARED_MIN`."""
    from ctxbench.llm.prefix_cache import common_prefix

    n = min(len(s) for s in seqs) - 1
    for s in seqs[1:]:
        n = min(n, common_prefix(seqs[0], s))
    return n if n >= SHARED_MIN else 0


def reusable(cache: Any) -> bool:
    """Every layer of ``cache`` a plain dynamic one (:func:`.prefix_cache.reusable`)."""
    from ctxbench.llm.prefix_cache import reusable as plain

    return plain(cache)


def _trim_cache(cache: Any, cols: int) -> bool:
    """Drop the first ``cols`` positions of every layer of ``cache`` (plain dynamic layers only)."""
    if not reusable(cache):
        return False
    for layer in cache.layers:
        if layer.get_seq_length() > 0:
            layer.keys = layer.keys[..., cols:, :]
            layer.values = layer.values[..., cols:, :]
    return True


def greedy_rows(model: Any, seqs: list[list[int]], *, pad_id: int, eos_ids: Sequence[int], max_new_tokens: int,
                done: Callable[[int, list[int]], bool], cache: Any, cache_kwarg: str, device: Any,
                logits_to_keep: bool = True) -> list[list[int]]:
    """The greedy continuation of every prompt in ``seqs`` (see the module doc): a row ends after a
    token of ``eos_ids``, when ``done(row, tokens)`` says so, or at ``max_new_tokens``. ``cache``
    (empty, or holding the KV of the first positions of a single prompt: prefix reuse) is filled in
    place; for one row it ends holding the prompt and the reply but the last token."""
    import torch

    n = len(seqs)
    past = cache.get_seq_length()
    if past and n != 1:
        raise ValueError("greedy_rows: a filled cache is for one prompt")
    extra = {"logits_to_keep": 1} if logits_to_keep else {}
    shared = shared_prefix(seqs) if n > 1 and reusable(cache) else 0
    if shared:  # the prompts' common start computed once, its KV repeated for every row
        model(input_ids=torch.tensor([seqs[0][:shared]], dtype=torch.long, device=device),
              position_ids=torch.arange(shared, device=device)[None], use_cache=True, **{cache_kwarg: cache}, **extra)
        cache.batch_repeat_interleave(n)
        past = shared
    tails = [s[past:] if n > 1 else s for s in seqs]
    width = max(len(t) for t in tails)
    ids = torch.tensor([[pad_id] * (width - len(t)) + t for t in tails], dtype=torch.long, device=device)
    mask = torch.tensor([[0] * (width - len(t)) + [1] * len(t) for t in tails], dtype=torch.long, device=device)
    if n > 1 and past:  # [shared start][padding][each row's rest]
        mask = torch.cat([mask.new_ones((n, past)), mask], dim=-1)
    pos = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)
    out = model(input_ids=ids[:, past:] if n == 1 else ids, attention_mask=mask, position_ids=pos[:, past:],
                use_cache=True, **{cache_kwarg: cache}, **extra)
    logits = out.logits[:, -1, :]
    nxt = pos[:, -1:] + 1
    eos = set(int(t) for t in eos_ids)
    tokens: list[list[int]] = [[] for _ in seqs]
    active = list(range(n))  # the original row of each row still in the batch
    for _ in range(max_new_tokens):
        step = logits.argmax(-1)
        keep = []
        for j, (row, t) in enumerate(zip(active, step.tolist())):
            tokens[row].append(t)
            if not (t in eos or len(tokens[row]) >= max_new_tokens or done(row, tokens[row])):
                keep.append(j)
        if not keep:
            break
        if len(keep) < len(active):
            sel = torch.tensor(keep, dtype=torch.long, device=device)
            cache.batch_select_indices(sel)
            mask, step, nxt = mask[sel], step[sel], nxt[sel]
            active = [active[j] for j in keep]
            lead = int((mask.sum(0) > 0).long().argmax())  # columns of padding in every row left
            if lead and _trim_cache(cache, lead):
                mask = mask[:, lead:]
        mask = torch.cat([mask, mask.new_ones((len(active), 1))], dim=-1)
        out = model(input_ids=step[:, None], attention_mask=mask, position_ids=nxt, use_cache=True,
                    **{cache_kwarg: cache}, **extra)
        logits = out.logits[:, -1, :]
        nxt = nxt + 1
    return tokens


def stop_strings(tokenizer: Any, stop: list[str], width: int) -> Any:
    """A ``StoppingCriteriaList`` ending each row of a ``generate`` call at a stop string (:mod:`.stop`);
    ``generate`` passes the whole sequences, whose prompt is ``width`` columns."""
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList

    class StopStrings(StoppingCriteria):
        def __call__(self, input_ids: Any, scores: Any, **kw: Any) -> Any:
            rows = input_ids[:, width:].tolist()
            hit = [find_stop(tokenizer.decode(r, skip_special_tokens=True), stop) is not None for r in rows]
            return torch.tensor(hit, dtype=torch.bool, device=input_ids.device)

    return StoppingCriteriaList([StopStrings()])
