"""The task group: one schema per family of conf/task/ options.

Generated once from the YAML defaults; now the one source of each key (see ctxbench/config/setting.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ctxbench.config.setting import (  # noqa: F401 - the generator's full kit
    COSINE, COUNT, POSITIVE, REQUIRED, SEED, SHARE, between, ge, gt, nested, setting)


@dataclass
class ChoiceTask:
    """Option ranking (ctxbench/evaluation/tasks/choice.py): for each question with options (DialSim, MetaICL rows with options), the option the model finds most likely after the compressed context and the question wins. method= only. Accuracy per category with bootstrap standard errors, beside the baselines."""

    name: str = setting('choice', 'the registered name this config builds (ctxbench ls lists them)')
    normalize: str = setting('mean', 'mean | sum: rank options by mean NLL per token (length-fair) or summed NLL', choices=('mean', 'sum'))
    baselines: list = setting(['full_context', 'no_context'], 'the base model (adapters off) reading the whole context / none')


@dataclass
class PerplexityTask:
    """Continuation perplexity given the compressed context (ctxbench/evaluation/tasks/perplexity.py): method= only. Text datasets: windows of `length` context tokens then `target_tokens` scored tokens, for each length. QA datasets whose answers are continuations (dataset=ccm_dailydialog): context = the sessions, prompt = the question, target = the answer (the response perplexity CCM reports)."""

    name: str = setting('perplexity', 'the registered name this config builds (ctxbench ls lists them)')
    score: str = setting('continuation', "continuation | stream: every token of a max(lengths)-token window scored while it streams through the method's cache (LoCoCo's measure; fixed-cache methods), marks at each length", choices=('continuation', 'stream'))
    lengths: list = setting([512], 'context tokens before each target (text datasets), one table row per length')
    target_tokens: int = setting(128, 'tokens scored after the context (text datasets)', POSITIVE)
    windows: int = setting(8, 'windows per length (non-overlapping, in text order)', POSITIVE)
    skip_tokens: int = setting(0, 'start this many tokens into each text (held out from a run that trained on its start)', COUNT)
    baselines: list = setting(['full_context', 'no_context'], 'the base model (adapters off) reading the whole context / none')


@dataclass
class QaTask:
    """The default task: every system answers the dataset's questions; metrics= score the answers (ctxbench/evaluation/evaluator.py). memory= and method= systems alike."""

    name: str = setting('qa', 'the registered name this config builds (ctxbench ls lists them)')


@dataclass
class ReconstructionTask:
    """The context decoded back from its compression (ICAE's autoencoding; ctxbench/evaluation/tasks/reconstruction.py). method= only, one that offers reconstruct_ids (icae_pretrain / icae_finetune). Sweep memory size with -m method.mem_size=... (and a checkpoint per size)."""

    name: str = setting('reconstruction', 'the registered name this config builds (ctxbench ls lists them)')
    lengths: list = setting([64], 'tokens per passage, one table row per length')
    windows: int = setting(32, 'passages per length (non-overlapping, in text order)', POSITIVE)
    skip_tokens: int = setting(0, 'start this many tokens into each text (held out from a run that trained on its start)', COUNT)
    extra_tokens: int = setting(8, 'decode at most length + extra_tokens tokens', COUNT)


# schema node (conf/task/<option>.yaml lists /schema/task/<node>) -> schema
SCHEMAS = {
    'choice': ChoiceTask,
    'perplexity': PerplexityTask,
    'qa': QaTask,
    'reconstruction': ReconstructionTask,
}
# the `name` an option composes to -> its schema (where a key's bounds are looked up)
BY_NAME = {
    'choice': (ChoiceTask,),
    'perplexity': (PerplexityTask,),
    'qa': (QaTask,),
    'reconstruction': (ReconstructionTask,),
}
