"""The one training loop (Accelerate): every trainable method trains here.

Read top to bottom: build → data order → optimizer/schedule → (resume) → loop → save.

- The data order is a pure function of (seed, epoch): micro-batch ``i`` of the run is always the
  same examples, so a resumed run continues exactly where it stopped (position = micro-step count).
- One optimizer step = ``grad_accum`` micro-batches on every rank; loss is averaged over both.
- Checkpoints hold only trainable weights + optimizer/scheduler/RNG/data position (checkpoint.py);
  under DeepSpeed / FSDP every rank also writes its shards through accelerate (sharded_state.py).
- Only rank 0 writes metrics.jsonl, wandb and a checkpoint's own files; it publishes the checkpoint.
"""
from __future__ import annotations

import json
import os
import re
import time
import uuid
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from ctxbench.training import checkpoint as ckpt_mod
from ctxbench.training import sharded_state as sharded
from ctxbench.core.errors import ConfigError, MissingDependency
from ctxbench.core.registry import build
from ctxbench.runs.guard import claim as claim_run_dir


def run_dir_of(cfg: DictConfig) -> Path:
    from ctxbench.runs.results import run_dir

    return run_dir(cfg, "outputs/train/run")


def tracker_of(cfg: DictConfig) -> str | None:
    """The accelerate tracker ``logger=`` asks for: "wandb", or None (``logger=none``: no tracker at all)."""
    logger = cfg.get("logger")
    if logger is None or logger.get("name") != "wandb":
        return None
    from accelerate.utils import is_wandb_available

    if not is_wandb_available():  # accelerate would drop the tracker without a word
        raise MissingDependency("logger=wandb needs the wandb package: pip install wandb (or use logger=none)")
    return "wandb"


def make_accelerator(cfg: DictConfig, project_dir: Path | None = None):
    from accelerate import Accelerator
    from accelerate.utils import DistributedDataParallelKwargs, InitProcessGroupKwargs

    t, launcher = cfg.trainer, cfg.launcher
    precision = launcher.get("mixed_precision") or {"bf16": "bf16", "fp16": "fp16"}.get(t.precision, "no")
    handlers = [DistributedDataParallelKwargs(find_unused_parameters=bool(launcher.get("find_unused_parameters", True)))]
    if not torch.cuda.is_available() and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        handlers.append(InitProcessGroupKwargs(backend="gloo"))
    kwargs: dict[str, Any] = {}
    if launcher.get("deepspeed"):
        from accelerate.utils import DeepSpeedPlugin

        os.environ.setdefault("ACCELERATE_USE_DEEPSPEED", "true")  # what `accelerate launch --use_deepspeed` sets
        ds = OmegaConf.to_container(launcher.deepspeed, resolve=True)
        ds.setdefault("train_micro_batch_size_per_gpu", int(t.batch_size))
        ds.setdefault("gradient_accumulation_steps", int(t.grad_accum))
        ds.setdefault("gradient_clipping", float(t.max_grad_norm or 0.0))
        ds.setdefault("zero_force_ds_cpu_optimizer", False)
        kwargs["deepspeed_plugin"] = DeepSpeedPlugin(hf_ds_config=ds)
    if launcher.get("fsdp"):
        kwargs["fsdp_plugin"] = fsdp_plugin(launcher.fsdp)
    acc = Accelerator(gradient_accumulation_steps=int(t.grad_accum), mixed_precision=precision,
                      cpu=bool(launcher.get("cpu", False)), kwargs_handlers=handlers, log_with=tracker_of(cfg),
                      project_dir=str(project_dir) if project_dir is not None else None, **kwargs)
    if launcher.get("fsdp") and sharded.kind(acc) != "FSDP":
        # accelerate (1.15, state.py) turns FSDP on only from MULTI_GPU/NPU/XPU/HPU/MLU/...: never from
        # MULTI_CPU, nor from one process without `accelerate launch`; it would train as plain DDP instead.
        raise ConfigError(f"launcher=fsdp: accelerate enabled no FSDP for this run (it is {acc.distributed_type} "
                          f"x{acc.num_processes}); FSDP needs `accelerate launch` on GPUs (accelerate enables it on no "
                          f"CPU run): on CPU use launcher=deepspeed_zero3 (sharded) or launcher=ddp")
    return acc


