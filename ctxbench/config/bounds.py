"""The accepted range of every numeric config key and the closed set of every enumerated one.

Checked right after compose (:func:`ctxbench.config.schema.check_types` calls :func:`check_bounds`),
so ``limit=-1`` or ``trainer.scheduler=foo`` fails before anything loads, in one line:
``config key 'limit' must be >= 0 (0 or null = all), got -1``. ``-m`` sweeps are checked for every
combination the same way.

Keys are dotted, as in the composed config; a key may be a ``fnmatch`` pattern (``*.seed``). An
exact key wins over a pattern. Where one key means different things in different options of its
group (``method.mode`` is concat|merge for CCM, pretrain|finetune for ICAE), the entry maps the
option's ``name`` (a pattern too) to its bound. ``judge_llm.*`` is checked as ``llm.*``.

null is never range-checked (the type check decides where null is allowed; the note says what it
means). Bools are never range-checked. :data:`URL_KEYS` must be http(s) URLs with a host.
tests/test_config_bounds.py fails when a numeric key of any YAML under conf/ has neither a range
here nor a reason in :data:`EXEMPT`, and when a YAML comment lists a key's values (``# a | b``)
but the key has neither :data:`CHOICES` nor a reason in :data:`OPEN_CHOICES`.
"""
from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass
from typing import Any, Iterator

from ctxbench.core.errors import ConfigError


