"""The method group: one schema per method, each inheriting what its family shares.

Every schema inherits :class:`MethodSettings`; the fixed-cache methods :class:`FixedCacheSettings`, the hard
prompt compressors :class:`PromptCompressionSettings`, CCM-concat and CCM-merge one schema; a LoRA mapping is a
:class:`LoraSettings`. A subclass declares only its own keys and those whose default or meaning differ; an
option that only changes values (lococo_paper, ccm_*_paper, icae_finetune) has no schema of its own, its YAML
keeps what differs (see ctxbench/config/setting.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ctxbench.config.setting import (  # noqa: F401 - the bound kit
    COSINE, COUNT, POSITIVE, REQUIRED, SEED, SHARE, between, ge, gt, configures, nested, registered, setting, tables)

SCHEMAS, BY_NAME = tables()  # filled by @configures below


@dataclass
class MethodSettings:
    """What every method's config holds: its registered name and its answer cap."""

    name: str = setting(REQUIRED, 'the registered name this config builds (ctxbench ls lists them)')
    max_new_tokens: int | None = setting(None, "answer cap; null = the qa_prompt's (locomo: 32)", POSITIVE)


@dataclass
class LoraSettings:
    """A LoRA adapter: rank, scale, dropout and the modules it wraps."""

    r: int = setting(8, 'the paper uses 8 (16 for the 13B models); any 8-16 is in range', POSITIVE)
    alpha: int = setting(16, 'reference: 32', gt(0))
    dropout: float = setting(0.0, 'reference: 0.05', between(0, 1, high_open=True))
    target_modules: list = setting(['q_proj', 'k_proj', 'v_proj', 'o_proj'], 'modules that get a LoRA adapter')


@dataclass
class EnabledLoraSettings(LoraSettings):
    """A LoRA adapter that may be switched off (full fine-tuning)."""

    enabled: bool = setting(False, 'false = full fine-tuning')


@dataclass
class FixedCacheSettings(MethodSettings):
    """A method that reads the history segment by segment into a KV cache of mem_size slots (ctxbench/methods/kv_cache.py)."""

    segment_len: int = setting(64, 'B: tokens per segment', POSITIVE)
    mem_size: int | None = setting(128, 'M: cache slots kept between segments', ge(1, note='null = a full cache'))
    positions: str = setting('absolute', "tokens keep their text positions (as H2O's code) | cache", choices=('absolute', 'cache'))


@dataclass
class PromptCompressionSettings(MethodSettings):
    """Hard prompt compression: the history's tokens pruned before the answer (ctxbench/methods/prompt_compression.py)."""

    compression_ratio: float = setting(0.5, "share of the history's tokens dropped (0 = keep all); task=compression sets it from task.ratio", between(0, 1, high_open=True, note="share of the history's tokens dropped; 0 = none"))


@configures('ccm', 'ccm_concat', 'ccm_merge')
@dataclass
class CcmMethod(MethodSettings):
    """CCM (arXiv 2312.03414): concat memory (after each step the KV of n_tok <COMP> tokens is appended) or merge memory (a running mean of each step's <COMP> KV, constant n_tok slots). CPU-sized defaults; see ccm_concat_paper.yaml / ccm_merge_paper.yaml for the paper's setting."""

    name: str = registered('ccm_concat')
    mode: str = setting('concat', 'concat | merge (defaults to the part of `name` after "ccm_")', choices=('concat', 'merge'))
    n_tok: int = setting(8, '<COMP> tokens per step (trainable embeddings); concat memory grows by n_tok per step, merge memory stays n_tok slots', POSITIVE)
    step_tokens: int = setting(64, 'documents: tokens per context step (training chunks and inference steps)', POSITIVE)
    train_steps: int = setting(4, 'steps per training example (chunks / sessions / sessions up to the evidence)', POSITIVE)
    max_session_tokens: int | None = setting(256, "cap on a LoCoMo session's tokens (training; inference splits longer sessions)", ge(1, note='null = no cap'))
    loss_steps_from: int = setting(2, 'loss on the text of steps >= this (the continuation read from memory)', COUNT)
    loss_on: str = setting('steps', "steps (each step's continuation + the target) | output (the target only, as the paper trains MetaICL / LaMP / DailyDialog)", choices=('steps', 'output'))
    recurrent: bool = setting(True, "true: each step's COMP reads the memory before it (the reference's *_recur masks, dialogue / LoCoMo); false: each step compressed on its own, only the target reads memory (the reference's MetaICL / LaMP masks; ccm_mask.py)")
    session_examples: bool = setting(True, "LoCoMo: windows of consecutive sessions, loss on each next session's first turns")
    qa_examples: bool = setting(True, 'LoCoMo: sessions up to the last evidence, then question → answer')
    max_examples: int | None = setting(None, 'cap on training examples (null = all)', ge(1, note='null = all'))
    max_new_tokens: int | None = setting(32, 'answer length when evaluated', POSITIVE)
    progress: bool = setting(False, 'tqdm bar over steps while ingesting')
    seed: int = setting(0, 'init of the <COMP> embeddings', SEED)
    lora: LoraSettings | None = nested(LoraSettings, 'conditional LoRA: fires only at <COMP> positions')
    max_qa_steps: int = setting(16, 'documents with questions (PwC): at most this many chunks before the question', POSITIVE)


