"""The one training loop (Accelerate): every trainable method trains here.

:func:`train` runs the phases of :class:`TrainRecipe` in order, each one method, read top to bottom:

- ``setup``: the accelerator, the run folder claimed, the checkpoints named on the command line
  checked, the method built on the base model (registry), the data split, optimizer and scheduler;
- ``restore`` (``trainer.resume``): weights, optimizer, scheduler, RNGs and data position of one checkpoint;
- ``open_log``: metrics.jsonl cut back to the restored step, the tracker (wandb) started;
- ``fit``: the step loop — ``train_step``, then ``evaluate`` / log / ``save`` when due — and the finish.

- The data order is a pure function of (seed, epoch) (batches.py): micro-batch ``i`` of the run is
  always the same examples, so a resumed run continues exactly where it stopped (position = micro-step count).
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
from ctxbench.training import checkpoint as ck
from ctxbench.training.allocator import set_mmap_threshold
from ctxbench.training.accelerator import distributed_kind, fsdp_wrap_classes, gathered, make_accelerator
from ctxbench.training.batches import micro_batch, split_examples
from ctxbench.training.metrics_log import MetricsLog
from ctxbench.training.optim import make_optimizer, make_scheduler, warmup_steps
from ctxbench.training.run_folder import SUMMARY, finished_run, refuse_overwrite, run_dir_of


def train(cfg: DictConfig) -> dict[str, Any]:
    recipe = TrainRecipe(cfg)
    finished = recipe.setup()
    if finished is not None:  # trainer.resume=auto on a finished run: nothing to train, nothing to rewrite
        return finished
    recipe.restore()
    recipe.open_log()
    return recipe.fit()


def main(cfg: DictConfig) -> None:
    train(cfg)


class TrainRecipe:
    """One training run, as named phases; its state (step, data position, last loss) lives on it."""

    def __init__(self, cfg: DictConfig):
        self.cfg, self.t = cfg, cfg.trainer
        self.run_dir = run_dir_of(cfg)
        self.ckpt_root = self.run_dir / "checkpoints"
        self.step = 0  # optimizer steps taken
        self.micro = 0  # micro-batches consumed: the data position
        self.resumed_at: int | None = None  # the step of the checkpoint restored
        self.loss: float | None = None  # the last step's loss (None until a step runs: max_steps=0)
        self.grad_norm: Any = None
        self.last_eval: float | None = None

    # -- setup -----------------------------------------------------------------------------------
    def setup(self) -> dict[str, Any] | None:
        """Accelerator, run folder, method, data, optimizer and scheduler; the summary of the run
        instead when ``trainer.resume=auto`` finds it finished (nothing else is built then)."""
        from accelerate.utils import set_seed

        t = self.t
        self.acc = make_accelerator(self.cfg, project_dir=self.run_dir)
        self.is_main = self.acc.is_main_process
        claim_run_dir(self.run_dir, self.cfg, main=self.is_main)  # this process only, this config only (runs/guard.py)
        done = finished_run(self.run_dir, self.cfg)
        if done is not None:
            self.acc.print(f"run {self.run_dir} is already complete: step {done['step']} of "
                           f"trainer.max_steps={int(t.max_steps)} ({SUMMARY}); nothing to do")
            self.acc.end_training()
            return {**done, "already_complete": True}
        if not t.resume:
            refuse_overwrite(self.run_dir)
        set_seed(int(self.cfg.seed))
        set_mmap_threshold(t.mmap_threshold_kb)  # before the method allocates anything
        init_from = self._check_named_checkpoints()
        self._build_method(init_from)
        self._split_data()
        self._build_optimizer()
        return None

    def _check_named_checkpoints(self) -> Path | None:
        """Cheap checks first: a missing or damaged ``checkpoint=`` / ``trainer.resume=DIR`` is named
        before the model loads. Returns the ``checkpoint=`` folder to initialise from (or None)."""
        cfg, resume = self.cfg, self.t.resume
        init_from = ck.resolve_checkpoint(cfg.checkpoint) if cfg.checkpoint else None
        self.resume_from = ck.resolve_checkpoint(resume) if resume and str(resume) != "auto" else None
        if init_from is not None and (init_from / ck.MANIFEST).exists():  # a hand-made folder may have none
            ck.verify(init_from)
        if self.resume_from is not None:  # verified whole before anything in it is unpickled (DeepSpeed / FSDP
            ck.verify(self.resume_from)  # shards); a damaged state.json is named before the model loads, too
            ck.check_state(self.resume_from, ck.read_json(self.resume_from, ck.STATE_JSON))
        return init_from

    def _build_method(self, init_from: Path | None) -> None:
        """The base model, the method on it (``method=``, registry), and ``checkpoint=``'s weights."""
        from ctxbench.models.loading import load_model

        self.bundle = load_model(self.cfg.model)
        with gathered([self.bundle.model.get_input_embeddings().weight]):  # ZeRO-3 loads the base partitioned
            self.method = build("method", self.cfg.method, bundle=self.bundle)
        self.method.seed_rank(self.acc.process_index)  # its own draws (ICAE's objectives): one stream per rank
        if self.t.gradient_checkpointing:  # on the method: it knows what the recompute must see again (ICAE)
            self.method.gradient_checkpointing_enable()
        if init_from is not None:
            with gathered([p for p in self.method.parameters() if p.requires_grad], modify=True):
                used = ck.load_trained(self.method, init_from)
            self.acc.print(f"initialised trainable weights from {used}")

    def _split_data(self) -> None:
        """The method's training examples of ``dataset=``, split into trained and held out."""
        cfg = self.cfg
        examples = self.method.train_examples(build("dataset", cfg.dataset))
        if not examples:
            where = f" (dataset.path={cfg.dataset.path})" if cfg.dataset.get("path") else ""
            raise ConfigError(f"dataset={cfg.dataset.name}{where} gave no training examples for "
                              f"method={cfg.method.name}")
        self.train_ex, self.eval_ex = split_examples(examples, float(self.t.eval_fraction), int(cfg.seed))

    def _build_optimizer(self) -> None:
        """AdamW and the schedule, then the method and optimizer prepared by the accelerator."""
        t, acc, method = self.t, self.acc, self.method
        params = [p for p in method.parameters() if p.requires_grad]
        self.n_train = sum(p.numel() for p in params)
        self.n_total = sum(p.numel() for p in method.parameters())
        optimizer = make_optimizer(method, t)
        self.scheduler = make_scheduler(str(t.scheduler), optimizer, warmup_steps(t), int(t.max_steps))
        fsdp_wrap_classes(acc, self.bundle.model)
        self.model, self.optimizer = acc.prepare(method, optimizer)
        # the parameters clipped: accelerate clips FSDP grads over all the wrapped model's parameters
        self.params = list(self.model.parameters()) if distributed_kind(acc) == "FSDP" else params

    # -- restore ---------------------------------------------------------------------------------
    def restore(self) -> None:
        """``trainer.resume``: ``auto`` the newest intact checkpoint (damaged newer ones are named and
        skipped), a folder that one and never another; its step and data position become the run's."""
        resume = self.t.resume
        if not resume:
            return
        if str(resume) == "auto":
            got = ck.resume_newest(self.ckpt_root, self.load_checkpoint, warn=self.acc.print)
        else:
            got = (self.resume_from, self.load_checkpoint(self.resume_from)) if self.resume_from is not None else None
        if got is None:  # resume=auto on a folder without checkpoints: a fresh start
            return
        found, state = got
        self.step, self.micro = state["step"], state["micro"]
        total = int(self.t.max_steps)
        if self.step > total:
            raise ck.CheckpointError(f"checkpoint {found} is at step {self.step}, past trainer.max_steps={total} "
                                     f"(raise trainer.max_steps or start a new run folder)")
        self.resumed_at = self.step
        self.acc.print(f"resumed from {found} at step {self.step}")

    def load_checkpoint(self, ckpt: Path) -> dict[str, Any]:
        """Weights, optimizer, scheduler and this rank's RNGs from one checkpoint; its state.json."""
        return ck.restore_training_checkpoint(self.acc, self.model, ckpt, self.optimizer, self.scheduler)

    def open_log(self) -> None:
        """metrics.jsonl (kept up to the restored step) and the tracker; the opening line of a fresh run."""
        acc, cfg = self.acc, self.cfg
        self.log = MetricsLog(self.run_dir, cfg, self.is_main, self.step, say=acc.print, acc=acc)
        if self.is_main and self.step == 0:
            acc.print(f"method={cfg.method.name} model={cfg.model.name} examples={len(self.train_ex)} "
                      f"(+{len(self.eval_ex)} held out) trainable={self.n_train:,}/{self.n_total:,} params "
                      f"({100 * self.n_train / max(1, self.n_total):.2f}%) "
                      f"[{acc.distributed_type} x{acc.num_processes}, {acc.mixed_precision}] → {self.run_dir}")
        self.loss = self.log.last_loss

    # -- the loop --------------------------------------------------------------------------------
    def fit(self) -> dict[str, Any]:
        """Optimizer steps up to ``trainer.max_steps`` (or ``trainer.stop_after``): each one trained,
        then evaluated, logged and saved when due; then the final evaluation, checkpoint and summary."""
        from tqdm.auto import tqdm

        t, total = self.t, int(self.t.max_steps)
        self.model.train()
        bar = tqdm(total=total, initial=self.step, disable=not (self.is_main and t.progress),
                   desc=f"train {self.cfg.method.name}")
        while self.step < total:
            metrics = self.train_step()
            bar.update(1)
            bar.set_postfix(loss=f"{metrics['loss']:.4f}", tok_s=f"{metrics['tokens'] / metrics['seconds']:.0f}")
            eval_due = bool(t.eval_every) and self.step % int(t.eval_every) == 0
            if eval_due:
                self.last_eval = self.evaluate()
            if self.step % int(t.log_every) == 0 or self.step == total:
                self.log.write(self.record(metrics, with_eval=eval_due))
            if t.save_every and self.step % int(t.save_every) == 0 and self.step < total:
                self.save(self.step)
            if t.stop_after and self.step >= int(t.stop_after):
                bar.close()
                return self.stop()
        bar.close()
        return self.finish()

    def train_step(self) -> dict[str, Any]:
        """One optimizer step: ``grad_accum`` micro-batches forward and backward on every rank (the
        gradients synced, clipped and stepped on the last), then the schedule. Returns the step's
        loss (mean over micro-batches and ranks), tokens (sum over ranks), seconds and method stats."""
        from accelerate.utils import send_to_device

        t, acc, model = self.t, self.acc, self.model
        accum = int(t.grad_accum)
        t0, loss_sum, tokens, stats_sum = time.perf_counter(), 0.0, 0, {}
        for _ in range(accum):
            batch = micro_batch(self.train_ex, self.micro, int(t.batch_size), int(self.cfg.seed),
                                acc.process_index, acc.num_processes)
            batch = send_to_device(self.method.collate(batch), acc.device)
            self.micro += 1
            with acc.accumulate(model), acc.autocast():
                out = model(batch)
                acc.backward(out.loss)
                if acc.sync_gradients and t.max_grad_norm and acc.distributed_type != "DEEPSPEED":
                    self.grad_norm = acc.clip_grad_norm_(self.params, float(t.max_grad_norm))
                self.optimizer.step()
                if acc.sync_gradients and acc.distributed_type == "DEEPSPEED":  # DeepSpeed clips itself
                    self.grad_norm = model.get_global_grad_norm()
                self.optimizer.zero_grad(set_to_none=True)
            loss_sum += float(out.loss.detach())
            tokens += int(out.n_tokens)
            for k, v in out.stats.items():
                stats_sum[k] = stats_sum.get(k, 0.0) + float(v)
        self.scheduler.step()
        self.step += 1
        seconds = time.perf_counter() - t0
        self.loss = float(acc.reduce(torch.tensor(loss_sum / accum, device=acc.device), "mean"))
        tokens_all = int(acc.reduce(torch.tensor(tokens, device=acc.device), "sum"))
        return {"loss": self.loss, "tokens": tokens_all, "seconds": seconds,
                "stats": {k: v / accum for k, v in stats_sum.items()}}

    @torch.no_grad()
    def evaluate(self) -> float | None:
        """The mean loss over the held-out examples (up to ``trainer.max_eval_batches`` batches); None without any."""
        from accelerate.utils import send_to_device

        if not self.eval_ex:
            return None
        model, bs, losses = self.model, int(self.t.batch_size), []
        model.eval()
        for i in range(0, min(len(self.eval_ex), bs * int(self.t.max_eval_batches)), bs):
            batch = send_to_device(self.method.collate(self.eval_ex[i : i + bs]), self.acc.device)
            losses.append(float(model(batch).loss))
        model.train()
        return sum(losses) / len(losses)

    def record(self, metrics: dict[str, Any], with_eval: bool) -> dict[str, Any]:
        """The metrics.jsonl line of this step (``eval_loss`` on the steps that evaluated)."""
        gn = self.grad_norm
        record = {"step": self.step, "loss": metrics["loss"], "lr": self.scheduler.get_last_lr()[0],
                  "tokens_per_s": metrics["tokens"] / metrics["seconds"],
                  "grad_norm": float(gn) if gn is not None else None, "tokens": metrics["tokens"], **metrics["stats"]}
        if with_eval and self.last_eval is not None:
            record["eval_loss"] = self.last_eval
        return record

    def save(self, step: int) -> None:
        """A checkpoint of every rank's state at ``step`` (a collective: checkpoint.save_training_checkpoint)."""
        cfg = self.cfg
        ck.save_training_checkpoint(
            self.acc, self.model, self.ckpt_root, step, micro=self.micro,
            model_config=OmegaConf.to_container(cfg.model, resolve=True), model_name=cfg.model.name,
            method_name=cfg.method.name, optimizer=self.optimizer, scheduler=self.scheduler,
            keep=int(self.t.keep_checkpoints))

    # -- the end ---------------------------------------------------------------------------------
    def stop(self) -> dict[str, Any]:
        """``trainer.stop_after``: stop here, without the final evaluation and checkpoint."""
        self.acc.print(f"stopping after step {self.step} (trainer.stop_after); resume with trainer.resume=auto")
        self.acc.end_training()
        return {"step": self.step, "loss": self.loss, "run_dir": str(self.run_dir), "stopped": True}

    def finish(self) -> dict[str, Any]:
        """The final held-out loss and checkpoint, train_summary.json, and the closing message."""
        acc = self.acc
        final_eval = self.evaluate()
        if self.resumed_at != self.step:  # the checkpoint we resumed from at this step is the final one already
            self.save(self.step)
        summary = {"step": self.step, "loss": self.loss, "eval_loss": final_eval, "run_dir": str(self.run_dir),
                   "trainable_params": self.n_train, "total_params": self.n_total}
        if self.is_main:
            self.log.write({"step": self.step, "final": True, "eval_loss": final_eval})
            atomic_write_text(self.run_dir / SUMMARY, json.dumps(summary, indent=2))
            from ctxbench.training.message import print_done

            print_done(acc.print, self.run_dir, self.step, final_eval, str(self.cfg.method.name))
        acc.wait_for_everyone()
        acc.end_training()
        return summary