FSDP_DEFAULTS: dict[str, Any] = {
    "version": 2, "reshard_after_forward": True, "sharding_strategy": "FULL_SHARD",
    "auto_wrap_policy": "transformer_based_wrap", "transformer_cls_names_to_wrap": None, "min_num_params": 100_000_000,
    "state_dict_type": "SHARDED_STATE_DICT", "cpu_offload": False, "activation_checkpointing": False,
}


def fsdp_plugin(conf: Any):
    """accelerate's FullyShardedDataParallelPlugin from ``launcher.fsdp`` (see conf/launcher/fsdp.yaml)."""
    from accelerate.utils import FullyShardedDataParallelPlugin

    f = {**FSDP_DEFAULTS, **OmegaConf.to_container(conf, resolve=True)}
    args: dict[str, Any] = {
        "fsdp_version": int(f["version"]), "auto_wrap_policy": str(f["auto_wrap_policy"]),
        "min_num_params": int(f["min_num_params"]), "state_dict_type": str(f["state_dict_type"]),
        "cpu_offload": bool(f["cpu_offload"]), "activation_checkpointing": bool(f["activation_checkpointing"]),
    }
    if f["transformer_cls_names_to_wrap"]:
        args["transformer_cls_names_to_wrap"] = list(f["transformer_cls_names_to_wrap"])
    if args["fsdp_version"] == 2:
        args["reshard_after_forward"] = bool(f["reshard_after_forward"])
    else:  # FSDP1: orig params, or the frozen base and the trainables could not share a flat parameter
        args.update(sharding_strategy=str(f["sharding_strategy"]), use_orig_params=True)  # accelerate: "deprecated"
    return FullyShardedDataParallelPlugin(**args)


def split_examples(examples: list, fraction: float, seed: int) -> tuple[list, list]:
    if not fraction or len(examples) < 4:
        return examples, []
    g = torch.Generator().manual_seed(seed + 7919)
    order = torch.randperm(len(examples), generator=g).tolist()
    n_eval = max(1, int(len(examples) * fraction))
    held = set(order[:n_eval])
    return [e for i, e in enumerate(examples) if i not in held], [e for i, e in enumerate(examples) if i in held]