@configures('full_cache')
@dataclass
class FullCacheMethod(FixedCacheSettings):
    """The unbounded KV cache, processed segment by segment like the fixed-cache methods (reference line)."""

    name: str = registered('full_cache')
    segment_len: int = setting(64, 'B: tokens per segment (results do not depend on it, up to float rounding)', POSITIVE)
    mem_size: int | None = setting(None, 'unbounded', ge(1, note='null = a full cache'))


@configures('h2o')
@dataclass
class H2oMethod(FixedCacheSettings):
    """H2O (arXiv 2306.14048): keep heavy hitters by accumulated attention + a local window. Training-free."""

    name: str = registered('h2o')
    n_recent: int | None = setting(None, "local window; null = mem_size // 2 (the paper's 50/50 split)", ge(0, note='null = mem_size // 2'))


@dataclass
class IcaeLora(LoraSettings):
    """ICAE's encoder LoRA"""

    r: int = setting(8, 'paper/reference v2: 128 (fine-tuned Mistral release: 512)', POSITIVE)
    target_modules: list = setting(['q_proj', 'v_proj'], 'modules that get a LoRA adapter')


@configures('icae_pretrain', 'icae_finetune', 'icae_pretrain')
@dataclass
class IcaeMethod(MethodSettings):
    """ICAE pretraining (arXiv 2307.06945, reference getao/icae v2) — CPU setting (SmolLM2-135M or tiny). Encoder = base LLM + LoRA with mem_size memory tokens after each segment; decoder = the same LLM, adapter disabled. Loss λ·L_AE + (1−λ)·L_LM.  Paper setting: method=icae_paper_pretrain."""

    name: str = registered('icae_pretrain')
    mode: str = setting('pretrain', 'pretrain (AE + LM) | finetune ([slots][FT] prompt → answer)', choices=('pretrain', 'finetune'))
    mem_size: int | None = setting(16, 'memory tokens (slots) per segment (paper/reference: 128)', ge(1, note='null = a full cache'))
    compression_rate: int = setting(4, 'segment length = mem_size × compression_rate tokens (paper: 4×)', POSITIVE)
    lambda_ae: float = setting(0.5, 'λ in λ·L_AE + (1−λ)·L_LM (paper: best around 0.4–0.6)', SHARE)
    objective_sampling: bool = setting(False, "true = the reference's per-example choice: LM with prob lm_ratio, else AE")
    lm_ratio: float = setting(0.5, 'used only with objective_sampling', SHARE)
    use_lm_token: bool = setting(True, 'put the learned [LM] embedding before the continuation')
    leave_tokens_for_lm: int = setting(8, 'first continuation tokens without loss (reference: 8)', COUNT)
    context_tokens: int = setting(128, 'context tokens per pretraining example (2 segments at 16×4)', POSITIVE)
    lm_tokens: int = setting(64, 'continuation tokens per example (LM objective)', COUNT)
    max_examples: int | None = setting(None, 'cap on training examples built from the dataset', ge(1, note='null = all'))
    max_context_tokens: int = setting(512, 'fine-tuning: context truncated to its most recent tokens', POSITIVE)
    max_prompt_tokens: int = setting(128, 'fine-tuning: prompt truncated to this many tokens', POSITIVE)
    max_answer_tokens: int = setting(128, 'fine-tuning: answer truncated to this many tokens', POSITIVE)
    max_segments: int | None = setting(8, 'ingest keeps at most this many most recent segments (slots = 8×16)', ge(1, note='null = keep every segment'))
    encode_batch_size: int = setting(8, 'segments per encoder forward at inference', POSITIVE)
    max_new_tokens: int | None = setting(32, 'greedy answer length', POSITIVE)
    chat_template: bool = setting(True, "wrap [slots][FT]+prompt in the tokenizer's chat template (FT and answer)")
    add_bos: str = setting('auto', 'auto = as the tokenizer does (Llama-2/Mistral yes, SmolLM2 no)', choices=('auto', True, False))
    segment_layout: str = setting('ctxbench', 'ctxbench = the start token before every segment and decoder row; reference = only before the first segment, none in decoder rows (getao/icae tokenizes the text once)', choices=('ctxbench', 'reference'))
    slot_norm: str = setting('embed', "none = the reference (raw last-layer states as slots); embed = rescale each slot to the mean token-embedding norm. SmolLM2's final states are ~16× the embedding norm and short CPU runs diverge with none (see the report).", choices=('none', 'embed'))
    seed: int = setting(0, 'init of the memory/special embeddings, objective sampling', SEED)
    lora: IcaeLora | None = nested(IcaeLora, 'conditional LoRA: fires only at <COMP> positions')