@dataclass(frozen=True)
class Range:
    """``low <= value <= high`` (``<`` where open); None = unbounded on that side."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    note: str = ""  # what special values mean: "0 or null = all"

    def accepts(self, value: float) -> bool:
        if isinstance(value, float) and math.isnan(value):
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return not (self.high is not None and (value >= self.high if self.high_open else value > self.high))

    def describe(self) -> str:
        lo, hi = _num(self.low), _num(self.high)
        if self.high is None:
            text = f"{'>' if self.low_open else '>='} {lo}"
        elif self.low is None:
            text = f"{'<' if self.high_open else '<='} {hi}"
        else:
            text = f"in {'(' if self.low_open else '['}{lo}, {hi}{')' if self.high_open else ']'}"
        return text + (f" ({self.note})" if self.note else "")


def _num(x: float | None) -> str:
    if x is None:
        return ""
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def ge(low: float, note: str = "") -> Range:
    return Range(low, None, note=note)


def gt(low: float, note: str = "") -> Range:
    return Range(low, None, low_open=True, note=note)


def between(low: float, high: float, low_open: bool = False, high_open: bool = False, note: str = "") -> Range:
    return Range(low, high, low_open, high_open, note)


COUNT, POSITIVE, TOKENS = ge(0), ge(1), ge(1)  # a count that may be 0; one that may not; a token budget
SHARE = between(0, 1)
SEED = between(0, 2**32 - 1, note="numpy's seed range")
COSINE = between(-1, 1)

RANGES: dict[str, Range | dict[str, Range]] = {
    # -- top level ------------------------------------------------------------------------------------
    "limit": ge(0, note="0 or null = all"),
    "concurrency": ge(1, note="or auto: the llm backend's concurrency / batch_size"),  # evaluate.plan: limit in (None, 0) answers every question
    "seed": SEED, "*.seed": SEED,
    "max_failed_fraction": SHARE,
    "judge.runs": POSITIVE,  # llm_judge runs per answer (Mem0's paper: 10)
    "judge.temperature": between(0, 2, note="0 = greedy; the OpenAI API's range"),
    # -- datasets -----------------------------------------------------------------------------------------
    "dataset.limit": ge(0, note="0 or null = all"),
    "dataset.max_chars": ge(0, note="0 or null = no cut"),
    "dataset.min_chars": COUNT,
    "dataset.max_episodes": ge(0, note="0 or null = all"),
    "dataset.max_profile": POSITIVE, "dataset.k": POSITIVE, "dataset.task_index": between(1, 7),
    "dataset.sampling_seed": COUNT,
    "dataset.sessions": ge(1, note="null = all"),  # first N sessions of each conversation (locomo, dialsim)
    # -- anything that batches ----------------------------------------------------------------------------
    "*batch_size": POSITIVE,  # trainer., llm., embedder., train_step., method.encode_batch_size
    # -- trainer ------------------------------------------------------------------------------------------
    "trainer.max_steps": COUNT,
    "task.target_tokens": ge(1), "task.windows": ge(1), "task.skip_tokens": ge(0),  # eval task=... (ctxbench/evaluation/tasks/)
    "task.extra_tokens": ge(0),
    "trainer.grad_accum": POSITIVE,
    "trainer.lr": gt(0),
    "trainer.weight_decay": COUNT,
    "trainer.warmup_ratio": SHARE,
    "trainer.warmup_steps": ge(0, note="null = from warmup_ratio"),
    "trainer.max_grad_norm": ge(0, note="0 = no clipping"),
    "trainer.log_every": POSITIVE,
    "trainer.eval_every": ge(0, note="0 = only at the end"),
    "trainer.eval_fraction": between(0, 1, high_open=True),
    "trainer.max_eval_batches": POSITIVE,
    "trainer.save_every": ge(0, note="0 = only at the end"),
    "trainer.keep_checkpoints": ge(0, note="0 = keep all"),
    "trainer.stop_after": ge(0, note="0 or null = never"),
    "trainer.num_workers": COUNT,
    "launcher.deepspeed.zero_optimization.stage": between(0, 3),
    "launcher.fsdp.version": between(1, 2, note="FSDP1 or FSDP2 (fully_shard)"),
    "launcher.fsdp.min_num_params": COUNT,
    # -- llm ----------------------------------------------------------------------------------------------
    "llm.context_window": TOKENS,
    "llm.prefix_cache_min_tokens": TOKENS,  # llm=hf: the shortest shared prompt prefix whose KV is reused
    "llm.prefix_cache_entries": POSITIVE,   # llm=hf: prompts whose KV cache is kept
    "llm.max_retries": COUNT,
    "llm.max_consecutive_failures": ge(0, note="0 = never stop"),
    "llm.concurrency": POSITIVE,
    "llm.timeout_s": gt(0),
    "llm.preflight_timeout_s": gt(0),
    "llm.backoff_s": COUNT,
    "llm.backoff_max_s": COUNT,
    "embedder.cache_size": ge(0, note="0 = no cache"),
    # -- memory systems -----------------------------------------------------------------------------------
    "memory.*_max_tokens": TOKENS, "*.max_new_tokens": TOKENS,
    "memory.k": POSITIVE, "memory.k_graph": POSITIVE, "memory.archival_k": POSITIVE,
    "memory.k_by_category.*": POSITIVE, "memory.query_max_keywords": POSITIVE,
    "memory.recall_k": {"memorybank": ge(0, note="0 = no recall while ingesting"), "*": POSITIVE},
    "memory.expand": COUNT, "memory.k_neighbors": COUNT, "memory.m": COUNT, "memory.s": COUNT,
    "memory.max_facts": POSITIVE, "memory.max_entities": POSITIVE, "memory.max_relations": POSITIVE,
    "memory.max_keywords": POSITIVE, "memory.max_tags": POSITIVE, "memory.max_evolved": COUNT,
    "memory.max_conflict_edges": COUNT, "memory.json_retries": COUNT,
    "memory.chunk_size": POSITIVE, "memory.overlap": COUNT,  # overlap < chunk_size: checked by rag
    "memory.max_sessions": ge(1, note="null = all"), "memory.max_turns": ge(1, note="null = all"),
    "memory.reserve": COUNT,
    "memory.node_threshold": COSINE, "memory.search_threshold": COSINE, "memory.recall_threshold": COSINE,
    "memory.forget_threshold": SHARE,
    "memory.fifo_tokens": TOKENS, "memory.evict_frac": between(0, 1, low_open=True),
    "memory.warn_frac": between(0, 1, low_open=True), "memory.pressure_steps": ge(0, note="0 = no memory-pressure step"),
    "memory.summary_words": POSITIVE, "memory.max_steps": POSITIVE,
    "memory.max_page_tokens": TOKENS, "memory.min_page_tokens": TOKENS, "memory.tail_tokens": COUNT,
    "memory.preceding_tokens": ge(0, note="null = the whole previous page"),
    "memory.max_lookups": COUNT,
    # -- methods ------------------------------------------------------------------------------------------
    "method.seq_len": TOKENS, "method.segment_len": TOKENS, "method.step_tokens": TOKENS,
    "method.context_tokens": TOKENS, "method.lm_tokens": COUNT,  # 0 = AE only (no continuation)
    "method.max_context": ge(1, note="null = the model's window"),
    "method.max_context_tokens": TOKENS, "method.max_prompt_tokens": TOKENS, "method.max_answer_tokens": TOKENS,
    "method.max_session_tokens": ge(1, note="null = no cap"),
    "method.mem_size": ge(1, note="null = a full cache"),
    "method.n_tok": POSITIVE, "method.train_steps": POSITIVE, "method.n_segments": POSITIVE,
    "method.max_qa_steps": POSITIVE, "method.loss_steps_from": COUNT,
    "method.max_examples": ge(1, note="null = all"),
    "method.max_segments": ge(1, note="null = keep every segment"),
    "method.compression_rate": POSITIVE, "method.leave_tokens_for_lm": COUNT,
    "method.lambda_ae": SHARE, "method.lm_ratio": SHARE,
    "method.hh_keep_rate": between(0, 1, high_open=True),
    "method.local_len": COUNT, "method.kernel_size": POSITIVE, "method.n_convlayer": POSITIVE,
    "method.expand": POSITIVE,
    "method.conv_init_std": gt(0, note="null = PyTorch's fan-in default"),
    "method.normalizer_init": SHARE,  # λ: convex weight of the conv mix against the one-hot top-k slots
    "method.rope_scaling_factor": gt(0, note="or auto; null = 1.0"),
    "method.n_recent": ge(0, note="null = mem_size // 2"), "method.n_sink": COUNT,
    "method.window": POSITIVE, "method.kernel": POSITIVE, "method.beta": ge(1),  # SnapKV / PyramidKV
    "method.ingest_size": ge(1, note="null = mem_size"),
    "method.compression_ratio": between(0, 1, high_open=True, note="kvpress: share of the prefill evicted; 0 = none"),
    "method.*_lr_scale": COUNT,
    "method.lora.r": POSITIVE, "method.lora.alpha": gt(0), "method.lora.dropout": between(0, 1, high_open=True),
    # -- models -------------------------------------------------------------------------------------------
    "model.hidden_size": POSITIVE, "model.intermediate_size": POSITIVE, "model.num_layers": POSITIVE,
    "model.num_heads": POSITIVE, "model.num_kv_heads": POSITIVE, "model.max_position_embeddings": POSITIVE,
    # -- bench --------------------------------------------------------------------------------------------
    "kv_press.segment_len": TOKENS, "kv_press.n_segments": POSITIVE, "kv_press.mem_size": POSITIVE,
    "kv_press.ingest_tokens": TOKENS, "kv_press.new_tokens": POSITIVE, "kv_press.repeats": POSITIVE,
    "kv_press.rounds": POSITIVE,
    "train_step.warmup_steps": COUNT, "train_step.steps": POSITIVE, "train_step.rounds": POSITIVE,
    "train_step.timeout_s": gt(0),
    "gpu.warmup_steps": COUNT, "gpu.steps": POSITIVE,
    "gpu.peak_flops": gt(0), "gpu.budget_s": gt(0), "gpu.seed": SEED,
    "memory_systems.max_sessions": ge(1, note="null = all"), "memory_systems.questions": ge(1, note="null = all"),
    "eval_throughput.*.context_window": TOKENS, "eval_throughput.*.questions": POSITIVE,
    "eval_throughput.*.max_new_tokens": POSITIVE, "eval_throughput.*.batch_size": POSITIVE,
    "eval_throughput.concurrency.slots": POSITIVE, "eval_throughput.concurrency.delay_s": ge(0),
    "structured.prompts": POSITIVE, "structured.max_facts": POSITIVE, "structured.max_new_tokens": TOKENS,
    "structured.context_window": TOKENS, "structured.rounds": POSITIVE,
    "retrieval.dim": POSITIVE, "retrieval.cluster_size": POSITIVE, "retrieval.spread": COUNT,
    "retrieval.k": POSITIVE, "retrieval.queries": POSITIVE, "retrieval.hnsw_m": POSITIVE,
    "retrieval.ef_construction": POSITIVE, "retrieval.ef_search": POSITIVE,
    "retrieval.ivf_nlist": ge(1, note="null = sqrt(n)"), "retrieval.ivf_nprobe": POSITIVE,
    "retrieval.faiss_threads": ge(1, note="null = faiss's default"),
}

# numeric keys of the YAMLs deliberately without a range (tests/test_config_bounds.py reads this)
EXEMPT: dict[str, str] = {}

CHOICES: dict[str, tuple[Any, ...] | dict[str, tuple[Any, ...]]] = {
    "trainer.scheduler": ("cosine", "linear", "constant"),          # train.SCHEDULERS
    "trainer.precision": ("fp32", "bf16", "fp16"),
    "launcher.mixed_precision": ("no", "fp16", "bf16", "fp8"),      # accelerate's
    "launcher.fsdp.auto_wrap_policy": ("transformer_based_wrap", "size_based_wrap", "no_wrap"),  # accelerate's
    "launcher.fsdp.state_dict_type": ("SHARDED_STATE_DICT", "FULL_STATE_DICT"),
    "launcher.fsdp.sharding_strategy": ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD"),
    "model.dtype": ("float32", "fp32", "bfloat16", "bf16", "float16", "fp16", "auto"),  # models.loading.DTYPES
    "llm.dtype": ("float32", "fp32", "bfloat16", "bf16", "float16", "fp16", "auto"),
    "llm.response_format": ("json_schema", "json_object", "none"),
    "model.attn_implementation": ("eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention"),
    "method.mode": {"ccm_*": ("concat", "merge"), "icae*": ("pretrain", "finetune")},  # ccm.MODES, ICAE.MODES
    "method.positions": ("absolute", "cache"),
    "task.normalize": ("mean", "sum"),                              # tasks/choice.py
    "task.score": ("continuation", "stream"),
    "method.segment_layout": ("ctxbench", "reference"),             # methods/icae_data.Layout
    "method.loss_on": ("steps", "output"),                          # methods/ccm.py
    "method.hidden_act": ("relu", "gelu", "silu", "none"),         # methods.lococo.ACTIVATIONS
    "method.slot_norm": ("none", "embed"),
    "method.add_bos": ("auto", True, False),
    "concurrency": ("auto",),                                       # a string; numbers: RANGES
    "method.rope_scaling_factor": ("auto",),                        # a string; numbers: RANGES
    "memory.index": ("flat", "hnsw"),
    "memory.granularity": ("turns", "session_summary"),
    "memory.stores": ("per_speaker", "shared"),                     # memory.mem0.STORES
    "memory.graph.backend": ("ladybug", "neo4j"),
    "memory.forgetting": ("sample", "threshold"),                  # memory.memorybank.FORGETTING
    "logger.mode": ("online", "offline", "disabled"),
    "dataset.answer_format": ("multi_choice", "open_ended"),
    "dataset.question_time": ("session", "none"),                   # data.dialsim.QUESTION_TIMES
    "dataset.split": {"locomo_pwc": ("train", "test", "all"), "*": None},  # others: a hub split name
    "suite": ("all", "train_step", "kv_memory", "kv_press", "memory_systems", "retrieval", "eval_throughput", "structured", "gpu"),
    "gpu.size": ("7b", "tiny"),
    "gpu.gradient_checkpointing": ("auto", True, False),
    "retrieval.data": ("clustered", "uniform"),
    "eval_throughput.checks": ("concurrency", "hf_batch", "prefix_reuse", "call_cache"),
    "memory_systems.llm": ("scripted", "hf"),
    "action": ("stats", "download", "list"),
    "format": ("md", "json"),
    "qa_prompt": ("locomo", "mem0", "mem0g", "amem", "brief"),      # ctxbench.qa.PROMPTS
}

# string keys whose YAML comment lists some values (``# a | b``) but which take others too
OPEN_CHOICES: dict[str, str] = {
    "embedder.device": "any torch device string (cuda:1, mps)",
    "model.device": "any torch device string (cuda:1, mps); models.loading.resolve_device checks it",
    "llm.device": "any torch device string (cuda:1, mps); models.loading.resolve_device checks it",
    "trainer.resume": "auto or a checkpoint path",
    "train_step.model": "any conf/model name",
    "method.press": "a kvpress alias or any kvpress prefill press class name; methods.kvpress_adapter checks it",
    "dataset.show": "names the default file when dataset.path is null; a label otherwise (sample)",
}

# list keys: the range every item must be in
ITEM_RANGES: dict[str, Range] = {
    "trainer.betas": between(0, 1, high_open=True, note="Adam's beta1, beta2"),
}
# list keys of a fixed length: the length, and how the error names it
LENGTHS: dict[str, tuple[int, str]] = {
    "trainer.betas": (2, "two numbers"),
}
# list keys that may not be empty: what an empty list would silently mean instead
NONEMPTY: dict[str, str] = {
    "metrics": "name at least one metric (e.g. metrics=[f1,bleu1]); `python -m ctxbench ls` lists them",
    "trainer.betas": "Adam's two betas, e.g. [0.9,0.999]",
}

# keys whose value is an http(s) URL with a host (as OpenAIChatLLM requires; null = the backend's default)
URL_KEYS = {"llm.base_url"}


def _lookup(table: dict[str, Any], key: str, cfg: Any) -> Any:
    """The entry of ``key`` (exact, else the first matching pattern), resolved by its option's name."""
    entry = table.get(key)
    if entry is None:
        entry = next((v for k, v in table.items() if "*" in k and fnmatch.fnmatchcase(key, k)), None)
    if isinstance(entry, dict):
        name = str(_select(cfg, key.split(".", 1)[0] + ".name") or "")
        entry = next((v for pat, v in entry.items() if fnmatch.fnmatchcase(name, pat)), None)
    return entry


