"""Keep API keys out of saved configs, logs, results and wandb.

Configs name the *environment variable* that holds a key (``api_key_env: OPENAI_API_KEY``), never
the key. Should a key reach a config anyway (``llm.api_key=sk-...`` on the command line), every
writer passes the config through :func:`redact` first: by key name (the value of ``api_key``,
``password`` ...) and by value (every string goes through :func:`scrub_text`, so the password of
``llm.base_url=http://user:pw@host/v1``, a ``?api_key=`` in a URL or a ``Bearer ...`` is hidden
whatever key holds it). :func:`scrub_text` removes the literal values of known secret environment
variables (and of the secrets a caller knows, such as the key a backend sends) and key-shaped strings
from text. A redacted config is what run folders fingerprint, so a changed password, like a changed
key, is not a changed config.
"""
from __future__ import annotations

import os
import re
from typing import Any

REDACTED = "***"


def is_secret_key(key: str) -> bool:
    """api_key, OPENAI_API_KEY, hf_token, password, secret ... but not api_key_env, max_new_tokens, pad_token."""
    parts = [p for p in re.split(r"[_\-.]", str(key).lower()) if p]
    if not parts or parts[-1] in ("env", "var", "name", "path", "file", "dir", "url"):
        return False
    if {"password", "passwd", "secret", "authorization", "bearer", "apikey", "credentials"} & set(parts):
        return True
    if "api" in parts and parts[-1] == "key":
        return True
    return parts[-1] == "token" and parts[0] not in SPECIAL_TOKENS


SPECIAL_TOKENS = {"pad", "bos", "eos", "unk", "sep", "cls", "mask", "comp", "mem", "ae", "lm", "ft"}


def redact(obj: Any) -> Any:
    """A copy of a (nested) dict/list with secret-looking keys' values replaced and every string
    scrubbed (:func:`scrub_text`: a URL's password, a secret query parameter, a known key's value)."""
    return _redact(obj, _known_values())


def _redact(obj: Any, values: list[str]) -> Any:
    if isinstance(obj, dict):
        return {k: (REDACTED if is_secret_key(k) and v not in (None, "") else _redact(v, values))
                for k, v in obj.items()}
    if isinstance(obj, list):
        return [_redact(v, values) for v in obj]
    if isinstance(obj, str):
        return _scrub(obj, values)
    return obj


def secret_values() -> list[str]:
    return [v for k, v in os.environ.items() if is_secret_key(k) and v and len(v) >= 8]


# Key-shaped strings, scrubbed wherever they appear: OpenAI-style sk-..., HF hf_..., other vendors'
# prefixed tokens, a bearer token, and the user:password part of a URL (the first three are what
# :func:`looks_like_secret` goes by).
KEY_PATTERNS = [
    re.compile(r"\bsk-[A-Za-z0-9_\-]{8,}"),
    re.compile(r"\b(?:hf|gsk|ghp|xai|pk|rk|sk)_[A-Za-z0-9]{16,}\b"),
    re.compile(r"\bAIza[0-9A-Za-z_\-]{30,}"),
    re.compile(r"(?<=Bearer )(?=[A-Za-z0-9._~+/=\-]*\d)[A-Za-z0-9._~+/=\-]{12,}"),
    re.compile(r"(?<=://)[^/\s:@]+:[^/\s@]+(?=@)"),
]
# A URL query parameter whose name says it holds a secret (``?api_key=``, ``&token=``, ``?key=``,
# ``?sig=``): its value is scrubbed, the name kept.
QUERY_PARAM = re.compile(r"(?<=[?&;])([A-Za-z0-9_.\-]+)=([^&#\s\"'<>]+)")
QUERY_SECRET_NAMES = {"key", "sig", "signature", "pwd", "pass", "auth", "code", "access_key", "sas"}
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _query_secret(m: "re.Match[str]") -> str:
    name = m.group(1)
    secret = is_secret_key(name) or name.lower().replace("-", "_") in QUERY_SECRET_NAMES
    return f"{name}={REDACTED}" if secret and m.group(2) != REDACTED else m.group(0)


def _known_values(extra: "list[str] | tuple[str, ...]" = ()) -> list[str]:
    """Secret values to scrub, longest first: secret environment variables' and ``extra`` (4+ chars)."""
    return sorted({*secret_values(), *(e for e in extra if e and len(e) >= 4)}, key=len, reverse=True)


def _scrub(text: str, values: list[str]) -> str:
    for v in values:
        text = text.replace(v, REDACTED)
    for pat in KEY_PATTERNS:
        text = pat.sub(REDACTED, text)
    return QUERY_PARAM.sub(_query_secret, text) if "=" in text else text


def scrub_text(text: str, extra: "list[str] | tuple[str, ...]" = ()) -> str:
    """``text`` without the values of secret environment variables, of ``extra``, of key-shaped strings
    and of secret URL query parameters."""
    return _scrub(text, _known_values(extra))


def looks_like_secret(value: str) -> bool:
    """True for a key-shaped string (``sk-...``, ``hf_...``, ...), by the patterns above."""
    return any(pat.search(str(value)) for pat in KEY_PATTERNS[:3])


def check_env_name(field: str, value: Any, error: type[Exception] = ValueError) -> str:
    """``value`` if it can NAME an environment variable; else ``error`` with a message that hides the value.

    Guards ``llm.api_key_env=sk-...`` (the key given where its variable's name belongs).
    """
    name = str(value)
    if ENV_NAME.fullmatch(name) and not looks_like_secret(name):
        return name
    raise error(f"{field} must NAME an environment variable (e.g. OPENAI_API_KEY), "
                     "not hold the key itself (value hidden)")


def redact_override(arg: str) -> str:
    key, sep, _ = arg.partition("=")
    return f"{key}={REDACTED}" if sep and is_secret_key(key.split(".")[-1]) else scrub_text(arg)


def scrub_run_files(run_dir) -> int:
    """Rewrite Hydra's saved ``.hydra/*.yaml`` and logs in a run folder without secrets.

    Hydra writes the composed config and the command-line overrides before our code runs, so a key
    given as ``+llm.api_key=...`` would otherwise land on disk. Returns the number of files changed.
    """
    from pathlib import Path

    import yaml

    changed = 0
    run = Path(run_dir)
    for f in list((run / ".hydra").glob("*.yaml")) + list(run.glob("*.log")):
        try:
            text = f.read_text(encoding="utf-8")
        except OSError:
            continue
        new = text
        if f.suffix == ".yaml":
            try:
                data = yaml.safe_load(text)
            except yaml.YAMLError:
                data = None
            if isinstance(data, list):  # overrides.yaml
                data = [redact_override(x) if isinstance(x, str) else x for x in data]
                new = yaml.safe_dump(data, sort_keys=False)
            elif isinstance(data, dict):
                red = _redact_hydra(data)
                if red != data:
                    new = yaml.safe_dump(red, sort_keys=False)
        new = scrub_text(new)
        if new != text:
            tmp = f.with_name(f.name + ".tmp")
            tmp.write_text(new, encoding="utf-8")
            tmp.replace(f)
            changed += 1
    return changed


def _redact_hydra(obj):
    """redact(), and also the override strings Hydra keeps inside hydra.yaml."""
    if isinstance(obj, dict):
        return {k: (REDACTED if is_secret_key(k) and v not in (None, "") else _redact_hydra(v)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [redact_override(v) if isinstance(v, str) and "=" in v else _redact_hydra(v) for v in obj]
    return obj
