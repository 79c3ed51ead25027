"""The task group: one schema per family of conf/task/ options.

Generated once from the YAML defaults; now the one source of each key (see ctxbench/config/setting.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ctxbench.config.setting import (  # noqa: F401 - the bound kit
    COSINE, COUNT, POSITIVE, REQUIRED, SEED, SHARE, between, ge, gt, configures, nested, registered, setting, tables)

SCHEMAS, BY_NAME = tables()  # filled by @configures below


@configures('choice')
@dataclass
class ChoiceTask:
    """Option ranking (ctxbench/evaluation/tasks/choice.py): for each question with options (DialSim, MetaICL rows with options), the option the model finds most likely after the compressed context and the question wins. method= only. Accuracy per category with bootstrap standard errors, beside the baselines."""

    name: str = registered('choice')
    normalize: str = setting('mean', 'mean | sum: rank options by mean NLL per token (length-fair) or summed NLL', choices=('mean', 'sum'))
    baselines: list = setting(['full_context', 'no_context'], 'the base model (adapters off) reading the whole context / none')


@configures('compression')
@dataclass
class CompressionTask:
    """The kvpress protocol (docs/evaluation.md): the QA task with every system compressing each history to (1 - ratio) x its tokens (set_compression_ratio, ctxbench/core/task_protocol.py), query-agnostic (the question is asked after the compression, kvpress's leaderboard) or query-aware (the question appended to the text the system compresses). memory= and method= systems that implement set_compression_ratio."""

    name: str = registered('compression')
    ratio: float = setting(0.5, 'share of the context dropped: the reader holds at most ceil((1 - ratio) x n) of the n tokens it ingests (KV slots, soft slots, kept or retrieved tokens), per example', between(0, 1, high_open=True, note='0 = keep everything'))
    query_aware: bool = setting(False, "false: the context is compressed before the question is seen (kvpress leaderboard); true: kvpress's compress_questions, the question text appended to the context the system compresses and the question then asked empty (one question per history)")
    ask_again: bool = setting(False, "with query_aware=true: also ask the question again, uncompressed, after the compression (ctxbench's query-aware mode before issue 54; not kvpress's)")
    budget: str = setting('ceil', "the budget's rounding: ceil = ctxbench's ceil((1 - ratio) x n) in exact decimals (never below the ratio); kvpress = kvpress's int(n x (1 - ratio)) in floats (truncated: one slot fewer when not whole, 99 for 0.9 of 1000)", choices=('ceil', 'kvpress'))
    prefill: str = setting('whole', "the fixed-cache presses: whole = one prefill of the whole history then one compression (kvpress's protocol); segments = streamed method.segment_len tokens at a time, compressed after each (working set budget + segment_len)", choices=('whole', 'segments'))


@configures('perplexity')
@dataclass
class PerplexityTask:
    """Continuation perplexity given the compressed context (ctxbench/evaluation/tasks/perplexity.py): method= only. Text datasets: windows of `length` context tokens then `target_tokens` scored tokens, for each length. QA datasets whose answers are continuations (dataset=ccm_dailydialog): context = the sessions, prompt = the question, target = the answer (the response perplexity CCM reports)."""

    name: str = registered('perplexity')
    score: str = setting('continuation', "continuation | stream: every token of a max(lengths)-token window scored while it streams through the method's cache (LoCoCo's measure; fixed-cache methods), marks at each length", choices=('continuation', 'stream'))
    lengths: list = setting([512], 'context tokens before each target (text datasets), one table row per length')
    target_tokens: int = setting(128, 'tokens scored after the context (text datasets)', POSITIVE)
    windows: int = setting(8, 'windows per length (non-overlapping, in text order)', POSITIVE)
    skip_tokens: int = setting(0, 'start this many tokens into each text (held out from a run that trained on its start)', COUNT)
    baselines: list = setting(['full_context', 'no_context'], 'the base model (adapters off) reading the whole context / none')


@configures('qa')
@dataclass
class QaTask:
    """The default task: every system answers the dataset's questions; metrics= score the answers (ctxbench/evaluation/evaluator.py). memory= and method= systems alike."""

    name: str = registered('qa')


@configures('reconstruction')
@dataclass
class ReconstructionTask:
    """The context decoded back from its compression (ICAE's autoencoding; ctxbench/evaluation/tasks/reconstruction.py). method= only, one that offers reconstruct_ids (icae_pretrain / icae_finetune). Sweep memory size with -m method.mem_size=... (and a checkpoint per size)."""

    name: str = registered('reconstruction')
    lengths: list = setting([64], 'tokens per passage, one table row per length')
    windows: int = setting(32, 'passages per length (non-overlapping, in text order)', POSITIVE)
    skip_tokens: int = setting(0, 'start this many tokens into each text (held out from a run that trained on its start)', COUNT)
    extra_tokens: int = setting(8, 'decode at most length + extra_tokens tokens', COUNT)
