"""``python -m ctxbench.check.kill_worker SPEC.json``: the run ``check``'s ``kill`` check kills.

It rebuilds the checked class from the spec (its module, else its file), runs the samples into the
spec's folder exactly as the in-process runs do, and kills itself with SIGKILL at the spec's point
(a construction call, or after N answers). Exiting normally means the point was never reached.
"""
from __future__ import annotations

import importlib
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any


def load_class(spec: dict[str, Any]) -> Any:
    try:
        obj: Any = importlib.import_module(spec["module"])
    except ImportError:
        if not spec.get("file"):
            raise
        mod_spec = importlib.util.spec_from_file_location(spec["module"], spec["file"])
        obj = importlib.util.module_from_spec(mod_spec)  # type: ignore[arg-type]
        sys.modules[spec["module"]] = obj
        mod_spec.loader.exec_module(obj)  # type: ignore[union-attr]
    for part in spec["qualname"].split("."):
        obj = getattr(obj, part)
    return obj


def main(path: str) -> None:
    from omegaconf import OmegaConf

    from ctxbench.check.harness import run
    from ctxbench.check.samples_io import samples_from_json
    from ctxbench.check.target import resolve

    spec = json.loads(Path(path).read_text(encoding="utf-8"))
    target = resolve(spec["kind"], load_class(spec), OmegaConf.create(spec["cfg"]),
                     model=OmegaConf.create(spec["model"]) if spec.get("model") else None, qa_prompt=spec["qa_prompt"])
    kind, at = spec["point"]
    stop = {"stop_at": tuple(at)} if kind == "ingest" else {"stop_after_answers": int(at)}
    run(target, samples_from_json(spec["samples"]), Path(spec["out"]), limit=spec.get("limit"), kill=True, **stop)


if __name__ == "__main__":
    main(sys.argv[1])
