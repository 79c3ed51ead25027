"""How ``llm=openai`` asks a server for structured output, and the probe that finds what it honours.

OpenAI-compatible servers enforce a JSON Schema in different ways (:data:`MECHANISMS`, strongest first):

* ``json_schema``: ``response_format={"type": "json_schema", "json_schema": {"name": "reply", "schema": S}}``
  — OpenAI, vLLM, llama.cpp's C++ ``llama-server``, LM Studio, Ollama's OpenAI endpoint;
* ``json_object_schema``: ``response_format={"type": "json_object", "schema": S}`` — llama-cpp-python's
  ``python -m llama_cpp.server`` (its ``ChatCompletionRequestResponseFormat``: type ``text`` or
  ``json_object`` plus an optional ``schema``; it answers json_schema with HTTP 500 ``Input should be
  'text' or 'json_object'``);
* ``guided_json``: vLLM's extra body field ``{"guided_json": S}`` (older vLLM; vLLM 0.12 removed it for
  ``structured_outputs``, and takes json_schema anyway);
* ``json_object``: JSON mode, any JSON object (the caller validates against the schema);
* ``none``: free text (the caller validates).

Under the first three a reply is marked ``constrained``. ``llm.response_format=auto`` (the default)
probes: on the first structured call (a run without one pays nothing), under a lock, one tiny request
per mechanism, strongest first, with :data:`PROBE_SCHEMA` — one required key of an unusual name whose
value is a one-value enum, which the prompt does not mention: a model cannot satisfy it by accident, so
a server that accepts a schema and ignores it is detected rather than trusted. A mechanism is honoured
when the reply validates (JSON mode: when it is a JSON object); an HTTP refusal or a reply that does not
validate moves on to the next one; ``none`` needs no probe. The choice is printed in one line and kept
for results.json (``llm.structured_mode``: used, how it was set, each probed mechanism's outcome). Any
other ``llm.response_format`` is used as given, without a probe.
"""
from __future__ import annotations

import json
import sys
import threading
from typing import Any, Callable

from ctxbench.llm.base import ChatResult
from ctxbench.llm.refusal import REFUSED, CallFailed, server_message
from ctxbench.llm.schema import SchemaError, const, obj, validate

MECHANISMS = ("json_schema", "json_object_schema", "guided_json", "json_object", "none")
AUTO = "auto"
RESPONSE_FORMATS = (AUTO, *MECHANISMS)  # llm.response_format
CONSTRAINING = frozenset(MECHANISMS[:3])  # the server decodes under the schema: replies are `constrained`
LABELS = {"json_schema": "json_schema", "json_object_schema": "json_object+schema", "guided_json": "guided_json",
          "json_object": "json_object", "none": "free text"}
PROBE_PHASE = "probe"  # the meter phase of the probe's calls (results.json llm.meter.probe)
PROBE_KEY, PROBE_VALUE = "ctxbench_probe_token", "zq7-honoured"
PROBE_SCHEMA = obj(**{PROBE_KEY: const(PROBE_VALUE)})
PROBE_MESSAGES = [{"role": "user", "content": "Reply with one JSON object."}]
PROBE_TOKENS = 32
HONOURED = "honoured"


def request_fields(mechanism: str, schema: dict[str, Any] | None, json_mode: bool) -> dict[str, Any]:
    """The request body's fields that ask for structure under ``mechanism`` (none for a plain call)."""
    if schema is not None:
        if mechanism == "json_schema":
            return {"response_format": {"type": "json_schema", "json_schema": {"name": "reply", "schema": schema}}}
        if mechanism == "json_object_schema":
            return {"response_format": {"type": "json_object", "schema": schema}}
        if mechanism == "guided_json":
            return {"guided_json": schema}
    if (schema is not None or json_mode) and mechanism != "none":
        return {"response_format": {"type": "json_object"}}
    return {}


def probe_outcome(mechanism: str, r: ChatResult) -> str:
    """``honoured``, or ``ignored: <why>`` when the probe's reply shows the server did not apply ``mechanism``."""
    if r.truncated:
        return "ignored: the reply was cut at the token limit"
    try:
        value = strict_json(r.text)  # as sent: an enforcing server writes bare JSON (no fence, no prose)
        if mechanism == "json_object":
            if not isinstance(value, dict):
                raise SchemaError("the reply is not a JSON object")
        else:
            validate(value, PROBE_SCHEMA)
    except SchemaError as e:
        return f"ignored: {e}"
    return HONOURED


def failure_outcome(e: CallFailed) -> str:
    """``refused: HTTP 500 "<the server's message>"``, or ``failed: <error>``."""
    if e.kind == REFUSED and e.status:
        return f'refused: HTTP {e.status} "{server_message(e.body)}"'
    return f"{'refused' if e.kind == REFUSED else 'failed'}: {e}"


def why_passed(mechanism: str, outcome: str) -> str:
    """``the server refused json_schema: HTTP 500 "..."`` from a probed mechanism's outcome."""
    verdict, _, detail = outcome.partition(": ")
    label = LABELS[mechanism]
    if verdict == "ignored":
        return f"the server ignored {label} ({detail})"
    return f"the server {verdict} {label}: {detail}"


class StructuredMode:
    """The mechanism of one backend's structured calls: ``setting`` (llm.response_format), else probed once."""

    def __init__(self, setting: str, backend: str):
        self.setting, self.backend = setting, backend
        self.used: str | None = None if setting == AUTO else setting
        self.probed: dict[str, str] = {}
        self._lock = threading.Lock()

    def resolve(self, send: Callable[[dict[str, Any]], ChatResult]) -> str:
        """The mechanism to use; under ``auto`` the first caller probes with ``send(fields)`` (one request
        with these structure fields; raises :class:`~.refusal.CallFailed`) while the others wait."""
        with self._lock:
            if self.used is None:
                self.used = self._probe(send)
                print(self.announcement(), file=sys.stderr)
            return self.used

    def _probe(self, send: Callable[[dict[str, Any]], ChatResult]) -> str:
        for mech in MECHANISMS[:-1]:
            try:
                outcome = probe_outcome(mech, send(request_fields(mech, PROBE_SCHEMA, True)))
            except CallFailed as e:
                outcome = failure_outcome(e)
            self.probed[mech] = outcome
            if outcome == HONOURED:
                return mech
        return "none"

    def announcement(self) -> str:
        """One line: the mechanism chosen and why the stronger ones were not."""
        assert self.used is not None
        passed = [why_passed(m, o) for m, o in self.probed.items() if o != HONOURED]
        why = "; ".join(passed) if passed else "the server enforced the probe's schema"
        how = LABELS[self.used] + ("" if self.used in CONSTRAINING else ", the schema checked afterwards")
        return f"ctxbench: llm={self.backend}: structured output via {how} ({why})"

    def record(self) -> dict[str, Any]:
        """results.json ``llm.structured_mode``."""
        return {"used": self.used, "set_by": "probe" if self.setting == AUTO else "llm.response_format",
                "probed": dict(self.probed)}


def strict_json(text: str) -> Any:
    """The reply parsed as bare JSON, nothing normalised (:mod:`.normalize` would hide a server that ignored
    the schema), else :class:`SchemaError`."""
    try:
        return json.loads(text)
    except ValueError as e:
        raise SchemaError(f"the reply is not bare JSON ({e})") from None