@configures('kvpress')
@dataclass
class KvpressMethod(MethodSettings):
    """NVIDIA kvpress's prefill presses (docs/kvpress.md): the history is prefilled once under the press, the answer decodes greedily from the pressed cache at the text's true positions. Training-free. Needs the optional kvpress package (`make setup` installs it)."""

    name: str = registered('kvpress')
    press: str = setting('knorm', 'knorm | streamingllm | snapkv | expected_attention | observed_attention (eager) | tova | random, or a kvpress prefill press class name', open='a kvpress alias or any kvpress prefill press class name; methods.kvpress_adapter checks it')
    compression_ratio: float = setting(0.5, 'share of the prefilled slots the press evicts (0 = keep all); for presses that take one', between(0, 1, high_open=True, note='kvpress: share of the prefill evicted; 0 = none'))
    press_kwargs: dict | None = setting({}, "further arguments of the press's class (e.g. {window_size: 16} for snapkv)")


@configures('llmlingua')
@dataclass
class LlmlinguaMethod(PromptCompressionSettings):
    """LLMLingua (arXiv 2310.05736, docs/llmlingua.md): the history pruned token by token by perplexity under the method's own model (the scorer), to ceil((1 - compression_ratio) x n) tokens; the same model answers from the kept text. Training-free. Needs the optional llmlingua package (`make setup` installs it)."""

    name: str = registered('llmlingua')
    iterative_size: int = setting(200, "tokens per window of LLMLingua's iterative pruning (the package's default)", POSITIVE)


@configures('llmlingua2')
@dataclass
class Llmlingua2Method(PromptCompressionSettings):
    """LLMLingua-2 (arXiv 2403.12968, docs/llmlingua.md): a token classifier (method.classifier) keeps the words it scores highest, up to ceil((1 - compression_ratio) x n) tokens of the reader; the method's own model answers from the kept text. Training-free. Needs the optional llmlingua package (`make setup` installs it)."""

    name: str = registered('llmlingua2')
    classifier: str | None = setting(None, 'local folder of LLMLingua-2 token-classifier weights (microsoft/llmlingua-2-xlm-roberta-large-meetingbank or -bert-base-multilingual-cased-meetingbank); null is refused when the method is built')
    force_tokens: list = setting([], "tokens always kept (LLMLingua-2's force_tokens, e.g. ['\\n', '?']); at most 100")


@dataclass
class LmLora(EnabledLoraSettings):
    """the LoRA of the fine-tuned LM"""

    enabled: bool = setting(True, 'false = full fine-tuning')
    r: int = setting(16, 'the paper uses 8 (16 for the 13B models); any 8-16 is in range', POSITIVE)
    alpha: int = setting(32, 'reference: 32', gt(0))
    target_modules: list = setting(['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'], 'modules that get a LoRA adapter')


@configures('lm')
@dataclass
class LmMethod(MethodSettings):
    """Plain causal-LM fine-tuning with LoRA: the full-context baseline of every compression method."""

    name: str = registered('lm')
    seq_len: int = setting(256, 'training window (tokens)', POSITIVE)
    max_new_tokens: int | None = setting(None, "answer length when evaluated as a system; null = the qa_prompt's (locomo: 32)", POSITIVE)
    max_context: int | None = setting(None, "answer-time window; null = the model's max_position_embeddings", ge(1, note="null = the model's window"))
    lora: LmLora | None = nested(LmLora, 'conditional LoRA: fires only at <COMP> positions')


@dataclass
class LococoLora(EnabledLoraSettings):
    """optional LoRA for context extension (reference --lora_finetuning)"""

    pass


