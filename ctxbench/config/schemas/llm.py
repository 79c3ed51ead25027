"""The llm group: one schema per family of conf/llm/ options.

Generated once from the YAML defaults; now the one source of each key (see ctxbench/config/setting.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ctxbench.config.setting import (  # noqa: F401 - the bound kit
    COSINE, COUNT, POSITIVE, REQUIRED, SEED, SHARE, between, ge, gt, configures, nested, registered, setting, tables)

SCHEMAS, BY_NAME = tables()  # filled by @configures below


@configures('hf')
@dataclass
class HfLlm:
    """A local transformers chat model (greedy, chat template, tokens counted with its tokenizer)."""

    name: str = registered('hf')
    model: str = setting('smollm2_135m', 'a conf/model name (smollm2_135m, tiny, mistral_7b_instruct ...) or a hub id / HF folder')
    dtype: str | None = setting(None, "auto | float32 | bfloat16 | float16; null = the model config's dtype (auto = bfloat16 on CUDA, float32 on the CPU)", choices=('float32', 'fp32', 'bfloat16', 'bf16', 'float16', 'fp16', 'auto'))
    device: str | None = setting(None, "auto | cpu | cuda | cuda:N; null = the model config's device (auto = accelerate's device: the rank's GPU, else the CPU)", open='any torch device string (cuda:1, mps); models.loading.resolve_device checks it')
    context_window: int = setting(2048, 'prompt + answer budget in tokens (SmolLM2 supports 8192; 2048 keeps CPU runs fast)', POSITIVE)
    constrained: bool = setting(True, "structured calls decoded under their JSON Schema's grammar (xgrammar)")
    batch_size: int = setting(16, "conversations per generate() call (chat_batch, and the evaluator's batched calls: concurrency=auto runs this many workers); on 2 CPU cores SmolLM2 answers 1.4x / 1.7x / 3.0x faster at 4 / 8 / 16", POSITIVE)
    cache: bool = setting(True, 'SQLite call cache: a rerun repeats no calls')
    cache_path: str | None = setting(None, 'null = $CTXBENCH_CACHE/llm_cache.sqlite (default ~/.cache/ctxbench/llm_cache.sqlite)')
    prefix_cache: bool = setting(True, 'a single-conversation call reuses the KV cache of a stored prompt it starts with (full_context: the shared history); greedy replies unchanged')
    prefix_cache_min_tokens: int = setting(256, 'the shortest common prefix worth reusing (and the shortest prompt stored)', POSITIVE)
    prefix_cache_entries: int = setting(2, "prompts whose KV cache is kept (LRU); memory: entries x prompt length x the model's KV per token", POSITIVE)


@configures('openai')
@dataclass
class OpenaiLlm:
    """Any OpenAI-compatible chat endpoint (OpenAI, vLLM, llama.cpp server). The key is read from the environment variable named by api_key_env at run time and never written anywhere."""

    name: str = registered('openai')
    model: str = setting('gpt-4o-mini', 'a conf/model name (smollm2_135m, tiny, mistral_7b_instruct ...) or a hub id / HF folder')
    base_url: str = setting('https://api.openai.com/v1', "the OpenAI-compatible server's /v1 URL (null = the backend's default)", url=True)
    api_key_env: str | None = setting('OPENAI_API_KEY', 'the NAME of the variable holding the key; null = send no key (local servers)')
    timeout_s: int = setting(60, 'per request', gt(0))
    max_retries: int = setting(5, 'retries on 429 / 5xx / timeouts / malformed replies, then a counted failure (unreachable server, HTTP 401/403/404 are never retried: the run stops at once)', COUNT)
    max_consecutive_failures: int = setting(8, 'this many failed calls in a row stop the run (LLMUnavailable); 0 = never', ge(0, note='0 = never stop'))
    preflight_timeout_s: int = setting(5, 'the check GET {base_url}/models before anything loads (reachable, key, model)', gt(0))
    check_model_listed: bool = setting(True, 'preflight: llm.model must be among the models the server lists')
    backoff_s: float = setting(1.0, 'first retry delay; doubles each retry (with jitter), Retry-After honoured', COUNT)
    backoff_max_s: int = setting(30, 'cap on the wait between retries (seconds)', COUNT)
    concurrency: int = setting(4, 'parallel requests in chat_batch', POSITIVE)
    context_window: int = setting(128000, 'prompt + answer budget in tokens (SmolLM2 supports 8192; 2048 keeps CPU runs fast)', POSITIVE)
    tokenizer: str | None = setting(None, "HF tokenizer id/folder of the served model: counts tokens the server's usage leaves out, count_tokens and prompt fitting; null = tiktoken for a model name it knows (OpenAI's), else ceil(chars/4) estimates, with one warning (results.json llm.token_counts)")
    response_format: str = setting('auto', 'structured calls: auto (probe what the server enforces, use the strongest; results.json llm.structured_mode) | json_schema | json_object_schema (llama-cpp-python) | guided_json (older vLLM) | json_object | none: sent as given, no probe', choices=('auto', 'json_schema', 'json_object_schema', 'guided_json', 'json_object', 'none'))
    extra_body: dict | None = setting({}, 'extra request fields (e.g. {top_p: 1.0})')
    cache: bool = setting(True, 'SQLite call cache: a rerun repeats no calls')
    cache_path: str | None = setting(None, 'null = $CTXBENCH_CACHE/llm_cache.sqlite')
