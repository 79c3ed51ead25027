"""The checkpoint protocol: only what was trained, every rank's shards, written atomically, verified on load.

A checkpoint is a folder ``checkpoints/step_<N>/`` holding

- ``trainable.safetensors`` — the method's trainable weights (LoRA, memory embeddings, compressor);
- ``method.json`` — the method config needed to rebuild it on the base model;
- ``model.json`` — the base model config it was trained on;
- ``optimizer.pt`` / ``scheduler.pt`` — loaded with ``weights_only=True`` (one process, DDP: the
  optimizer state is replicated, so rank 0's is everyone's);
- ``accelerate/`` — instead of ``optimizer.pt`` under DeepSpeed / FSDP: every rank's shards of the
  optimizer (and ZeRO-3 / FSDP parameter) state, written by ``accelerator.save_state`` on every rank
  (see "Sharded state" below); ``trainable.safetensors`` then holds the trainable weights gathered whole;
- ``state.json`` — step, data position (``micro``), RNG states of every rank (python, numpy, torch,
  cuda, and under ``method`` the method's own draws: ``TrainableMethod.rng_state``, e.g. ICAE's
  sampled objectives), the model and method names, the layout (format, distributed type, process
  count) a resume must match;
- ``MANIFEST.json`` — size and sha256 of every file (the shards of every rank included), written last.

Rank order (:func:`save_training_checkpoint`, a collective): every rank's RNG states are gathered;
rank 0 makes ``step_<N>.tmp``; every rank writes its shards there (sharded runs) and the trainable
weights are gathered whole; rank 0 writes its files, then the MANIFEST once all ranks are done, and
renames the folder into place, so a crash mid-write leaves no folder that looks complete; a folder
whose files do not match its manifest is refused with a message. :func:`restore_training_checkpoint`
reads one back on every rank: weights, optimizer, scheduler, this rank's RNGs, the data position.

Every error reading a checkpoint is a one-line :class:`CheckpointError` naming the file (and the
field of ``state.json``). ``trainer.resume=auto`` resumes from the newest checkpoint that verifies
and loads (:func:`resume_newest`), saying which damaged newer ones it skipped; a checkpoint named
explicitly (``trainer.resume=DIR``, ``checkpoint=DIR``) is never swapped for another.

Sharded state (DeepSpeed ZeRO, FSDP): the optimizer state, and under ZeRO-3 / FSDP the parameters
too, are split between the ranks: no single process holds them, so rank 0 cannot write
``optimizer.pt`` for everyone. Every rank then writes its own shards with ``accelerator.save_state``
into ``<step_N.tmp>/accelerate/`` (DeepSpeed: the engine's ``save_checkpoint``, frozen base weights
excluded; FSDP: ``torch.distributed.checkpoint`` files of ``state_dict_type=SHARDED_STATE_DICT``),
before rank 0 writes the MANIFEST over all of them; ``accelerator.load_state`` reads them back on resume.

Trust boundary: DeepSpeed reads its files with ``torch.load(weights_only=False)`` and torch's
distributed checkpoint reads its ``.metadata`` with ``pickle``; neither can be made safe from
here. The checkpoint's MANIFEST (size + sha256 of every shard) is verified before they load, so a
damaged or swapped-in file is refused, but a MANIFEST rewritten by someone who can write the run
folder is not: resume only sharded checkpoints of run folders you trust. The exported
``trainable.safetensors`` (what ``checkpoint=DIR`` and ``eval`` read) stays safe to load from anywhere.

``eval method=X checkpoint=DIR`` takes the method and model config from the checkpoint
(:func:`apply_checkpoint_config`), so a forgotten ``method.mem_size=4`` cannot build the wrong shapes.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import re
import shutil
from pathlib import Path
from typing import Any, Callable

import torch

from ctxbench.core.errors import CtxbenchError
from ctxbench.data.errors import first_line
from ctxbench.core.dotted import flatten, set_dotted
from ctxbench.core.plain import json_kind as _kind
from ctxbench.core.write_faults import writing
from ctxbench.training.accelerator import distributed_kind

MANIFEST = "MANIFEST.json"
WEIGHTS = "trainable.safetensors"
METHOD_JSON, MODEL_JSON, STATE_JSON = "method.json", "model.json", "state.json"
STEP_DIR = re.compile(r"step_(\d+)")  # a checkpoint folder's name (``step_0000020``)
ACCELERATE_DIR = "accelerate"  # inside a checkpoint folder: accelerate's save_state of every rank
SHARDED_TYPES = ("DEEPSPEED", "FSDP")


class CheckpointError(CtxbenchError, RuntimeError):
    pass


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()



def rng_state() -> dict[str, Any]:
    import numpy as np

    np_state = np.random.get_state()
    return {
        "python": repr(random.getstate()),
        "numpy": [np_state[0], np_state[1].tolist(), int(np_state[2]), int(np_state[3]), float(np_state[4])],
        "torch": torch.get_rng_state().tolist(),
        "cuda": [s.tolist() for s in torch.cuda.get_rng_state_all()] if torch.cuda.is_available() else [],
    }


def set_rng_state(state: dict[str, Any]) -> None:
    import ast

    import numpy as np

    random.setstate(ast.literal_eval(state["python"]))
    n = state["numpy"]
    np.random.set_state((n[0], np.array(n[1], dtype=np.uint32), n[2], n[3], n[4]))
    torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))
    if state.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([torch.tensor(s, dtype=torch.uint8) for s in state["cuda"]])


# ---- writing one checkpoint folder (rank 0) ---------------------------------------------------------

def save_checkpoint(ckpt_root: Path, step: int, *, trainable: dict[str, torch.Tensor],
                    method_config: dict[str, Any], model_config: dict[str, Any] | None = None,
                    optimizer: Any = None, scheduler: Any = None,
                    state: dict[str, Any] | None = None, keep: int = 0) -> Path:
    """One process's checkpoint (single process, DDP): begin, write every file, publish."""
    with unpublished_on_fault(ckpt_root, step):
        tmp = begin_checkpoint(ckpt_root, step)
        write_files(tmp, step, trainable=trainable, method_config=method_config, model_config=model_config,
                    optimizer=optimizer, scheduler=scheduler, state=state)
        return publish_checkpoint(ckpt_root, step, keep=keep)


