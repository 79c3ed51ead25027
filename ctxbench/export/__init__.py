"""``python -m ctxbench export checkpoint=DIR [out=DIR]``: a trained run as files the ecosystem loads.

A checkpoint (:mod:`ctxbench.training.checkpoint`) holds the method's trainable weights under ctxbench's own
parameter names, which ``peft`` does not read. An export is a folder

- ``adapter/`` — ``adapter_config.json`` + ``adapter_model.safetensors``, written by peft's own
  ``save_pretrained``, for methods whose LoRA is a standard peft LoRA (``lm``, ``icae_*``, ``lococo``
  with ``method.lora.enabled``): ``PeftModel.from_pretrained(base_model, out / "adapter")`` loads it;
- ``extras.safetensors`` — every other trained weight, under the method's parameter names (ICAE's
  memory/special embeddings, CCM's ``<COMP>`` embeddings and its conditional LoRA, which peft cannot
  express, LoCoCo's compressors); :func:`read_extras` reads it;
- ``method.json`` / ``model.json`` — the configs the run was trained with (as in the checkpoint);
- ``export.json`` (what was exported from where), ``README.md`` (what is inside and how to load
  it, with each extra weight's shape), ``MANIFEST.json`` (size and sha256 of every file).

It is written to a temporary sibling folder and renamed into place, like a checkpoint.
:func:`load_export` rebuilds the ctxbench method from an export (adapter through peft, extras
through the method's ``load_trainable``), so the exported weights are the ones evaluated.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from ctxbench.training import checkpoint as ck
from ctxbench.data.errors import first_line

ADAPTER, EXTRAS, EXPORT_JSON = "adapter", "extras.safetensors", "export.json"
FORMAT = "ctxbench-export-1"


class ExportError(ck.CheckpointError):
    """A one-line error about an export folder (a CheckpointError, so the CLI prints it plainly)."""


# ---- building the trained method -------------------------------------------------------------------

def build_trained(ckpt: Path, bundle: Any = None) -> Any:
    """The method of checkpoint ``ckpt`` built from its saved configs, its trained weights loaded."""
    method = build_method(ck.saved_configs(ckpt), bundle)
    ck.load_trained(method, ckpt)
    return method


def build_method(configs: dict[str, dict[str, Any]], bundle: Any = None) -> Any:
    """A ctxbench method from ``{"method": ..., "model": ...}`` configs (the base loaded unless given)."""
    from omegaconf import OmegaConf

    from ctxbench.models.loading import load_model
    from ctxbench.core.registry import build

    if bundle is None:
        if "model" not in configs:
            raise ExportError("no model.json: pass the base model's bundle (ctxbench.models.loading.load_model)")
        bundle = load_model(OmegaConf.create(configs["model"]))
    return build("method", OmegaConf.create(configs["method"]), bundle=bundle)


def peft_model(method: Any) -> tuple[str, Any] | None:
    """(attribute path, model) of the peft ``PeftModel`` inside a method, or None when it has none."""
    from peft import PeftModel

    found = [(n, m) for n, m in method.named_modules() if isinstance(m, PeftModel)]
    return min(found, key=lambda nm: len(nm[0])) if found else None


def split_trainable(method: Any) -> tuple[set[str], dict[str, torch.Tensor]]:
    """(names of the trained weights peft saves in the adapter, {name: tensor} of all the others)."""
    found = peft_model(method)
    in_adapter = set()
    if found is not None:
        lora_ids = {id(p) for n, p in found[1].named_parameters() if "lora_" in n}
        in_adapter = {n for n, p in method.named_parameters() if p.requires_grad and id(p) in lora_ids}
    extras = {n: t for n, t in method.trainable_state_dict().items() if n not in in_adapter}
    return in_adapter, extras


# ---- writing an export -----------------------------------------------------------------------------

def default_out(ckpt: Path) -> Path:
    """``<run>/export/step_<N>`` for a run's checkpoint, else ``<checkpoint>-export`` beside it."""
    if ckpt.parent.name == "checkpoints":
        return ckpt.parent.parent / "export" / ckpt.name
    return ckpt.with_name(ckpt.name + "-export")


