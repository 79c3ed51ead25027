"""Keep API keys out of saved configs, logs, results and wandb.

Configs name the *environment variable* that holds a key (``api_key_env: OPENAI_API_KEY``), never
the key. Should a key reach a config anyway (``llm.api_key=sk-...`` on the command line), every
writer passes the config through :func:`redact` first, and :func:`scrub_text` removes the literal
values of known secret environment variables from text.
"""
from __future__ import annotations

import os
import re
from typing import Any

SECRET_KEY = re.compile(r"(api[_-]?key|token|secret|password|passwd|authorization|bearer)", re.I)
SAFE_SUFFIX = re.compile(r"(_env|_var|_name|_tokens?_?count|max_new_tokens|tokens)$", re.I)
REDACTED = "***"


def is_secret_key(key: str) -> bool:
    k = str(key)
    if re.fullmatch(r"(pad|bos|eos|unk|sep|cls|mask|comp|mem)_token(_id)?", k, re.I):
        return False
    return bool(SECRET_KEY.search(k)) and not SAFE_SUFFIX.search(k) and "tokens" not in k.lower()


def redact(obj: Any) -> Any:
    """A copy of a (nested) dict/list with secret-looking keys' values replaced."""
    if isinstance(obj, dict):
        return {k: (REDACTED if is_secret_key(k) and v not in (None, "") else redact(v)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [redact(v) for v in obj]
    return obj


def secret_values() -> list[str]:
    return [v for k, v in os.environ.items() if is_secret_key(k) and v and len(v) >= 8]


def scrub_text(text: str) -> str:
    for v in secret_values():
        text = text.replace(v, REDACTED)
    return re.sub(r"\bsk-[A-Za-z0-9_\-]{8,}", REDACTED, text)


def redact_override(arg: str) -> str:
    key, sep, _ = arg.partition("=")
    return f"{key}={REDACTED}" if sep and is_secret_key(key.split(".")[-1]) else scrub_text(arg)