def micro_batch(examples: list, micro: int, batch_size: int, seed: int, rank: int, world: int) -> list:
    """The examples of this rank's ``micro``-th micro-batch: deterministic in (seed, epoch)."""
    per_epoch = max(1, len(examples) // (batch_size * world))
    epoch, idx = divmod(micro, per_epoch)
    g = torch.Generator().manual_seed(seed * 100003 + epoch)
    order = torch.randperm(len(examples), generator=g).tolist()
    start = (idx * world + rank) * batch_size
    return [examples[i] for i in order[start : start + batch_size]]


SCHEDULERS = {"cosine": "cosine", "linear": "linear", "constant": "constant_with_warmup"}  # ours → transformers


def make_scheduler(name: str, optimizer: torch.optim.Optimizer, warmup: int, total: int):
    """``trainer.scheduler`` as a ``transformers.get_scheduler`` LambdaLR: linear warmup, then the named decay.

    The warmup is transformers' (and the HF Trainer's): optimizer step ``s < warmup`` runs at
    ``lr * s / warmup``, so the first step of a warmup runs at lr 0. Past the warmup: cosine to 0,
    linear to 0, or constant at ``lr``, reaching 0 at ``total`` for the first two.
    """
    from transformers import get_scheduler

    if name not in SCHEDULERS:
        raise ConfigError(f"trainer.scheduler={name!r}: use {', '.join(SCHEDULERS)}")
    return get_scheduler(SCHEDULERS[name], optimizer, num_warmup_steps=warmup, num_training_steps=total)


class MetricsLog:
    """metrics.jsonl (rank 0), mirrored to the accelerator's tracker (wandb) when ``logger=wandb``.

    On resume the lines past the checkpoint are dropped; a torn last line (a crash mid-write) is
    dropped too, a malformed line before it is a one-line error naming the file and the line.
    The tracker run is closed by ``accelerator.end_training()``.
    """

    def __init__(self, run_dir: Path, cfg: DictConfig, enabled: bool, resume_step: int, say=print, acc: Any = None):
        self.path = run_dir / "metrics.jsonl"
        self.enabled = enabled
        self.acc = None  # the accelerator whose trackers mirror the records
        self.last_loss: float | None = None  # the last logged loss at or before resume_step
        if not enabled:
            return
        if self.path.exists():
            keep = self._kept_rows(resume_step, say)
            losses = [r["loss"] for r in keep if r.get("loss") is not None]
            self.last_loss = losses[-1] if losses else None
            ckpt_mod.atomic_write_text(self.path, "".join(json.dumps(r) + "\n" for r in keep))
        if acc is not None and acc.log_with:
            start_tracker(acc, cfg, run_dir)
            self.acc = acc

    def _kept_rows(self, resume_step: int, say) -> list[dict[str, Any]]:
        """The records at or before ``resume_step`` (none for a fresh start)."""
        if resume_step <= 0:
            return []
        from ctxbench.data.errors import DataError
        from ctxbench.runs.results import read_jsonl_tolerant

        rows, dropped = read_jsonl_tolerant(self.path)
        if dropped:
            say(f"warning: {self.path}: dropped a torn last line (a crash mid-write)")
        for i, r in enumerate(rows, 1):  # read_jsonl_tolerant already refused lines that are no object
            if not isinstance(r.get("step", 0), int) or isinstance(r.get("step"), bool):
                raise DataError(self.path, "expected a JSON object with an integer step; fix or delete the line "
                                           "to resume", record=f"line {i}")
            loss = r.get("loss")
            if loss is not None and (not isinstance(loss, (int, float)) or isinstance(loss, bool)):
                raise DataError(self.path, f"loss is {json.dumps(loss)[:40]}, expected a number; fix or delete the "
                                           "line to resume", record=f"line {i}", field="loss")
        return [r for r in rows if r.get("step", 0) <= resume_step]

    def write(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())
        if self.acc is not None:
            self.acc.log({k: v for k, v in record.items() if k != "step"}, step=record["step"])


WANDB_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def wandb_run_id(run_dir: Path) -> str:
    """The run's wandb id, kept in ``<run>/wandb_id`` (made on the first run, reused on resume)."""
    id_file = run_dir / "wandb_id"
    if not id_file.exists():
        run_id = uuid.uuid4().hex[:12]
        id_file.write_text(run_id)
        return run_id
    try:
        run_id = id_file.read_bytes()[:200].decode("ascii").strip()
    except (OSError, UnicodeDecodeError):
        run_id = ""
    if not WANDB_ID.fullmatch(run_id):
        raise ConfigError(f"{id_file} is damaged (a wandb run id is 1-64 letters, digits, '-' or '_'); delete it "
                          "to log the resumed run as a new wandb run")
    return run_id


def start_tracker(acc: Any, cfg: DictConfig, run_dir: Path) -> None:
    """``accelerator.init_trackers`` for wandb: one run id per run folder (``wandb_id``, reused on
    resume), files under the run folder, ``WANDB_MODE`` over ``logger.mode``, the config redacted."""
    from ctxbench.core.secrets import redact

    run_id = wandb_run_id(run_dir)
    mode = os.environ.get("WANDB_MODE") or cfg.logger.get("mode", "offline")
    init = {"entity": cfg.logger.get("entity"), "id": run_id, "resume": "allow", "dir": str(run_dir), "mode": mode,
            "tags": list(cfg.logger.get("tags", []))}
    acc.init_trackers(str(cfg.logger.get("project", "ctxbench")),
                      config=redact(OmegaConf.to_container(cfg, resolve=True)), init_kwargs={"wandb": init})


@torch.no_grad()
def evaluate_loss(model: Any, method: Any, examples: list, cfg: DictConfig, device: torch.device) -> float | None:
    from accelerate.utils import send_to_device

    if not examples:
        return None
    model.eval()
    bs, losses = int(cfg.trainer.batch_size), []
    for i in range(0, min(len(examples), bs * int(cfg.trainer.max_eval_batches)), bs):
        batch = send_to_device(method.collate(examples[i : i + bs]), device)
        losses.append(float(model(batch).loss))
    model.train()
    return sum(losses) / len(losses)


def train(cfg: DictConfig) -> dict[str, Any]:
    from accelerate.utils import send_to_device, set_seed
    from tqdm.auto import tqdm

    from ctxbench.models.loading import load_model

    t = cfg.trainer
    run_dir = run_dir_of(cfg)
    acc = make_accelerator(cfg, project_dir=run_dir)
    is_main = acc.is_main_process
    claim_run_dir(run_dir, cfg, main=is_main)  # this process only, and this config only (run_guard.py)
    done = finished_run(run_dir, cfg)
    if done is not None:  # resume=auto on a finished run: nothing to train, nothing to rewrite
        acc.print(f"run {run_dir} is already complete: step {done['step']} of trainer.max_steps={int(t.max_steps)} "
                  f"(train_summary.json); nothing to do")
        acc.end_training()
        return {**done, "already_complete": True}
    resume = t.get("resume")
    if not resume:
        refuse_overwrite(run_dir)
    set_seed(int(cfg.seed))

    # cheap checks first: a missing or damaged checkpoint is named before the model loads
    init_from = ckpt_mod.resolve_checkpoint(cfg.checkpoint) if cfg.get("checkpoint") else None
    resume_from = ckpt_mod.resolve_checkpoint(resume) if resume and str(resume) != "auto" else None
    if init_from is not None and (init_from / ckpt_mod.MANIFEST).exists():  # a hand-made folder may have none
        ckpt_mod.verify(init_from)
    if resume_from is not None:  # verified whole before anything in it is unpickled (DeepSpeed / FSDP shards);
        ckpt_mod.verify(resume_from)  # a damaged state.json is named before the model loads, too
        ckpt_mod.check_state(resume_from, ckpt_mod.read_json(resume_from, ckpt_mod.STATE_JSON))

    # -- build: model, method, data --------------------------------------------------------
    bundle = load_model(cfg.model)
    with sharded.gathered([bundle.model.get_input_embeddings().weight]):  # ZeRO-3 loads the base partitioned
        method = build("method", cfg.method, bundle=bundle)
    if t.gradient_checkpointing:  # on the method: it knows what the recompute must see again (ICAE's adapter state)
        method.gradient_checkpointing_enable()
    if init_from is not None:
        with sharded.gathered([p for p in method.parameters() if p.requires_grad], modify=True):
            used = ckpt_mod.load_trained(method, init_from)
        acc.print(f"initialised trainable weights from {used}")
    samples = build("dataset", cfg.dataset)
    examples = method.train_examples(samples)
    if not examples:
        where = f" (dataset.path={cfg.dataset.path})" if cfg.dataset.get("path") else ""
        raise ConfigError(f"dataset={cfg.dataset.name}{where} gave no training examples for method={cfg.method.name}")
    train_ex, eval_ex = split_examples(examples, float(t.eval_fraction), int(cfg.seed))

    params = [p for p in method.parameters() if p.requires_grad]
    n_train = sum(p.numel() for p in params)
    n_total = sum(p.numel() for p in method.parameters())
    groups = method.optimizer_param_groups(float(t.lr), float(t.weight_decay))  # TrainableMethod's default: params
    optimizer = torch.optim.AdamW(groups, lr=float(t.lr), weight_decay=float(t.weight_decay), betas=tuple(t.betas))
    total = int(t.max_steps)
    warmup = int(t.warmup_steps) if t.warmup_steps is not None else int(round(float(t.warmup_ratio) * total))
    scheduler = make_scheduler(str(t.scheduler), optimizer, warmup, total)
    sharded.fsdp_wrap_classes(acc, bundle.model)
    model, optimizer = acc.prepare(method, optimizer)
    if sharded.kind(acc) == "FSDP":  # accelerate clips FSDP grads over all the wrapped model's parameters
        params = list(model.parameters())

    # -- resume ----------------------------------------------------------------------------
    step, micro, resumed_at = 0, 0, None
    ckpt_root = run_dir / "checkpoints"
    if resume:
        def restore(ckpt: Path) -> dict[str, Any]:  # optimizer, scheduler, weights, RNGs: all of one checkpoint
            state = ckpt_mod.check_state(ckpt, ckpt_mod.read_json(ckpt, ckpt_mod.STATE_JSON))
            sharded.check_layout(ckpt, state, acc)
            if sharded.is_sharded(acc):  # every rank its own shards (weights + optimizer) through accelerate
                sharded.load(acc, ckpt)  # after verify(ckpt): resume_newest / the explicit-resume check
                state = ckpt_mod.load_training_state(ckpt, None, scheduler)
            else:
                state = ckpt_mod.load_training_state(ckpt, optimizer, scheduler)
                ckpt_mod.load_trained(acc.unwrap_model(model), ckpt)
            ckpt_mod.restore_rng(ckpt, state, acc.process_index)
            return state

        if str(resume) == "auto":  # the newest intact checkpoint; damaged newer ones are named and skipped
            got = ckpt_mod.resume_newest(ckpt_root, restore, warn=acc.print)
        else:  # the one named: never another
            got = (resume_from, restore(resume_from)) if resume_from is not None else None
        if got is not None:
            found, state = got
            step, micro = state["step"], state["micro"]
            if step > total:
                raise ckpt_mod.CheckpointError(f"checkpoint {found} is at step {step}, past trainer.max_steps={total} "
                                               f"(raise trainer.max_steps or start a new run folder)")
            resumed_at = step
            acc.print(f"resumed from {found} at step {step}")
    log = MetricsLog(run_dir, cfg, is_main, step, say=acc.print, acc=acc)
    if is_main and step == 0:
        acc.print(f"method={cfg.method.name} model={cfg.model.name} examples={len(train_ex)} (+{len(eval_ex)} held out) "
                  f"trainable={n_train:,}/{n_total:,} params ({100 * n_train / max(1, n_total):.2f}%) "
                  f"[{acc.distributed_type} x{acc.num_processes}, {acc.mixed_precision}] → {run_dir}")

    def save(at_step: int) -> None:
        """A checkpoint of every rank's state: all ranks write into step_N.tmp, rank 0 publishes it."""
        rngs = acc.gather_for_metrics([json.dumps(ckpt_mod.rng_state())], use_gather_object=True) \
            if acc.num_processes > 1 else [json.dumps(ckpt_mod.rng_state())]
        split = sharded.is_sharded(acc)
        tmp = ckpt_mod.begin_checkpoint(ckpt_root, at_step) if is_main else ckpt_mod.tmp_folder(ckpt_root, at_step)
        acc.wait_for_everyone()
        if split:  # every rank's shards; then the whole trainable weights gathered (a collective too)
            sharded.save(acc, tmp)
            trainable = sharded.full_trainable(acc, model)
        else:  # DDP / one process: the weights are whole on rank 0
            trainable = acc.unwrap_model(model).trainable_state_dict() if is_main else {}
        acc.wait_for_everyone()
        if is_main:
            ckpt_mod.write_files(
                tmp, at_step, trainable=trainable, method_config=acc.unwrap_model(model).export_config(),
                model_config=OmegaConf.to_container(cfg.model, resolve=True),
                optimizer=None if split else optimizer, scheduler=scheduler,
                state={"micro": micro, "rng": {str(i): json.loads(r) for i, r in enumerate(rngs)},
                       "model": cfg.model.name, "method": cfg.method.name, "layout": sharded.layout(acc)})
            ckpt_mod.publish_checkpoint(ckpt_root, at_step, keep=int(t.keep_checkpoints))
        acc.wait_for_everyone()

    # -- loop ------------------------------------------------------------------------------
    model.train()
    bar = tqdm(total=total, initial=step, disable=not (is_main and t.progress), desc=f"train {cfg.method.name}")
    last_eval, grad_norm, loss = None, None, log.last_loss  # loss: None until a step runs (max_steps=0)
    while step < total:
        t0, loss_sum, tokens, stats_sum = time.perf_counter(), 0.0, 0, {}
        for _ in range(int(t.grad_accum)):
            batch = micro_batch(train_ex, micro, int(t.batch_size), int(cfg.seed), acc.process_index, acc.num_processes)
            batch = send_to_device(method.collate(batch), acc.device)
            micro += 1
            with acc.accumulate(model), acc.autocast():
                out = model(batch)
                acc.backward(out.loss)
                if acc.sync_gradients and t.max_grad_norm and acc.distributed_type != "DEEPSPEED":
                    grad_norm = acc.clip_grad_norm_(params, float(t.max_grad_norm))
                optimizer.step()
                if acc.sync_gradients and acc.distributed_type == "DEEPSPEED":  # DeepSpeed clips itself
                    grad_norm = model.get_global_grad_norm()
                optimizer.zero_grad(set_to_none=True)
            loss_sum += float(out.loss.detach())
            tokens += int(out.n_tokens)
            for k, v in out.stats.items():
                stats_sum[k] = stats_sum.get(k, 0.0) + float(v)
        scheduler.step()
        step += 1
        dt = time.perf_counter() - t0
        loss = float(acc.reduce(torch.tensor(loss_sum / int(t.grad_accum), device=acc.device), "mean"))
        tokens_all = int(acc.reduce(torch.tensor(tokens, device=acc.device), "sum"))
        bar.update(1)
        bar.set_postfix(loss=f"{loss:.4f}", tok_s=f"{tokens_all / dt:.0f}")
        if t.eval_every and step % int(t.eval_every) == 0:
            last_eval = evaluate_loss(model, method, eval_ex, cfg, acc.device)
        if step % int(t.log_every) == 0 or step == total:
            gn = grad_norm
            record = {"step": step, "loss": loss, "lr": scheduler.get_last_lr()[0], "tokens_per_s": tokens_all / dt,
                      "grad_norm": float(gn) if gn is not None else None, "tokens": tokens_all,
                      **{k: v / int(t.grad_accum) for k, v in stats_sum.items()}}
            if last_eval is not None and t.eval_every and step % int(t.eval_every) == 0:
                record["eval_loss"] = last_eval
            log.write(record)
        if t.save_every and step % int(t.save_every) == 0 and step < total:
            save(step)
        if t.get("stop_after") and step >= int(t.stop_after):
            bar.close()
            acc.print(f"stopping after step {step} (trainer.stop_after); resume with trainer.resume=auto")
            acc.end_training()
            return {"step": step, "loss": loss, "run_dir": str(run_dir), "stopped": True}
    bar.close()
    final_eval = evaluate_loss(model, method, eval_ex, cfg, acc.device)
    if resumed_at != step:  # the checkpoint we resumed from at this step is the final one already
        save(step)
    summary = {"step": step, "loss": loss, "eval_loss": final_eval, "run_dir": str(run_dir),
               "trainable_params": n_train, "total_params": n_total}
    if is_main:
        log.write({"step": step, "final": True, "eval_loss": final_eval})
        ckpt_mod.atomic_write_text(run_dir / "train_summary.json", json.dumps(summary, indent=2))
        from ctxbench.training.message import print_done

        print_done(acc.print, run_dir, step, final_eval, str(cfg.method.name))
    acc.wait_for_everyone()
    acc.end_training()
    return summary


def refuse_overwrite(run_dir: Path) -> None:
    """A fresh start (``trainer.resume`` unset) into a folder that holds a training run would train
    from step 0 over its checkpoints and metrics.jsonl: refused, naming the folder and the ways on."""
    found = ckpt_mod.list_checkpoints(run_dir / "checkpoints")
    summary = run_dir / "train_summary.json"
    if not found and not summary.exists():
        return
    what = f"checkpoints up to {found[-1].name}" if found else "train_summary.json"
    raise ConfigError(f"{run_dir} already holds a training run ({what}); trainer.resume is unset, so training "
                      "would restart from step 0 over it. Pass trainer.resume=auto to continue it (a finished "
                      "run is returned as it is), or choose a new hydra.run.dir")


def finished_run(run_dir: Path, cfg: DictConfig) -> dict[str, Any] | None:
    """The summary of a finished run when ``trainer.resume=auto`` finds one, else None.

    Finished = train_summary.json at ``trainer.max_steps`` and a checkpoint at that step.
    """
    if str(cfg.trainer.get("resume")) != "auto":
        return None
    summary_path = run_dir / "train_summary.json"
    found = ckpt_mod.list_checkpoints(run_dir / "checkpoints")
    if not summary_path.exists() or not found:
        return None
    try:
        summary = json.loads(summary_path.read_text())
    except (ValueError, OSError, RecursionError):  # damaged: rewritten by finishing again
        return None
    total = int(cfg.trainer.max_steps)
    if not isinstance(summary, dict) or summary.get("step") != total or ckpt_mod.step_of(found[-1]) != total:
        return None
    try:
        ckpt_mod.verify(found[-1])
    except ckpt_mod.CheckpointError as e:  # the final weights are damaged: not finished, resume redoes it
        print(f"warning: the run's final checkpoint is damaged ({e}); resuming to rewrite it")
        return None
    return summary


def main(cfg: DictConfig) -> None:
    train(cfg)
