"""The project's error base classes: what the CLI prints as one line (exit 2) instead of a traceback.

Every error the project raises on purpose, about something the user can fix (a config value, a
data file, a run folder, a checkpoint, an unreachable LLM), is a :class:`CtxbenchError`; anything
else that escapes a command is a bug and keeps its full traceback (exit 1). Each project error
class keeps its historical base too (``DataError`` is still a ``ValueError``), so existing
``except ValueError`` code keeps working.
"""
from __future__ import annotations


class CtxbenchError(Exception):
    """An error the user can fix; the CLI prints its message as one line, no traceback."""


class ConfigError(CtxbenchError, ValueError):
    """A config value the code refuses; the message names the key, the value and what is accepted."""


class MissingDependency(CtxbenchError, RuntimeError):
    """An optional package the chosen config needs is not installed; the message says what to install."""
