"""``eval ... estimate=true``: what a run will cost, before it runs, without calling or loading a model.

The system of ``memory=`` is built on a tokenizer-only stand-in (:class:`TokenOnlyLLM`: the backend's
tokenizer — ``llm=hf`` the local model's own, ``llm=openai`` its :class:`~ctxbench.llm.token_count.TokenCounter`
— counting a prompt as the backend would after fitting it to the window; ``chat`` refuses) and an
embedder that refuses to encode, in a temporary folder; it plans each history with its own
``estimate_calls`` (:mod:`ctxbench.core.plan`), from the prompt functions it runs with (under
``task=compression`` set to the task's ratio first). A method (``method=``) is estimated as histories ×
their prefill tokens (the history as rendered, in the model's tokenizer; a fixed-KV-cache method exactly,
with its prompt frame and one forward call per segment) and one answer call per question. ``llm_judge`` adds questions × ``judge.runs`` × panel
size judge calls (adversarial questions are not judged).

What it prints and writes (``estimate.json`` in the run folder, atomically): histories, questions,
session slots, distinct sessions (id + content), calls and input/output tokens per phase, the calls
the call cache would serve (identical prompts: a session's note or summary asked for again in
another haystack), embeddings requested and distinct, and the price at ``price.input_per_mtok`` /
``price.output_per_mtok`` (cache-served calls cost nothing). Output tokens are the calls' caps: an
upper bound. A system that cannot say is one line naming it, never a silent 0.
"""
from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path
from typing import Any, Iterable

from ctxbench.core.plan import OUTPUT_SHARE, CannotEstimate, PlannedCall, PlannedEmbed, planned
from ctxbench.core.types import History, Question, Sample
from ctxbench.data.sessions import distinct_sessions

ESTIMATE_JSON = "estimate.json"
PHASES = ("construction", "answer", "judge")


class ModelCalled(RuntimeError):
    """A model was asked for a reply (or an embedding) during ``estimate=true``: a bug in a system's plan."""


class TokenOnlyLLM:
    """Counts like the backend, never generates: ``count_tokens``, ``prompt_tokens(messages, cap)`` (the
    prompt as the backend fits and counts it), ``fitted``, ``context_window``. ``count_text`` counts
    one text; ``measure`` counts a list of messages as the backend does (chat template for a local
    model, content + 4 per message for an OpenAI-compatible server)."""

    def __init__(self, name: str, window: int, count_text: Any, measure: Any):
        from ctxbench.llm.base import UsageMeter

        self.model_name = name
        self._window = int(window)
        self._count = count_text
        self._measure = measure
        self.meter = UsageMeter()

    @property
    def context_window(self) -> int:
        return self._window

    def count_tokens(self, text: str) -> int:
        return int(self._count(text))

    def fitted(self, messages: list[dict[str, str]], max_new_tokens: int) -> list[dict[str, str]]:
        from ctxbench.llm.fit import fit_messages

        budget = max(1, self._window - int(max_new_tokens))
        if self._measure(messages) <= budget:
            return messages
        return fit_messages(messages, budget, self._measure, self.count_tokens)[0]

    def prompt_tokens(self, messages: list[dict[str, str]], max_new_tokens: int) -> int:
        budget = max(1, self._window - int(max_new_tokens))
        n = self._measure(messages)
        return n if n <= budget else min(budget, self._measure(self.fitted(messages, max_new_tokens)))

    def chat(self, *args: Any, **kw: Any) -> Any:
        raise ModelCalled("estimate=true: a system asked the LLM for a reply while planning")


class NoEmbedder:
    """An embedder of the configured dimension that refuses to encode (``estimate=true``)."""

    dim = 384

    def encode(self, texts: Any) -> Any:
        raise ModelCalled("estimate=true: a system asked the embedder to encode while planning")


def token_only_llm(llm_cfg: Any) -> TokenOnlyLLM:
    """The stand-in for ``llm=``: its tokenizer alone, no weights loaded."""
    name = str(llm_cfg.name)
    if name == "hf":
        from ctxbench.llm.chat_template import chat_text

        tok = hf_tokenizer(llm_cfg.model)
        count = token_counter(tok)

        def measure(msgs: list[dict[str, str]]) -> int:
            return count(chat_text(tok, msgs))

        return TokenOnlyLLM(str(llm_cfg.model), llm_cfg.context_window, count, measure)
    from ctxbench.llm.token_count import TokenCounter

    counter = TokenCounter(llm_cfg.tokenizer, str(llm_cfg.model or name))
    return TokenOnlyLLM(str(llm_cfg.model or name), llm_cfg.context_window, counter.count,
                        lambda msgs: sum(counter.count(m.get("content", "")) + 4 for m in msgs))


