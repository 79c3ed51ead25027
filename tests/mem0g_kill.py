"""Test double: Mem0g (scripted LLM, bag-of-words embedder) ingesting tests/test_memory_mem0g.py's
history into ``WORKDIR``, the process killed with SIGKILL at the ``KILL_AT``-th graph edge write
(0 = never), else the stores' snapshot printed as JSON. Used by tests/test_crash_safety.py.

    python tests/mem0g_kill.py WORKDIR KILL_AT
"""
from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path


def main(workdir: str, kill_at: int) -> None:
    from memory_scripted import ScriptedLLM
    from test_memory_mem0g import history, make, responder
    from test_memory_mem0g_resume import snapshot

    mem = make(Path(workdir), ScriptedLLM(responder()))
    real, calls = mem.graph.add_edge, []

    def add_edge(*args, **kwargs):
        calls.append(args)
        if len(calls) == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)  # nothing after this line runs: no close, no commit
        return real(*args, **kwargs)

    mem.graph.add_edge = add_edge
    mem.ingest(history())
    print(json.dumps(snapshot(mem)))
    mem.close()


if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    sys.path[:0] = [str(here), str(here.parent)]  # the test doubles, this checkout's ctxbench
    main(sys.argv[1], int(sys.argv[2]))