@configures('lococo')
@dataclass
class LococoMethod(FixedCacheSettings):
    """LoCoCo (arXiv 2406.05317): segment-level processing with a fixed KV cache of mem_size slots per layer and KV head; on overflow keep heavy hitters and mix the rest with a learned 1-D conv. CPU-sized defaults; the paper setting is method=lococo_paper (B=512, M=512)."""

    name: str = registered('lococo')
    segment_len: int = setting(64, 'B: tokens per segment (reference --block_size)', POSITIVE)
    mem_size: int | None = setting(128, 'M: cache slots kept between segments (reference --mem_size)', ge(1, note='null = a full cache'))
    n_segments: int = setting(8, 'training example = segment_len × n_segments tokens (reference --clean_period)', POSITIVE)
    hh_keep_rate: float = setting(0.5, 'share of M kept as heavy hitters; the rest are conv-mixed slots', between(0, 1, high_open=True))
    local_len: int = setting(32, 'most recent slots always kept among the heavy hitters (reference --local_len; 0 there by default; 32 here: without it StreamingLLM wins on SmolLM2, see README)', COUNT)
    accumulate_scores: bool = setting(False, "false: score slots by the last segment's attention (reference); true: H2O running sum")
    kernel_size: int = setting(21, 'conv kernel over the sequence of [K;V] (reference --kernel_size)', POSITIVE)
    n_convlayer: int = setting(1, 'conv layers in each compressor', POSITIVE)
    expand: int = setting(1, 'hidden width multiplier when n_convlayer > 1', POSITIVE)
    hidden_act: str = setting('relu', 'activation after each conv (reference --hidden_act)', choices=('relu', 'gelu', 'silu', 'none'))
    conv_init_std: float | None = setting(1.0, "conv weights ~ N(0, std²) as the reference; null = PyTorch's fan-in default", gt(0, note="null = PyTorch's fan-in default"))
    normalizer_init: float = setting(0.5, 'λ: weight of the conv mix vs. one-hot top-k slots (learned)', SHARE)
    clamp_lambda: bool = setting(True, 'λ clamped to [0, 1], so mixed slots stay convex (false: free, as the reference; the reference row is method.clamp_lambda=false method.local_len=0, see README)')
    positions: str = setting('absolute', 'absolute: tokens keep their text positions (reference) | cache: slot indices', choices=('absolute', 'cache'))
    rope_scaling_factor: float | str | None = setting(1.0, 'linear positional interpolation; "auto" = segment_len·n_segments / model window', gt(0, note='or auto; null = 1.0'), choices=('auto',))
    train_embed_norm: bool = setting(False, 'also tune embeddings and norms (the reference does; tied embeddings are large)')
    memory_lr_scale: int | float = setting(1.0, 'lr multipliers per group, used when the loop honours optimizer_param_groups()', COUNT)
    norm_lr_scale: int | float = setting(1.0, '--norm_lr_scale 5', COUNT)
    lora_lr_scale: int | float = setting(1.0, 'lr multiplier of the LoRA weights', COUNT)
    lora: LococoLora | None = nested(LococoLora, 'optional LoRA for context extension (reference --lora_finetuning)')
    max_new_tokens: int | None = setting(32, 'answer length when evaluated as a QA system', POSITIVE)
    seed: int = setting(0, 'compressor initialisation', SEED)


@configures('snapkv')
@dataclass
class SnapkvMethod(FixedCacheSettings):
    """SnapKV (arXiv 2404.14469): keep the slots the last `window` queries vote for (pooled), plus the window; at ingest per segment, and again when the question arrives (question-aware). Training-free."""

    name: str = registered('snapkv')
    mem_size: int | None = setting(128, 'M: cache slots of history the answer reads (per layer and KV head)', ge(1, note='null = a full cache'))
    ingest_size: int | None = setting(None, 'slots held between ingest and the question; null = M (> M: the question picks M)', ge(1, note='null = mem_size'))
    window: int = setting(16, 'observation window: the last queries that vote (the paper: 32 of long prompts)', POSITIVE)
    kernel: int = setting(7, 'average pooling of the votes over neighbouring positions (odd)', POSITIVE)
    positions: str = setting('absolute', "tokens keep their text positions (as SnapKV's code) | cache", choices=('absolute', 'cache'))


@configures('pyramidkv')
@dataclass
class PyramidkvMethod(SnapkvMethod):
    """PyramidKV (arXiv 2406.02069): SnapKV's selection with per-layer budgets, wide in lower layers and narrow in upper ones, averaging M (the same KV bytes as a uniform M). Training-free."""

    name: str = registered('pyramidkv')
    mem_size: int | None = setting(128, 'M: mean cache slots per layer and KV head (the budget of the pyramid)', ge(1, note='null = a full cache'))
    ingest_size: int | None = setting(None, 'mean slots held between ingest and the question; null = M', ge(1, note='null = mem_size'))
    window: int = setting(16, 'observation window: the last queries that vote', POSITIVE)
    beta: int = setting(20, "the top layer keeps (M − window) / beta + window slots (the reference's beta)", POSITIVE)
    positions: str = setting('absolute', 'text positions (as the reference) | cache: slot indices, per layer', choices=('absolute', 'cache'))


@configures('streamingllm')
@dataclass
class StreamingllmMethod(FixedCacheSettings):
    """StreamingLLM (arXiv 2309.17453): keep n_sink attention sinks + the most recent tokens. Training-free."""

    name: str = registered('streamingllm')
    n_sink: int = setting(4, 'initial tokens always kept (the paper uses 4)', COUNT)
    positions: str = setting('cache', 'positions inside the cache, as the paper does (absolute: text positions)', choices=('absolute', 'cache'))