def hf_tokenizer(model: Any) -> Any:
    """The tokenizer of ``llm.model`` / ``model=`` (a conf/model name or a hub id / folder), without its weights."""
    from ctxbench.llm.hf import model_config
    from ctxbench.models.loading import smollm2_dir, tiny_tokenizer

    mcfg = model_config(model)
    kind = str(mcfg.name)
    if kind == "tiny":
        return tiny_tokenizer()
    from transformers import AutoTokenizer

    if kind == "smollm2_135m":
        return AutoTokenizer.from_pretrained(str(smollm2_dir()))
    path = mcfg.path  # tiny and smollm2_135m are handled above: every other model config is model=hf's
    if not path:
        raise CannotEstimate(f"model={kind}: no tokenizer folder to count with (set llm.model to a hub id or folder)")
    return AutoTokenizer.from_pretrained(str(path))


def token_counter(tok: Any) -> Any:
    """``count(text)``: the tokens of a text in ``tok``, no special tokens (as the backend counts held text)."""
    return lambda text: len(tok(text, add_special_tokens=False)["input_ids"])


# ---- what the run holds ----------------------------------------------------------------------------

def planned_questions(samples: Iterable[Sample], limit: int | None) -> list[tuple[History, list[Question]]]:
    """(history, its questions) in dataset order, at most ``limit`` questions in all (0 / None: all): the
    run's own plan (:func:`ctxbench.evaluation.run.plan`), so the estimate and the run count the same questions."""
    from ctxbench.evaluation.run import plan

    return [(s.history, qs) for s, qs in plan(list(samples), limit)]


def tally(items: Iterable[Any], cache: bool) -> dict[str, Any]:
    """Planned calls and embeddings summed: per phase calls, input and output tokens, cache-served calls
    (a key seen before, with ``llm.cache`` on), exact / estimated calls; embeddings requested / distinct."""
    phases: dict[str, Counter] = {p: Counter() for p in PHASES}
    seen: set[str] = set()
    texts: set[str] = set()
    embed = Counter()
    rules: dict[str, str] = {}
    for it in items:
        if isinstance(it, PlannedEmbed):
            embed["requested"] += len(it.texts) + it.unknown
            embed["unknown"] += it.unknown
            texts.update(it.texts)
            continue
        c = phases.setdefault(it.phase, Counter())
        c["calls"] += 1
        c["input_tokens"] += it.prompt_tokens
        c["output_tokens_cap"] += it.max_new_tokens
        c["estimated_calls" if not it.exact else "exact_calls"] += 1
        if it.note:
            rules.setdefault(it.kind, it.note)  # the first call's rule, as an example
        if cache and it.key is not None and it.key in seen:
            c["cache_served_calls"] += 1
            c["cache_served_input_tokens"] += it.prompt_tokens
        elif it.key is not None:
            seen.add(it.key)
    out = {p: {k: int(c.get(k, 0)) for k in ("calls", "input_tokens", "output_tokens_cap", "cache_served_calls",
                                               "cache_served_input_tokens", "exact_calls", "estimated_calls")}
           for p, c in phases.items()}
    computed = len(texts) + embed["unknown"]
    return {"phases": out, "embeddings": {"requested": int(embed["requested"]), "distinct": int(computed)},
            "rules": rules}


def judge_calls(cfg: Any, llm: TokenOnlyLLM, plan: list[tuple[History, list[Question]]],
                answer_cap: int = 0) -> list[PlannedCall]:
    """questions × judge.runs × panel size judge calls: the judge prompt with the judged answer taken as
    :data:`~ctxbench.core.plan.OUTPUT_SHARE` of the answer cap ``answer_cap``."""
    if "llm_judge" not in list(cfg.metrics or []):
        return []
    from ctxbench.metrics.judge import answer_text, get_judge, judged_type
    from ctxbench.metrics.judges.panel import panel_names, with_dataset_judge

    runs = int(cfg.judge.runs)
    out = []
    for name in panel_names(with_dataset_judge(cfg.judge, cfg.dataset)):
        judge = get_judge(str(name))
        cap = int(judge.max_new_tokens)
        for _, qs in plan:
            for q in qs:
                qtype = judged_type(q)
                if qtype is None:
                    continue
                msgs = judge.messages(q.question, answer_text(q.answer), "", qtype)
                for _ in range(runs):
                    out.append(planned(llm, "judge", msgs, cap, f"judge.{name}", exact=False,
                                       extra_tokens=int(round(OUTPUT_SHARE * answer_cap)),
                                       note=f"the judged answer taken as {OUTPUT_SHARE:g} of the answer cap"))
    return out


