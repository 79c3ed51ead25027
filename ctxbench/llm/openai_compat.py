"""``llm=openai``: any OpenAI-compatible chat endpoint (OpenAI, vLLM, llama.cpp server, ...).

Standard library only (urllib). ``llm.base_url`` + ``/chat/completions``; the API key is read
from the environment variable *named* by ``llm.api_key_env`` (never stored in a config or a
results file; ``api_key_env: null`` sends no key, for local servers). Each call has a timeout;
429, 5xx, timeouts, connection errors and malformed replies are retried with exponential backoff
(honouring a numeric Retry-After), up to ``max_retries`` retries; then the call returns
``ChatResult(failed=True)`` and is counted as a failure — the run goes on. Other 4xx fail at once.
``chat_batch`` runs up to ``concurrency`` calls at a time in threads.

Token counts come from the server's ``usage`` (its own tokenizer); when absent, and for
``count_tokens``: ``llm.tokenizer`` (an HF tokenizer id/folder) if set, else tiktoken if
installed, else ~4 characters per token.
"""
from __future__ import annotations

import json
import math
import os
import random
import socket
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..registry import register
from .base import ChatResult, Message, UsageMeter
from .cache import maybe_cached

RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


class _Retryable(Exception):
    def __init__(self, msg: str, retry_after: float | None = None):
        super().__init__(msg)
        self.retry_after = retry_after


class OpenAIChatLLM:
    def __init__(self, cfg: Any):
        from ..models.loading import ModelLoadError

        self.model_name = str(cfg.get("model") or "")
        if not self.model_name:
            raise ModelLoadError("llm.model is required for llm=openai (e.g. llm.model=gpt-4o-mini)")
        self.base_url = str(cfg.get("base_url") or "https://api.openai.com/v1").rstrip("/")
        self.cache_id = f"{self.model_name}@{self.base_url}"
        env = cfg.get("api_key_env", "OPENAI_API_KEY")
        self._api_key = None
        if env:
            self._api_key = os.environ.get(str(env))
            if not self._api_key:
                raise ModelLoadError(f"llm.api_key_env={env}: the environment variable {env} is not set "
                                     "(export it, or set llm.api_key_env=null for a server without keys)")
        self.timeout_s = float(cfg.get("timeout_s", 60))
        self.max_retries = int(cfg.get("max_retries", 5))
        self.backoff_s = float(cfg.get("backoff_s", 1.0))
        self.backoff_max_s = float(cfg.get("backoff_max_s", 30.0))
        self.concurrency = max(1, int(cfg.get("concurrency", 4)))
        self.json_mode_supported = bool(cfg.get("json_mode_supported", True))
        self.extra_body = dict(cfg.get("extra_body") or {})
        self._window = int(cfg.get("context_window") or 128000)
        self._tokenizer_name = cfg.get("tokenizer")
        self._tok: Any = None
        self.meter = UsageMeter()

    @property
    def context_window(self) -> int:
        return self._window

    # ---- token counting -------------------------------------------------------------------
    def count_tokens(self, text: str) -> int:
        if self._tok is None:
            self._tok = self._load_tokenizer()
        if self._tok == "chars":
            return math.ceil(len(text) / 4)
        if hasattr(self._tok, "encode") and not hasattr(self._tok, "convert_tokens_to_ids"):
            return len(self._tok.encode(text))  # tiktoken
        return len(self._tok(text, add_special_tokens=False)["input_ids"])

    def _load_tokenizer(self) -> Any:
        if self._tokenizer_name:
            from transformers import AutoTokenizer

            return AutoTokenizer.from_pretrained(str(self._tokenizer_name))
        try:
            import tiktoken

            try:
                return tiktoken.encoding_for_model(self.model_name)
            except KeyError:
                return tiktoken.get_encoding("cl100k_base")
        except ImportError:
            return "chars"

    # ---- calls ----------------------------------------------------------------------------
    def chat(self, messages: list[Message], *, max_new_tokens: int = 64, temperature: float = 0.0,
             phase: str = "answer", json_mode: bool = False) -> ChatResult:
        body: dict[str, Any] = {"model": self.model_name, "messages": messages,
                                "max_tokens": int(max_new_tokens), "temperature": float(temperature),
                                **self.extra_body}
        if json_mode and self.json_mode_supported:
            body["response_format"] = {"type": "json_object"}
        error = ""
        for attempt in range(self.max_retries + 1):
            try:
                r = self._post(body, messages)
                self.meter.add(phase, r)
                return r
            except _Retryable as e:
                error = str(e)
                if attempt == self.max_retries:
                    break
                delay = min(self.backoff_max_s, self.backoff_s * (2 ** attempt))
                delay = delay * (0.5 + random.random() / 2)
                if e.retry_after is not None:
                    delay = min(self.backoff_max_s, max(delay, e.retry_after))
                time.sleep(delay)
            except _Fatal as e:
                error = str(e)
                break
        r = ChatResult(text="", prompt_tokens=0, completion_tokens=0, failed=True, error=error)
        self.meter.add(phase, r)
        return r

    def chat_batch(self, batch: list[list[Message]], *, max_new_tokens: int = 64, temperature: float = 0.0,
                   phase: str = "answer", json_mode: bool = False) -> list[ChatResult]:
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            return list(pool.map(lambda m: self.chat(m, max_new_tokens=max_new_tokens, temperature=temperature,
                                                     phase=phase, json_mode=json_mode), batch))

    def _post(self, body: dict[str, Any], messages: list[Message]) -> ChatResult:
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        req = urllib.request.Request(self.base_url + "/chat/completions", data=json.dumps(body).encode(),
                                     headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as e:
            detail = e.read()[:300].decode("utf-8", "replace")
            if e.code in RETRY_STATUS:
                ra = e.headers.get("Retry-After") if e.headers else None
                raise _Retryable(f"HTTP {e.code}: {detail}",
                                 float(ra) if ra and ra.replace(".", "", 1).isdigit() else None) from None
            raise _Fatal(f"HTTP {e.code}: {detail}") from None
        except (socket.timeout, TimeoutError) as e:
            raise _Retryable(f"timeout after {self.timeout_s}s ({e})") from None
        except (urllib.error.URLError, ConnectionError, OSError) as e:
            raise _Retryable(f"connection error: {getattr(e, 'reason', e)}") from None
        try:
            data = json.loads(raw)
            text = data["choices"][0]["message"]["content"]
            if text is None:
                text = ""
            if not isinstance(text, str):
                raise TypeError("content is not a string")
        except (ValueError, KeyError, IndexError, TypeError) as e:
            raise _Retryable(f"malformed reply ({type(e).__name__}: {e}): {raw[:200]!r}") from None
        usage = data.get("usage") or {}
        pt = usage.get("prompt_tokens")
        ct = usage.get("completion_tokens")
        if not isinstance(pt, int):
            pt = sum(self.count_tokens(m.get("content", "")) for m in messages)
        if not isinstance(ct, int):
            ct = self.count_tokens(text)
        return ChatResult(text=text.strip(), prompt_tokens=pt, completion_tokens=ct)


class _Fatal(Exception):
    pass


@register("llm", "openai", aliases=("openai_compat",))
def build_openai(cfg: Any) -> Any:
    return maybe_cached(OpenAIChatLLM(cfg), cfg)
