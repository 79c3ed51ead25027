"""The one training loop (Accelerate): every trainable method trains here.

Read top to bottom: build → data order → optimizer/schedule → (resume) → loop → save.

- The data order is a pure function of (seed, epoch): micro-batch ``i`` of the run is always the
  same examples, so a resumed run continues exactly where it stopped (position = micro-step count).
- One optimizer step = ``grad_accum`` micro-batches on every rank; loss is averaged over both.
- Checkpoints hold only trainable weights + optimizer/scheduler/RNG/data position; under DeepSpeed /
  FSDP every rank also writes its shards through accelerate (the whole protocol: checkpoint.py).
- Only rank 0 writes metrics.jsonl, wandb and a checkpoint's own files; it publishes the checkpoint.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from ctxbench.core.errors import ConfigError
from ctxbench.core.registry import build
from ctxbench.runs.guard import claim as claim_run_dir
from ctxbench.runs.results import atomic_write_text
from ctxbench.training import checkpoint as ckpt_mod
from ctxbench.training.accelerator import distributed_kind, fsdp_wrap_classes, gathered, make_accelerator
from ctxbench.training.batches import micro_batch, split_examples
from ctxbench.training.metrics_log import MetricsLog
from ctxbench.training.optim import make_optimizer, make_scheduler, warmup_steps
from ctxbench.training.run_folder import finished_run, refuse_overwrite, run_dir_of


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
    with gathered([bundle.model.get_input_embeddings().weight]):  # ZeRO-3 loads the base partitioned
        method = build("method", cfg.method, bundle=bundle)
    if t.gradient_checkpointing:  # on the method: it knows what the recompute must see again (ICAE's adapter state)
        method.gradient_checkpointing_enable()
    if init_from is not None:
        with gathered([p for p in method.parameters() if p.requires_grad], modify=True):
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
    optimizer = make_optimizer(method, t)
    total = int(t.max_steps)
    scheduler = make_scheduler(str(t.scheduler), optimizer, warmup_steps(t), total)
    fsdp_wrap_classes(acc, bundle.model)
    model, optimizer = acc.prepare(method, optimizer)
    if distributed_kind(acc) == "FSDP":  # accelerate clips FSDP grads over all the wrapped model's parameters
        params = list(model.parameters())

    # -- resume ----------------------------------------------------------------------------
    step, micro, resumed_at = 0, 0, None
    ckpt_root = run_dir / "checkpoints"
    if resume:
        def restore(ckpt: Path) -> dict[str, Any]:
            return ckpt_mod.restore_training_checkpoint(acc, model, ckpt, optimizer, scheduler)

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
        ckpt_mod.save_training_checkpoint(
            acc, model, ckpt_root, at_step, micro=micro, model_config=OmegaConf.to_container(cfg.model, resolve=True),
            model_name=cfg.model.name, method_name=cfg.method.name, optimizer=optimizer, scheduler=scheduler,
            keep=int(t.keep_checkpoints))

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
        atomic_write_text(run_dir / "train_summary.json", json.dumps(summary, indent=2))
        from ctxbench.training.message import print_done

        print_done(acc.print, run_dir, step, final_eval, str(cfg.method.name))
    acc.wait_for_everyone()
    acc.end_training()
    return summary


def main(cfg: DictConfig) -> None:
    train(cfg)