def method_calls(cfg: Any, plan: list[tuple[History, list[Question]]]) -> tuple[list[PlannedCall], dict[str, Any]]:
    """A compression method: each history prefilled once (its tokens as rendered), one answer per question.

    A fixed-KV-cache method (``FixedKVMethod``: full_cache, streamingllm, h2o, snapkv, pyramidkv) exactly
    as it runs: the answer prompt's text before the context plus the rendered history, streamed
    ``method.segment_len`` tokens a forward call (one call under ``task=compression`` with the whole
    prefill), and per question the prompt's text after the context (:func:`ctxbench.methods.kv_prompt.qa_frame`).
    Other methods: the rendered history once, the question's prompt per answer (a rule)."""
    from ctxbench.core import registry
    from ctxbench.core.render import render_history
    from ctxbench.evaluation.protocol import protocol_of
    from ctxbench.qa import get_prompt

    tok = hf_tokenizer(cfg.model)
    count = token_counter(tok)
    prompt = get_prompt(cfg.qa_prompt)
    cap = prompt.cap(cfg.method.get("max_new_tokens"))  # a plug-in method's settings may declare no cap
    from ctxbench.methods.kv_cache import FixedKVMethod

    fixed_kv = issubclass(registry.get("method", str(cfg.method.name)), FixedKVMethod)
    protocol = protocol_of(cfg)
    calls = []
    for h, qs in plan:
        text = render_history(h, "locomo") if h.sessions else h.text
        if fixed_kv:
            from ctxbench.methods.kv_prompt import qa_frame

            n = count(qa_frame(tok, prompt, None, list(h.speakers))[0] + text)
            seg = n if protocol is not None and protocol.prefill == "whole" else int(cfg.method.segment_len)
            for start in range(0, n, max(1, seg)):
                calls.append(PlannedCall("construction", min(seg, n - start), 0, None, True, "method.prefill"))
            for q in qs:
                after = qa_frame(tok, prompt, q, list(h.speakers))[1]
                calls.append(PlannedCall("answer", count(after), cap, None, True, "method.answer"))
            continue
        calls.append(PlannedCall("construction", count(text), 0, None, True, "method.prefill"))
        for q in qs:
            msgs = prompt.messages(q, "", h.speakers)
            calls.append(PlannedCall("answer", count("\n".join(m["content"] for m in msgs)), cap, None, False,
                                     "method.answer", "the question's prompt; the history is held as compressed state"))
    return calls, {"model": str(cfg.model.name)}


def memory_calls(mem: Any, prompt: Any, llm: Any, plan: list[tuple[History, list[Question]]],
                 protocol: Any = None) -> Iterable[Any]:
    """Every planned item of the memory system ``mem`` (its config) answering with ``prompt`` over the plan's
    histories, counted by ``llm`` (a fresh system per history, as eval builds them; under ``task=compression``
    set to the ``protocol``'s ratio, as eval sets it)."""
    from ctxbench.core.registry import build, get
    from ctxbench.evaluation.protocol import prepare

    with tempfile.TemporaryDirectory(prefix="ctxbench-estimate-") as tmp:
        embedder = NoEmbedder() if get("memory", mem.name).needs_embedder else None
        for i, (h, qs) in enumerate(plan):
            system = build("memory", mem, llm=llm, embedder=embedder, workdir=Path(tmp) / str(i))
            system.use_prompt(prompt)
            prepare(system, protocol, f"memory={mem.name}")
            if hasattr(system, "reset"):
                system.reset()
            try:
                yield from system.estimate_calls(h, qs)
            finally:
                system.close()