def unpublished_on_fault(ckpt_root: Path, step: int, is_main: bool = True) -> Any:
    """A disk or permission fault while ``step_<N>`` is written: rank 0 removes the half-written
    ``step_<N>.tmp`` (resume never reads a ``.tmp`` folder anyway) and a one-line
    :class:`~ctxbench.core.write_faults.WriteFault` names the checkpoint; resume starts from the one before."""
    tmp = tmp_folder(ckpt_root, step)
    return writing(Path(ckpt_root) / f"step_{step:07d}",
                   cleanup=(lambda: shutil.rmtree(tmp, ignore_errors=True)) if is_main else None)


def tmp_folder(ckpt_root: Path, step: int) -> Path:
    """The folder a checkpoint is written into before it is published (``step_<N>.tmp``)."""
    return Path(ckpt_root) / f"step_{step:07d}.tmp"


def begin_checkpoint(ckpt_root: Path, step: int) -> Path:
    """An empty ``step_<N>.tmp`` (a leftover of a crash is removed first); rank 0 only."""
    tmp = tmp_folder(ckpt_root, step)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


def write_files(tmp: Path, step: int, *, trainable: dict[str, torch.Tensor], method_config: dict[str, Any],
                model_config: dict[str, Any] | None = None, optimizer: Any = None, scheduler: Any = None,
                state: dict[str, Any] | None = None) -> None:
    """Rank 0's files of a checkpoint: weights, configs, optimizer (one process / DDP only), scheduler, state."""
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in trainable.items()}, str(tmp / WEIGHTS))
    (tmp / METHOD_JSON).write_text(json.dumps(method_config, indent=2, default=str))
    if model_config is not None:
        (tmp / MODEL_JSON).write_text(json.dumps(model_config, indent=2, default=str))
    if optimizer is not None:
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    if scheduler is not None:
        torch.save(scheduler.state_dict(), tmp / "scheduler.pt")
    (tmp / STATE_JSON).write_text(json.dumps({"step": step, **(state or {})}))


def publish_checkpoint(ckpt_root: Path, step: int, keep: int = 0) -> Path:
    """MANIFEST over every file of ``step_<N>.tmp`` (the shards of every rank included: call it after
    they all wrote), then the rename that publishes it, then the oldest pruned to ``keep``; rank 0 only."""
    tmp, final = tmp_folder(ckpt_root, step), Path(ckpt_root) / f"step_{step:07d}"
    write_manifest(tmp)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    if keep and keep > 0:
        for old in list_checkpoints(ckpt_root)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    return final


