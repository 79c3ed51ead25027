"""The reference memory server (docs/examples/http_memory_server.py) as a process that logs every add_session it
is sent (``--log FILE``, one JSON line each: history_id, session_index) and, with ``--die-at HID:INDEX``, kills
itself (SIGKILL) on receiving that session, before holding it or replying: a remote killed mid-ingestion."""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
from pathlib import Path

spec = importlib.util.spec_from_file_location(
    "http_memory_server", Path(__file__).resolve().parents[1] / "docs" / "examples" / "http_memory_server.py")
ref = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ref)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--state", default=None)
    p.add_argument("--log", required=True)
    p.add_argument("--die-at", default=None)
    args = p.parse_args()

    class Handler(ref.Handler):
        def route(self, method, path, body):
            if path == "/add_session":
                with open(args.log, "a", encoding="utf-8") as f:
                    f.write(json.dumps({"history_id": body["history_id"], "session_index": body["session_index"]}) + "\n")
                if args.die_at == f"{body['history_id']}:{body['session_index']}":
                    os.kill(os.getpid(), signal.SIGKILL)
            return super().route(method, path, body)

    server = ref.make_server("127.0.0.1", args.port, args.state, Handler)
    print(f"listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