def estimate(cfg: Any, samples: Iterable[Sample], out: Path | None) -> dict[str, Any]:
    """The estimate of ``cfg``'s run over ``samples`` (printed by :func:`print_estimate`; written to
    ``out/estimate.json`` when ``out`` is given)."""
    plan = planned_questions(samples, cfg.limit)
    shared = distinct_sessions(h for h, _ in plan)  # the one definition (data/sessions.py)
    record: dict[str, Any] = {"histories": len(plan), "questions": sum(len(q) for _, q in plan),
                              "session_slots": shared["session_slots"], "distinct_sessions": shared["distinct_sessions"],
                              "distinct_dated_sessions": shared["distinct_dated_sessions"],
                              "dataset": str(cfg.dataset.name)}
    method, memory = (cfg[g] if g in cfg else None for g in ("method", "memory"))
    if method:
        record["system"] = f"method={method.name}"
        items, more = method_calls(cfg, plan)
        record.update(more)
        cache = False
        llm = None
    else:
        record["system"] = f"memory={memory.name}"
        llm = token_only_llm(cfg.llm)
        record["llm"] = {"backend": str(cfg.llm.name), "model": llm.model_name, "context_window": llm.context_window,
                         "cache": bool(cfg.llm.cache)}
        cache = bool(cfg.llm.cache)
        try:
            from ctxbench.qa import get_prompt

            from ctxbench.evaluation.protocol import protocol_of

            items = list(memory_calls(memory, get_prompt(cfg.qa_prompt), llm, plan, protocol_of(cfg)))
        except CannotEstimate as e:
            record["cannot_estimate"] = str(e)
            items = []
    if llm is None and "llm_judge" in list(cfg.metrics or []):
        llm = token_only_llm(cfg.judge_llm or cfg.llm)
    if llm is not None and "cannot_estimate" not in record:
        answer_cap = max((c.max_new_tokens for c in items if isinstance(c, PlannedCall) and c.phase == "answer"),
                         default=0)
        items += judge_calls(cfg, llm, plan, answer_cap)
    record.update(tally(items, cache))
    from ctxbench.evaluation.reuse import planned as planned_reuse

    record["reuse"] = planned_reuse((h for h, _ in plan), record)  # results.json reuse's names (evaluation/reuse.py)
    record["price"] = price(record["phases"], cfg)
    if out is not None:
        write_estimate(out, record)
    return record


def price(phases: dict[str, dict[str, int]], cfg: Any) -> dict[str, Any] | None:
    """The price at ``price.input_per_mtok`` / ``price.output_per_mtok`` (USD per million tokens; either
    null: no price): cache-served calls cost nothing; output at the caps (an upper bound)."""
    p = cfg.price  # null: no price
    rin, rout = (p.input_per_mtok, p.output_per_mtok) if p else (None, None)
    if rin is None and rout is None:
        return None
    tin = sum(c["input_tokens"] - c["cache_served_input_tokens"] for c in phases.values())
    served = {ph: c["cache_served_calls"] for ph, c in phases.items()}
    tout = 0
    for ph, c in phases.items():
        per = c["output_tokens_cap"] / c["calls"] if c["calls"] else 0
        tout += int(round(per * (c["calls"] - served[ph])))
    cost_in = tin / 1e6 * float(rin or 0.0)
    cost_out = tout / 1e6 * float(rout or 0.0)
    return {"input_per_mtok": rin, "output_per_mtok": rout, "billed_input_tokens": tin,
            "billed_output_tokens_at_most": tout, "input_usd": round(cost_in, 4), "output_usd_at_most": round(cost_out, 4),
            "total_usd_at_most": round(cost_in + cost_out, 4)}


def write_estimate(out: Path, record: dict[str, Any]) -> Path:
    from ctxbench.runs.results import write_json

    path = Path(out) / ESTIMATE_JSON
    write_json(path, record)
    return path


def print_estimate(record: dict[str, Any], out: Path | None = None) -> None:
    """The estimate as a few lines (stdout)."""
    head = (f"estimate {record['system']} on {record['dataset']}: {record['histories']} histories, "
            f"{record['questions']} questions, {record['session_slots']} session slots, "
            f"{record['distinct_sessions']} distinct sessions"
            + (f" ({record['distinct_dated_sessions']} with their dates)"
               if record.get("distinct_dated_sessions", record["distinct_sessions"]) != record["distinct_sessions"] else ""))
    print(head)
    if record.get("cannot_estimate"):
        print(f"  cannot estimate: {record['cannot_estimate']}")
    for ph, c in record["phases"].items():
        if not c["calls"]:
            continue
        served = (f" ({c['cache_served_calls']:,} served by the call cache, {c['cache_served_input_tokens']:,} "
                  "input tokens)" if c["cache_served_calls"] else "")
        est = f"; {c['estimated_calls']:,} estimated by a rule" if c["estimated_calls"] else ""
        print(f"  {ph}: {c['calls']:,} LLM calls{served}, {c['input_tokens']:,} input tokens, "
              f"<= {c['output_tokens_cap']:,} output tokens{est}")
    e = record["embeddings"]
    if e["requested"]:
        print(f"  embeddings: {e['requested']:,} requested, {e['distinct']:,} distinct (computed once each)")
    for kind, rule in sorted(record.get("rules", {}).items()):
        print(f"  rule {kind}: {rule}")
    p = record.get("price")
    if p:
        print(f"  price: ${p['input_usd']:,.4f} input ({p['billed_input_tokens']:,} tokens at ${p['input_per_mtok']}/M) "
              f"+ <= ${p['output_usd_at_most']:,.4f} output = <= ${p['total_usd_at_most']:,.4f}")
    if out is not None:
        print(f"  → {Path(out) / ESTIMATE_JSON}")