def write_manifest(folder: Path) -> None:
    """``MANIFEST.json``: size and sha256 of every file below ``folder`` (by relative path), then fsync
    every file, so the bytes are durable before a rename publishes the folder."""
    files = sorted(p for p in Path(folder).rglob("*") if p.is_file() and p.name != MANIFEST)
    manifest = {p.relative_to(folder).as_posix(): {"bytes": p.stat().st_size, "sha256": _sha256(p)} for p in files}
    (Path(folder) / MANIFEST).write_text(json.dumps(manifest, indent=2))
    for p in Path(folder).rglob("*"):
        if p.is_file():
            with open(p, "rb") as f:
                os.fsync(f.fileno())



# ---- a training run's checkpoint, every rank (a collective) ------------------------------------

def save_training_checkpoint(acc: Any, model: Any, ckpt_root: Path, step: int, *, micro: int,
                             model_config: dict[str, Any], model_name: str, method_name: str,
                             optimizer: Any, scheduler: Any, keep: int = 0) -> None:
    """A checkpoint of every rank's state at ``step``: all ranks write into step_N.tmp, rank 0 publishes it.

    Every rank calls it, in the same order: the RNG states of every rank are gathered; rank 0 makes
    the folder; sharded runs write every rank's shards and gather the whole trainable weights (DDP /
    one process: rank 0 holds them whole); rank 0 writes its files and publishes (MANIFEST, rename,
    prune to ``keep``); everyone waits for that.
    """
    mine = json.dumps({**rng_state(), "method": acc.unwrap_model(model).rng_state()})
    rngs = acc.gather_for_metrics([mine], use_gather_object=True) if acc.num_processes > 1 else [mine]
    is_main, split = acc.is_main_process, is_sharded(acc)
    with unpublished_on_fault(ckpt_root, step, is_main):
        tmp = begin_checkpoint(ckpt_root, step) if is_main else tmp_folder(ckpt_root, step)
        acc.wait_for_everyone()
        if split:  # every rank's shards; then the whole trainable weights gathered (a collective too)
            save_sharded(acc, tmp)
            trainable = full_trainable(acc, model)
        else:  # DDP / one process: the weights are whole on rank 0
            trainable = acc.unwrap_model(model).trainable_state_dict() if is_main else {}
        acc.wait_for_everyone()
        if is_main:
            write_files(tmp, step, trainable=trainable, method_config=acc.unwrap_model(model).export_config(),
                        model_config=model_config, optimizer=None if split else optimizer, scheduler=scheduler,
                        state={"micro": micro, "rng": {str(i): json.loads(r) for i, r in enumerate(rngs)},
                               "model": model_name, "method": method_name, "layout": layout(acc)})
            publish_checkpoint(ckpt_root, step, keep=keep)
    acc.wait_for_everyone()


def restore_training_checkpoint(acc: Any, model: Any, ckpt: Path, optimizer: Any, scheduler: Any) -> dict[str, Any]:
    """Everything of one checkpoint onto this rank: weights, optimizer, scheduler, its RNGs; returns
    ``state.json`` (step, data position). Call it after :func:`verify` (:func:`resume_newest` does)."""
    state = check_state(ckpt, read_json(ckpt, STATE_JSON))
    check_layout(ckpt, state, acc)
    if is_sharded(acc):  # every rank its own shards (weights + optimizer) through accelerate
        load_sharded(acc, ckpt)
        state = load_training_state(ckpt, None, scheduler)
    else:
        state = load_training_state(ckpt, optimizer, scheduler)
        load_trained(acc.unwrap_model(model), ckpt)
    restore_rng(ckpt, state, acc.process_index)
    restore_method_rng(ckpt, state, acc.process_index, acc.unwrap_model(model))
    return state


# ---- sharded state (DeepSpeed ZeRO, FSDP): every rank's shards through accelerate ---------------

def is_sharded(acc: Any) -> bool:
    """Whether this run's optimizer (and maybe parameter) state is split between ranks."""
    return distributed_kind(acc) in SHARDED_TYPES


def layout(acc: Any) -> dict[str, Any]:
    """What state.json records about how the state was saved (checked on resume)."""
    return {"format": "accelerate" if is_sharded(acc) else "torch", "distributed_type": distributed_kind(acc),
            "processes": int(acc.num_processes)}