def _select(cfg: Any, key: str) -> Any:
    try:
        from omegaconf import OmegaConf

        return OmegaConf.select(cfg, key, default=None)
    except Exception:
        return None


def bound_key(key: str) -> str:
    """The key whose bound applies: ``judge_llm.X`` is checked as ``llm.X``."""
    return "llm." + key[len("judge_llm."):] if key.startswith("judge_llm.") else key


def range_of(key: str, cfg: Any = None) -> Range | None:
    return _lookup(RANGES, bound_key(key), cfg)


def choices_of(key: str, cfg: Any = None) -> tuple[Any, ...] | None:
    return _lookup(CHOICES, bound_key(key), cfg)


def problem(key: str, value: Any, cfg: Any = None) -> str | None:
    """The one-line complaint about ``key=value``, or None if the value is accepted (or not checked)."""
    if isinstance(value, list):
        return _list_problem(bound_key(key), key, value)
    if value is None or isinstance(value, dict):
        return None
    if bound_key(key) in URL_KEYS:
        return _url_problem(key, value)
    r = range_of(key, cfg)
    if r is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
        return None if r.accepts(value) else f"config key {key!r} must be {r.describe()}, got {value!r}"
    options = choices_of(key, cfg)
    if options is not None and value not in options:
        listed = " | ".join(str(o).lower() if isinstance(o, bool) else str(o) for o in options)
        return f"config key {key!r} must be one of {listed}, got {value!r}"
    return None


