"""The sweep's "faults" cases of issue 44 (items 1 and 3a): a server that cannot take a structured request.

- ``faults.refused_500_not_retried``: every chat answered HTTP 500 with llama-cpp-python's validation error
  (the request itself is invalid), default retry settings: each call fails at once — before, 5 backed-off
  retries per call (about 31 s each) kept the run going for minutes;
- ``faults.llama_cpp_python_mem0``: memory=mem0 on a server that refuses json_schema as llama-cpp-python's
  does and enforces json_object+schema, default settings: the probe picks json_object+schema, says so in one
  line, and the run succeeds (a recovery);
- ``faults.response_format_unknown``: a ``llm.response_format`` that is not one of the mechanisms.

The server modes (:data:`SERVER_MODES`) are served by the harness's fake server with tests/structured_servers.py's
behaviours. Like cases.py, nothing here imports ctxbench or the tests.
"""
from __future__ import annotations

from bad_input.cases import EVAL, Case

SERVER_MODES = {  # mode → what the fake server does (harness.FakeServer implements each)
    "refuse_invalid": "chat: HTTP 500 '1 validation error ... Input should be 'text' or 'json_object'' every time",
    "llama_cpp_python": "chat: HTTP 500 on json_schema (llama-cpp-python's message); json_object+schema enforced",
    "openai_like": "chat: json_schema enforced",
}
MEM0 = ["eval", "memory=mem0", "dataset=locomo_sample", "dataset.sessions=1", "llm=openai", "llm.base_url={url}",
        "llm.model=fake", "llm.api_key_env=null", "limit=1", "progress=false", "hydra.run.dir={work}/run"]


def cases() -> list[Case]:
    return [
        Case("faults.refused_500_not_retried", "faults", SERVER_MODES["refuse_invalid"] + " (default retries)",
             EVAL + ["dataset=locomo_sample"], server="refuse_invalid", timeout=20, expect=("failed",)),
        Case("faults.llama_cpp_python_mem0", "faults", "memory=mem0, default settings, on a server that "
             + SERVER_MODES["llama_cpp_python"][6:], MEM0, server="llama_cpp_python", timeout=60, ok_if_success=True,
             recovery=r"ctxbench: llm=openai: structured output via json_object\+schema \(the server refused "
                      r"json_schema: HTTP 500"),
        Case("faults.response_format_unknown", "faults", "llm.response_format=json_shema (a typo)",
             EVAL + ["dataset=locomo_sample", "llm.response_format=json_shema"], expect=("response_format",)),
        Case("faults.probe_control", "faults", "memory=mem0 on a server enforcing json_schema (control)", MEM0,
             server="openai_like", timeout=60, control=True),
    ]