def export_checkpoint(checkpoint: str | Path, out: str | Path | None = None, bundle: Any = None) -> Path:
    """Write the export of a run folder or checkpoint folder (see the module docstring); returns ``out``."""
    ckpt = ck.resolve_checkpoint(checkpoint)
    if (ckpt / ck.MANIFEST).exists():
        ck.verify(ckpt)
    configs = ck.saved_configs(ckpt)  # before the model loads: a damaged method.json is named at once
    target = Path(out).expanduser() if out else default_out(ckpt)
    check_target(target)
    method = build_trained(ckpt, bundle)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp", dir=target.parent))
    except OSError as e:  # no permission, a file in the way made meanwhile ...
        raise ExportError(f"out={target}: cannot create a folder in {target.parent} ({e.strerror or e})") from None
    try:
        write_export(tmp, method, configs, ckpt)
        publish(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def check_target(target: Path) -> None:
    """An ``out`` folder may be new, empty, or an earlier export (replaced); anything else is refused.

    An earlier export is replaced only when it provably is one (:func:`earlier_export_problem`): a folder
    that merely holds a file named ``export.json`` keeps every file. A path below a file is refused too.
    """
    above = next((p for p in target.parents if p.exists() or p.is_symlink()), None)
    if above is not None and not above.is_dir():
        raise ExportError(f"out={target}: {above} is a file, not a folder: pass another out= folder")
    if not (target.exists() or target.is_symlink()):
        return
    if not target.is_dir() or target.is_symlink():
        kind = "a symbolic link" if target.is_symlink() else "not a folder"
        raise ExportError(f"out={target} exists and is {kind}: pass another out= folder")
    if not any(target.iterdir()):
        return
    problem = earlier_export_problem(target)
    if problem:
        raise ExportError(f"out={target} exists and is not an earlier export of ctxbench ({problem}); nothing was "
                          "replaced: pass another out= folder")


def earlier_export_problem(folder: Path) -> str | None:
    """Why ``folder`` is not provably an export this command wrote (None: it is, and may be replaced):
    its ``export.json`` names :data:`FORMAT`, its manifest checks out, and it holds no file the
    manifest does not list."""
    try:
        info = json.loads((folder / EXPORT_JSON).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return f"no {EXPORT_JSON}"
    except (OSError, ValueError, RecursionError):
        return f"{EXPORT_JSON} is not JSON"
    if not isinstance(info, dict) or info.get("format") != FORMAT:
        return f"{EXPORT_JSON} is not a {FORMAT} record"
    try:
        manifest = ck.verify(folder)
    except ck.CheckpointError as e:
        return first_line(e).replace(f"checkpoint {folder}: ", "").replace(f"checkpoint {folder} ", "")
    present = {p.relative_to(folder).as_posix() for p in folder.rglob("*")
               if (p.is_file() or p.is_symlink()) and p.name != ck.MANIFEST}
    stray = sorted(present - set(manifest))
    return f"{stray[0]} is not in its {ck.MANIFEST}" if stray else None


def write_export(folder: Path, method: Any, configs: dict[str, dict[str, Any]], ckpt: Path) -> None:
    from safetensors.torch import save_file

    in_adapter, extras = split_trainable(method)
    found = peft_model(method)
    if found is not None and in_adapter:
        found[1].save_pretrained(str(folder / ADAPTER))  # peft's own format and key names
    if extras:
        save_file({k: v.contiguous() for k, v in extras.items()}, str(folder / EXTRAS),
                  metadata={"format": FORMAT, "method": str(configs["method"]["name"])})
    for section, conf in configs.items():
        (folder / f"{section}.json").write_text(json.dumps(conf, indent=2, default=str) + "\n")
    info = {"format": FORMAT, "checkpoint": str(ckpt.resolve()), "step": _step(ckpt),
            "method": configs["method"]["name"], "model": configs.get("model", {}).get("name"),
            "base_model_name_or_path": str(getattr(method.bundle.model, "name_or_path", "") or "") or None,
            "adapter": ADAPTER if (folder / ADAPTER).exists() else None,
            "adapter_weights": len(in_adapter), "extras": {k: list(v.shape) for k, v in extras.items()}}
    (folder / EXPORT_JSON).write_text(json.dumps(info, indent=2) + "\n")
    from ctxbench.export.readme import readme

    (folder / "README.md").write_text(readme(info, configs), encoding="utf-8")
    ck.write_manifest(folder)


def _step(ckpt: Path) -> int | None:
    try:
        return ck.step_of(ckpt)
    except (IndexError, ValueError):
        return None


def publish(tmp: Path, target: Path) -> None:
    """Rename ``tmp`` into place; an earlier export there is moved aside first and removed after."""
    old = None
    if target.exists():
        old = target.with_name(f".{target.name}.old-{os.getpid()}")
        os.replace(target, old)
    os.replace(tmp, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


# ---- reading an export -----------------------------------------------------------------------------

def check_export(export_dir: str | Path) -> Path:
    """The export folder, its files verified against its manifest; a one-line ExportError otherwise."""
    d = Path(export_dir).expanduser()
    if not (d / EXPORT_JSON).exists():
        raise ExportError(f"{d} is not a ctxbench export (no {EXPORT_JSON}; make one with "
                          f"`python -m ctxbench export checkpoint=RUN_DIR`)")
    ck.verify(d)
    return d


def read_extras(export_dir: str | Path) -> dict[str, torch.Tensor]:
    """The export's extra weights by name ({} when the method has none beyond its adapter)."""
    from safetensors.torch import load_file

    d = check_export(export_dir)
    return load_file(str(d / EXTRAS)) if (d / EXTRAS).exists() else {}


def load_export(export_dir: str | Path, bundle: Any = None) -> Any:
    """The ctxbench method of an export, ready to evaluate: built from ``method.json`` on ``bundle``
    (default: the base of ``model.json``), the adapter loaded by peft, the extras by ``load_trainable``."""
    d = check_export(export_dir)
    configs = {s: ck.read_json(d, f"{s}.json") for s in ("method", "model") if (d / f"{s}.json").exists()}
    method = build_method(configs, bundle)
    if (d / ADAPTER).exists():
        load_adapter(method, d / ADAPTER)
    extras = read_extras(d)
    if extras:
        try:
            method.load_trainable(extras)
        except (RuntimeError, KeyError, ValueError) as e:
            raise ExportError(f"{d / EXTRAS} does not fit the method built from {d / 'method.json'}: "
                              f"{first_line(e)}") from None
    return method.eval()


def load_adapter(method: Any, adapter_dir: Path) -> None:
    """Load a peft adapter folder into the method's own peft model with peft's loader."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    found = peft_model(method)
    if found is None:
        raise ExportError(f"{adapter_dir} is a LoRA adapter but {method.cfg.name} as configured has no peft LoRA")
    weights = load_file(str(adapter_dir / "adapter_model.safetensors"))
    result = set_peft_model_state_dict(found[1], weights)
    missing = [k for k in result.missing_keys if "lora_" in k]
    if result.unexpected_keys or missing:
        raise ExportError(f"{adapter_dir} does not fit the method's LoRA: "
                          f"{(result.unexpected_keys or missing)[0]} (method.lora settings differ?)")


# ---- the command -----------------------------------------------------------------------------------

def main(cfg: Any) -> None:
    if not cfg.checkpoint:
        raise ExportError("checkpoint=DIR is required: a train run folder or its checkpoints/step_N folder")
    out = export_checkpoint(str(cfg.checkpoint), cfg.out)
    info = json.loads((out / EXPORT_JSON).read_text())
    parts = ([f"peft adapter {out / ADAPTER}"] if info["adapter"] else []) + \
            ([f"{len(info['extras'])} extra weights in {out / EXTRAS}"] if info["extras"] else [])
    print(f"exported {info['method']} step {info['step']} to {out}: {'; '.join(parts)} (see {out / 'README.md'})")