def _engine_kwargs(acc: Any, save: bool) -> dict[str, Any]:
    """DeepSpeed: leave the frozen base weights out (they are rebuilt from the model config)."""
    if distributed_kind(acc) != "DEEPSPEED":
        return {}
    return {"exclude_frozen_parameters": True} if save else {"load_module_strict": False}


def save_sharded(acc: Any, tmp: Path) -> None:
    """Every rank: its shards into ``tmp/accelerate`` (a collective: all ranks call it)."""
    acc.save_state(str(Path(tmp) / ACCELERATE_DIR), **_engine_kwargs(acc, save=True))


def load_sharded(acc: Any, ckpt: Path) -> None:
    """Every rank: its shards from ``ckpt/accelerate`` (verify the MANIFEST first: see the trust boundary)."""
    folder = Path(ckpt) / ACCELERATE_DIR
    if not folder.is_dir():
        raise CheckpointError(f"checkpoint {ckpt}: folder {ACCELERATE_DIR}/ is missing (the sharded state of "
                              f"launcher with {distributed_kind(acc)})")
    try:
        acc.load_state(str(folder), **_engine_kwargs(acc, save=False))
    except Exception as e:  # DeepSpeed / torch.distributed.checkpoint raise their own types
        raise CheckpointError(f"checkpoint {ckpt}: cannot load {ACCELERATE_DIR}/: "
                              f"{type(e).__name__}: {first_line(e, repr(e))[:300]}") from None


def check_layout(ckpt: Path, state: dict[str, Any], acc: Any) -> None:
    """A one-line CheckpointError when the checkpoint's state was saved in another layout than this run's."""
    kind = distributed_kind(acc)
    saved = state.get("layout") or {"format": "torch", "distributed_type": "?", "processes": "?"}
    sharded_ckpt = (Path(ckpt) / ACCELERATE_DIR).is_dir()
    hint = f"or start a new run from its trained weights with checkpoint={ckpt}"
    if sharded_ckpt and not is_sharded(acc):
        raise CheckpointError(f"checkpoint {ckpt} holds the sharded state of {saved.get('processes')} processes "
                              f"under {saved.get('distributed_type')}; this run is {kind}: resume it with "
                              f"that launcher, {hint}")
    if is_sharded(acc) and not sharded_ckpt:
        raise CheckpointError(f"checkpoint {ckpt} was saved without sharded state (optimizer.pt of "
                              f"{saved.get('distributed_type')}); this run is {kind}: resume it with that "
                              f"launcher, {hint}")
    if sharded_ckpt and (saved.get("distributed_type") != kind or saved.get("processes") != acc.num_processes):
        raise CheckpointError(f"checkpoint {ckpt} holds the sharded state of {saved.get('processes')} processes "
                              f"under {saved.get('distributed_type')}; this run is {acc.num_processes} under "
                              f"{kind}: resume with the same launcher and --num_processes, {hint}")


def full_trainable(acc: Any, model: Any) -> dict[str, torch.Tensor]:
    """The method's whole trainable weights (its ``trainable_state_dict()``) on every rank.

    A collective under ZeRO-3 and FSDP (every rank must call it, in the same order): their
    parameters are shards on each rank (ZeRO-3: empty placeholders; FSDP2: DTensors; FSDP1:
    slices of a flat parameter), gathered here for the trainable ones only — never the base model.
    """
    method = acc.unwrap_model(model)
    with _gathered(acc, model, method):
        state = method.trainable_state_dict()
    state = {k: _full(v).detach().cpu().clone() for k, v in state.items()}
    if distributed_kind(acc) == "DEEPSPEED":
        state.update(_fp32_masters(method, state))
    return state