def _list_problem(bkey: str, key: str, value: list) -> str | None:
    if not value and bkey in NONEMPTY:
        return f"config key {key!r} is an empty list: {NONEMPTY[bkey]}"
    n, what = LENGTHS.get(bkey, (None, ""))
    if n is not None and len(value) != n:
        hint = f" ({NONEMPTY[bkey]})" if bkey in NONEMPTY else ""
        return f"config key {key!r} must be {what}{hint}, got {value!r}"
    r = ITEM_RANGES.get(bkey)
    for i, item in enumerate(value if r is not None else ()):
        if not isinstance(item, (int, float)) or isinstance(item, bool) or not r.accepts(item):
            return f"config key {key!r} item {i} must be a number {r.describe()}, got {item!r}"
    return None


def _url_problem(key: str, value: Any) -> str | None:
    import urllib.parse

    from ctxbench.core.secrets import scrub_text

    parts = urllib.parse.urlsplit(str(value))
    if parts.scheme in ("http", "https") and parts.netloc:
        return None
    return f"config key {key!r} must be an http(s) URL (e.g. http://127.0.0.1:8080/v1), got {scrub_text(str(value))!r}"


def check_bounds(cfg: Any, values: Iterator[tuple[str, Any]]) -> None:
    """Raise :class:`ConfigError` for the first (key, value) outside its range or choices."""
    for key, value in values:
        msg = problem(key, value, cfg)
        if msg:
            raise ConfigError(msg)