def _fp32_masters(method: Any, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """DeepSpeed's fp32 copies of the trained weights (under bf16 / fp16 the module holds a rounded
    copy; the optimizer the fp32 one), where it has them. A collective: every rank, same order."""
    from deepspeed.utils import safe_get_full_fp32_param

    out = {}
    for name, p in method.named_parameters():
        if name in state and p.requires_grad:
            hp = safe_get_full_fp32_param(p)
            if hp is not None:
                out[name] = hp.detach().cpu().reshape(state[name].shape).clone()
    return out


def _full(t: torch.Tensor) -> torch.Tensor:
    from torch.distributed.tensor import DTensor

    return t.full_tensor() if isinstance(t, DTensor) else t


def _gathered(acc: Any, model: Any, method: Any):
    """A context in which the trainable parameters are whole (a no-op where they already are)."""
    if distributed_kind(acc) == "DEEPSPEED" and _zero_stage(acc) == 3:
        import deepspeed

        trainable = [p for p in method.parameters() if p.requires_grad]
        return deepspeed.zero.GatheredParameters(trainable, modifier_rank=None)
    if distributed_kind(acc) == "FSDP" and getattr(acc.state.fsdp_plugin, "fsdp_version", 1) == 1:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

        return FSDP.summon_full_params(model, writeback=False, rank0_only=False)
    return contextlib.nullcontext()


def _zero_stage(acc: Any) -> int:
    plugin = acc.state.deepspeed_plugin
    return int(plugin.zero_stage) if plugin is not None else 0


# ---- finding, verifying and reading checkpoints ---------------------------------------------------

def step_of(ckpt: Path) -> int:
    """The step in a ``step_<N>`` folder name."""
    return int(Path(ckpt).name.split("_")[1])


def step_folders(ckpt_root: Path) -> list[Path]:
    """Every ``step_<N>`` folder under ``ckpt_root`` (not the ``.tmp`` ones being written), by step."""
    ckpt_root = Path(ckpt_root)
    if not ckpt_root.is_dir():
        return []
    return sorted((p for p in ckpt_root.iterdir() if p.is_dir() and STEP_DIR.fullmatch(p.name)), key=step_of)


def list_checkpoints(ckpt_root: Path) -> list[Path]:
    """The complete checkpoints (a ``MANIFEST.json``, written last) under ``ckpt_root``, by step."""
    return [p for p in step_folders(ckpt_root) if (p / MANIFEST).exists()]


def resume_newest(ckpt_root: Path, load: Callable[[Path], Any], warn=print) -> tuple[Path, Any] | None:
    """``(checkpoint, load(checkpoint))`` for the newest checkpoint that verifies and loads.

    ``load`` restores everything from one checkpoint (raising :class:`CheckpointError` when it
    cannot); each damaged newer checkpoint is then named in one warning line saying which one
    is resumed instead. None when there is no checkpoint folder at all; a CheckpointError
    naming the newest one's problem when none of them is usable.
    """
    damaged: list[CheckpointError] = []
    for ckpt in reversed(step_folders(ckpt_root)):
        try:
            verify(ckpt)
            loaded = load(ckpt)
        except CheckpointError as e:
            damaged.append(e)
            continue
        for e in damaged:
            warn(f"warning: skipping a damaged checkpoint: {e}; resuming from {ckpt.name}")
        return ckpt, loaded
    if damaged:
        raise CheckpointError(f"no usable checkpoint under {ckpt_root}: the newest fails with: {damaged[0]}")
    return None


def latest_complete(ckpt_root: Path, warn=print) -> Path | None:
    """The newest checkpoint that verifies; a corrupt newer one is skipped with a warning.

    None when there is no checkpoint at all; a CheckpointError when none of them verifies.
    """
    found = resume_newest(ckpt_root, lambda c: None, warn=warn)
    return None if found is None else found[0]


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint folder, a run folder (its latest checkpoint) or a checkpoints/ folder."""
    p = Path(path).expanduser()
    if not p.exists():
        raise CheckpointError(f"checkpoint {str(p)!r} does not exist")
    if not p.is_dir():
        raise CheckpointError(f"checkpoint {str(p)!r} is a file; pass a run folder or its checkpoints/step_N folder")
    if (p / MANIFEST).exists() or (p / WEIGHTS).exists():
        return p
    for root in (p / "checkpoints", p):
        found = list_checkpoints(root)
        if found:
            return found[-1]
    raise CheckpointError(f"no complete checkpoint under {str(p)!r}: it has no {WEIGHTS} and no "
                          f"checkpoints/step_*/{MANIFEST} (is it a train run folder?)")


def verify(ckpt: Path) -> dict[str, Any]:
    mpath = ckpt / MANIFEST
    if not mpath.exists():
        raise CheckpointError(f"checkpoint {ckpt} has no {MANIFEST}: it was not written completely")
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
        if not isinstance(manifest, dict) or not all(manifest_entry(n, m) for n, m in manifest.items()):
            raise ValueError
    except (ValueError, OSError, RecursionError):  # UnicodeDecodeError is a ValueError
        raise CheckpointError(f"checkpoint {ckpt}: {MANIFEST} is corrupt (not the JSON the trainer writes: "
                              '{"<file>": {"bytes": <int>, "sha256": "<hex>"}, ...})') from None
    for name, meta in manifest.items():
        f = ckpt / name
        if not f.is_file():
            raise CheckpointError(f"checkpoint {ckpt}: file {name} is missing")
        if f.stat().st_size != meta["bytes"]:
            raise CheckpointError(f"checkpoint {ckpt}: file {name} is truncated "
                                  f"({f.stat().st_size} of {meta['bytes']} bytes)")
        if _sha256(f) != meta["sha256"]:
            raise CheckpointError(f"checkpoint {ckpt}: file {name} is corrupt (sha256 mismatch)")
    return manifest


def manifest_entry(name: Any, meta: Any) -> bool:
    """A manifest line as :func:`write_manifest` writes it: a relative path inside the folder, an int
    size and a sha256 hex string (a path leaving the folder is never read)."""
    parts = Path(name).parts
    return (isinstance(meta, dict) and bool(parts) and not Path(name).is_absolute() and ".." not in parts
            and isinstance(meta.get("bytes"), int) and not isinstance(meta.get("bytes"), bool)
            and isinstance(meta.get("sha256"), str))


def load_weights(ckpt: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    if (ckpt / MANIFEST).exists():
        verify(ckpt)
    try:
        return load_file(str(ckpt / WEIGHTS))
    except Exception as e:  # safetensors raises its own error types
        raise CheckpointError(f"checkpoint {ckpt}: cannot read {WEIGHTS}: {e}") from None


def load_trained(method: Any, path: str | Path) -> Path:
    """Load a run's (latest) trained weights onto a built method; returns the checkpoint used."""
    ckpt = resolve_checkpoint(path)
    weights = load_weights(ckpt)
    try:
        method.load_trainable(weights)
    except (RuntimeError, KeyError, ValueError) as e:  # shapes or names that do not fit the built method
        raise CheckpointError(f"checkpoint {ckpt}: {WEIGHTS} does not fit the method built from the config "
                              f"(was it trained with other method.* / model settings?): "
                              f"{first_line(e, repr(e))}") from None
    return ckpt


def load_training_state(ckpt: Path, optimizer: Any, scheduler: Any) -> dict[str, Any]:
    verify(ckpt)
    for name, target in (("optimizer.pt", optimizer), ("scheduler.pt", scheduler)):
        if target is not None and (ckpt / name).exists():
            try:
                target.load_state_dict(torch.load(ckpt / name, weights_only=True))
            except Exception as e:  # unpickling, or a state that does not fit this optimizer
                raise CheckpointError(f"checkpoint {ckpt}: cannot load {name}: {first_line(e)}") from None
    return check_state(ckpt, read_json(ckpt, STATE_JSON))


def check_state(ckpt: Path, state: Any) -> dict[str, Any]:
    """``state.json`` as the trainer writes it: step and micro ints ≥ 0 (step = the folder's), rng an
    object; anything else is a one-line CheckpointError naming the field."""
    def bad(what: str) -> CheckpointError:
        return CheckpointError(f"checkpoint {ckpt}: file {STATE_JSON}: {what} (not written by the trainer)")

    if not isinstance(state, dict):
        raise bad(f"a JSON {_kind(state)}, expected an object with step, micro and rng")
    missing = [k for k in ("step", "micro", "rng") if k not in state]
    if missing:
        raise bad(f"lacks {'/'.join(missing)}")
    for key in ("step", "micro"):
        v = state[key]
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise bad(f"field {key} is {json.dumps(v)[:40]}, expected an integer >= 0")
    if not isinstance(state["rng"], dict):
        raise bad(f"field rng is a JSON {_kind(state['rng'])}, expected an object")
    named = STEP_DIR.fullmatch(Path(ckpt).name)
    if named and int(named.group(1)) != state["step"]:
        raise bad(f"field step is {state['step']} but the folder is {Path(ckpt).name}")
    return state


def restore_rng(ckpt: Path, state: dict[str, Any], rank: int) -> None:
    """Set the RNGs to rank ``rank``'s saved states (rank 0's when it has none of its own)."""
    rngs = state["rng"]
    key = str(rank) if str(rank) in rngs else "0"
    try:
        set_rng_state(rngs[key])
    except (KeyError, IndexError, TypeError, ValueError, SyntaxError, RuntimeError, RecursionError,
            MemoryError, OverflowError) as e:
        raise CheckpointError(f"checkpoint {ckpt}: file {STATE_JSON}: field rng.{key} cannot be restored "
                              f"({type(e).__name__}: {first_line(e, repr(e))[:200]}) (not written by the trainer)"
                              ) from None



def restore_method_rng(ckpt: Path, state: dict[str, Any], rank: int, method: Any) -> None:
    """The method's own draws (``rng.<rank>.method``) onto ``method``: this rank's only, never another
    rank's (ranks draw apart); a checkpoint without them leaves the method's seeded draws."""
    own = state["rng"].get(str(rank))
    if not isinstance(own, dict) or "method" not in own:
        return
    try:
        if not isinstance(own["method"], dict):
            raise TypeError(f"a JSON {_kind(own['method'])}, expected an object")
        if own["method"]:
            method.load_rng_state(own["method"])
    except (KeyError, IndexError, TypeError, ValueError, RecursionError, OverflowError) as e:
        raise CheckpointError(f"checkpoint {ckpt}: file {STATE_JSON}: field rng.{rank}.method cannot be restored "
                              f"({type(e).__name__}: {first_line(e, repr(e))[:200]}) (not written by the trainer)"
                              ) from None


def read_json(ckpt: Path, name: str) -> Any:
    """One JSON file of a checkpoint; a missing or damaged one is a CheckpointError naming it."""
    f = Path(ckpt) / name
    if not f.is_file():
        raise CheckpointError(f"checkpoint {ckpt}: file {name} is missing")
    try:
        return json.loads(f.read_text(encoding="utf-8"))
    except (ValueError, OSError) as e:  # JSONDecodeError, UnicodeDecodeError
        raise CheckpointError(f"checkpoint {ckpt}: file {name} is corrupt ({first_line(e, repr(e))[:200]})") from None
    except RecursionError:
        raise CheckpointError(f"checkpoint {ckpt}: file {name} is corrupt (nested too deeply)") from None


# ---- the config a checkpoint was trained with ----------------------------------------------------

# Keys that do not change what the trained weights mean: an eval may set them to anything.
EVAL_FREE = {
    "method": {"max_new_tokens", "progress", "encode_batch_size", "max_segments", "max_qa_steps", "max_context",
               "max_examples", "lora.dropout"},
    "model": {"dtype", "device", "attn_implementation", "gradient_checkpointing", "max_length", "label",
              "trust_remote_code"},
}
# Keys a group choice (method=X, model=X) sets: they must match the checkpoint's.
IDENTITY = {"method": ("name",), "model": ("name", "path")}
_UNSET = object()


def saved_configs(ckpt: Path) -> dict[str, dict[str, Any]]:
    """{"method": method.json, "model": model.json} of a checkpoint (model: state.json's name if older)."""
    ckpt = Path(ckpt)
    out = {"method": read_json(ckpt, METHOD_JSON)}
    if (ckpt / MODEL_JSON).exists():
        out["model"] = read_json(ckpt, MODEL_JSON)
    elif (ckpt / STATE_JSON).exists():
        state = read_json(ckpt, STATE_JSON)
        name = state.get("model") if isinstance(state, dict) else None
        if isinstance(name, str) and name:
            out["model"] = {"name": name}
    for section, conf in out.items():
        if not isinstance(conf, dict) or not conf.get("name"):
            raise CheckpointError(f"checkpoint {ckpt}: file {section}.json is corrupt (no {section} name in it)")
    return out


def overridden_keys(overrides: list[str]) -> dict[str, set[str]]:
    """The method.* / model.* keys a command line sets ("" = the group itself: ``method=icae``)."""
    out: dict[str, set[str]] = {"method": set(), "model": set()}
    for o in overrides:
        section, _, key = o.partition("=")[0].lstrip("+~").partition(".")
        if section in out:
            out[section].add(key)
    return out


def hydra_overrides() -> list[str]:
    """The command line's overrides of the running Hydra job ([] outside Hydra)."""
    try:
        from hydra.core.hydra_config import HydraConfig
    except ImportError:  # pragma: no cover
        return []
    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []


def apply_checkpoint_config(cfg: Any, ckpt_dir: str | Path, overrides: list[str]) -> Any:
    """Make ``cfg.method`` / ``cfg.model`` the ones checkpoint ``ckpt_dir`` was trained with (in place).

    A saved key the command line did not set takes the saved value; one it set to a different
    value (outside :data:`EVAL_FREE`) is a one-line CheckpointError naming the key and both values.
    The method name must always match. Runs before any model loads; verifies the files on the way.
    """
    from omegaconf import OmegaConf, open_dict

    ckpt = resolve_checkpoint(ckpt_dir)
    if (ckpt / MANIFEST).exists():
        verify(ckpt)
    saved = saved_configs(ckpt)
    chosen = overridden_keys(overrides)
    chosen["method"].add("")  # eval's method is always chosen on the command line
    for section in ("method", "model"):
        if section not in saved or cfg.get(section) is None:  # eval composes method= or memory=, not both
            continue
        composed = OmegaConf.to_container(cfg[section], resolve=True)
        merged, conflicts = merge_section(section, composed, saved[section], chosen[section])
        if conflicts:
            raise CheckpointError(conflict_message(ckpt_dir, section, conflicts))
        with open_dict(cfg):
            cfg[section] = merged
    check_saved_types(cfg, ckpt)
    return cfg


def check_saved_types(cfg: Any, ckpt: Path, command: str = "eval") -> None:
    """The config with the checkpoint's saved values, checked like a composed one (types, ranges)."""
    from ctxbench.config.schema import check_types
    from ctxbench.core.errors import ConfigError

    try:
        check_types(cfg, command)
    except ConfigError as e:
        raise CheckpointError(f"checkpoint {ckpt}: a value saved in {METHOD_JSON} / {MODEL_JSON} is refused: "
                              f"{e}") from None


def merge_section(section: str, composed: dict[str, Any], saved: dict[str, Any], chosen: set[str],
                  ) -> tuple[dict[str, Any], list[tuple[str, Any, Any]]]:
    """(merged config, [(key, saved, composed)] contradictions) for one config section."""
    import copy

    flat_c, flat_s = flatten(composed), flatten(saved)
    keys = {k for k in chosen if k} | (set(IDENTITY[section]) if "" in chosen else set())

    def is_chosen(d: str) -> bool:
        return any(d == k or d.startswith(k + ".") for k in keys)

    def differs(d: str) -> bool:
        return flat_c.get(d, _UNSET) != flat_s[d]

    identity = [(k, flat_s[k], flat_c.get(k, _UNSET)) for k in IDENTITY[section]
                if k in flat_s and is_chosen(k) and differs(k)]
    if identity:  # another method or model: the other keys do not compare
        return composed, identity
    conflicts = [(d, flat_s[d], flat_c.get(d, _UNSET)) for d in flat_s
                 if is_chosen(d) and d not in EVAL_FREE[section] and differs(d)]
    if flat_c.get("name") == flat_s.get("name"):
        merged = copy.deepcopy(composed)  # keys newer than the checkpoint keep their defaults
    else:  # the default model of the command, not the checkpoint's: keep only what was set explicitly
        merged = {}
        for d, v in flat_c.items():
            if is_chosen(d):
                set_dotted(merged, d, v)
    for d, v in flat_s.items():
        if not is_chosen(d):
            set_dotted(merged, d, copy.deepcopy(v))
    return merged, conflicts


def conflict_message(ckpt_dir: str | Path, section: str, conflicts: list[tuple[str, Any, Any]]) -> str:
    def arg(key: str, value: Any) -> str:
        return f"{section}={_fmt(value)}" if key == "name" else f"{section}.{key}={_fmt(value)}"

    parts = [f"{arg(k, s)} but the config says {arg(k, c) if k == 'name' else _fmt(c)}" for k, s, c in conflicts]
    fix = " ".join(arg(k, s) for k, s, _ in conflicts)
    drop = "the override" if len(conflicts) == 1 else "the overrides"
    hint = f"pass {fix}" if conflicts[0][0] == "name" else f"drop {drop} or pass {fix}"
    return f"checkpoint {ckpt_dir} was trained with {'; '.join(parts)} ({hint})"


def _fmt(v: Any) -> str:
    if v is _UNSET:
        return "<unset>"
    if v is None:
        return "null"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, list):
        return "[" + ",".join(_fmt(x) for x in v) + "]"
    if isinstance(v, dict):
        return json.dumps(v)
    return str(v)
