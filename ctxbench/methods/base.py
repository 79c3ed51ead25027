"""What a trainable method is, for the one training loop and the one evaluator.

A method is a ``torch.nn.Module`` registered with ``@register("method", NAME)`` and built as
``cls(cfg, bundle=ModelBundle)``. It owns the base model (``self.bundle.model``) and whatever it
adds (LoRA, memory embeddings, a compressor). It exposes:

- ``train_examples(samples) -> list``: turn dataset samples into training examples (tokenised);
- ``collate(examples) -> dict``: a batch for ``forward``;
- ``forward(batch) -> MethodOutput``: the training loss (``loss(batch)`` is the same call), and the
  number of tokens the loss covers (for tokens/s);
- ``trainable_state_dict() / load_trainable(state)``: only what is trained, saved as safetensors
  by the loop (see :mod:`ctxbench.training.checkpoint`); ``export_config()`` the JSON needed to rebuild;
- as an evaluated system: ``ingest(history)`` and ``answer(question) -> Prediction``;
- training hooks with defaults here, called by the loop on every method: ``optimizer_param_groups(lr,
  weight_decay)``, what AdamW optimizes (default: one group of every trainable parameter; LoCoCo gives
  its compressor/norm groups their own learning rates), ``gradient_checkpointing_enable()``,
  activation checkpointing for training (``trainer.gradient_checkpointing``), and the method's own
  random draws (default: none): ``seed_rank(rank)`` seeds them for one DDP rank, ``rng_state()`` /
  ``load_rng_state(state)`` carry them (JSON) through each rank's checkpoint, so a resume continues
  them (ICAE's sampled AE/LM objective).

Precision: whatever the base model's dtype, every trainable parameter is float32 (fp32 master
weights, :func:`fp32_trainables`); the frozen base keeps its own dtype (bf16 for the 7B configs).
The forward casts at the seams (an embedding spliced into ``inputs_embeds`` takes the base dtype)
and the loop's autocast (``trainer.precision=bf16``) runs the matmuls in bf16.

Helpers shared by methods (never another method's internals) live here.
"""
from __future__ import annotations

from typing import Any

import torch

from ctxbench.core.system import System


class MethodOutput(dict):
    """A method's training output: ``loss``, ``n_tokens`` (the tokens the loss covers), ``stats``.

    A dict (built as ``MethodOutput(loss=..., n_tokens=..., stats=...)``, or from a mapping as
    accelerate's fp32 output conversion does), so DeepSpeed ZeRO-3 finds the loss tensor in it and
    hooks the backward that re-gathers a method's own parameters (ICAE's memory embeddings, CCM's
    COMP embeddings); an object it cannot look into leaves them partitioned in the backward.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.setdefault("stats", {})

    loss = property(lambda self: self["loss"])
    n_tokens = property(lambda self: self["n_tokens"])
    stats = property(lambda self: self["stats"])


class TrainableMethod(torch.nn.Module, System):
    """Small shared defaults; subclasses override what they need (and implement the System contract)."""

    def __init__(self, cfg: Any, bundle: Any):
        super().__init__()
        self.cfg = cfg
        self.bundle = bundle
        self.tokenizer = bundle.tokenizer

    # -- training ---------------------------------------------------------------------------
    def optimizer_param_groups(self, lr: float, weight_decay: float = 0.0) -> list[Any]:
        """What AdamW optimizes: its parameters, or parameter groups (dicts with their own ``lr``,
        ``weight_decay``). Default: every trainable parameter, in one group at ``lr``."""
        return [p for p in self.parameters() if p.requires_grad]

    def gradient_checkpointing_enable(self) -> None:
        """Checkpoint the base model's decoder layers (non-reentrant); methods with state that the
        recompute must see again extend this."""
        from ctxbench.models.loading import enable_activation_checkpointing

        enable_activation_checkpointing(self.bundle.model)

    def seed_rank(self, rank: int) -> None:
        """Seed the method's own random draws for DDP rank ``rank`` (called once, before any restore)."""

    def rng_state(self) -> dict[str, Any]:
        """The method's own random draws' position (JSON), saved per rank in a checkpoint; {} = none."""
        return {}

    def load_rng_state(self, state: dict[str, Any]) -> None:
        """Continue the draws :meth:`rng_state` saved (TypeError / ValueError / KeyError when damaged)."""

    def loss(self, batch: dict[str, Any]) -> MethodOutput:
        return self(batch)

    def trainable_state_dict(self) -> dict[str, torch.Tensor]:
        return {n: p.detach().cpu().contiguous() for n, p in self.named_parameters() if p.requires_grad}

    def load_trainable(self, state: dict[str, torch.Tensor]) -> None:
        own = dict(self.named_parameters())
        missing = [k for k in state if k not in own]
        if missing:
            raise KeyError(f"checkpoint has weights this method does not: {missing[:5]}")
        with torch.no_grad():
            for k, v in state.items():
                own[k].copy_(v.to(own[k].dtype))

    def export_config(self) -> dict[str, Any]:
        from omegaconf import OmegaConf

        return OmegaConf.to_container(self.cfg, resolve=True)  # type: ignore[return-value]

    @property
    def device(self) -> torch.device:
        from ctxbench.models.loading import model_device

        return model_device(self.bundle.model)

    def placement(self) -> dict[str, str]:  # results.json: where the base model ran
        from ctxbench.models.loading import placement

        return placement(self.bundle.model)


def fp32_trainables(module: torch.nn.Module) -> None:
    """Every trainable floating parameter of ``module`` in float32 (in place: the Parameter objects,
    and so ties and references to them, stay the same); frozen parameters keep their dtype."""
    for p in module.parameters():
        if p.requires_grad and p.is_floating_point() and p.dtype != torch.float32:
            p.data = p.data.float()


def base_dtype(model: torch.nn.Module) -> torch.dtype:
    """The dtype the frozen base computes in (its input embeddings')."""
    return model.get_input_embeddings().weight.dtype


def pad_batch(seqs: list[list[int]], pad_id: int, labels: list[list[int]] | None = None,
              ) -> dict[str, torch.Tensor]:
    """Right-pad token lists into input_ids / attention_mask (/ labels with -100)."""
    n = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), n), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), n), dtype=torch.long)
    out = {"input_ids": ids, "attention_mask": mask}
    if labels is not None:
        lab = torch.full((len(seqs), n), -100, dtype=torch.long)
        out["labels"] = lab
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
        mask[i, : len(s)] = 1
        if labels is not None:
            lab[i, : len(labels[i])] = torch.tensor(labels[i], dtype=torch.long)
    return out


def chunk_tokens(ids: list[int], size: int, stride: int | None = None) -> list[list[int]]:
    """Split a token list into windows of ``size`` (non-overlapping unless ``stride`` < size)."""
    stride = stride or size
    return [ids[i : i + size] for i in range(0, max(len(ids) - 1, 1), stride) if len(ids[i : i + size]) > 1]


def past_then_causal(q: int, past: int, device: Any) -> torch.Tensor:
    """Boolean ``[q, past + q]``: ``q`` new tokens see all ``past`` cached slots, and each other causally."""
    ok = torch.ones(q, past + q, dtype=torch.bool, device=device)
    ok[:, past:] = torch.ones(q, q, dtype=torch.bool, device=device).tril()
    return ok


def additive(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Boolean ``[B, Q, K]`` → float ``[B, 1, Q, K]`` (0 where allowed, dtype min elsewhere)."""
    m = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    m.masked_fill_(~allowed, torch.finfo(dtype).min)
    return m[:, None]


def optional_package(name: str, who: str, install: str, note: str) -> Any:
    """The optional package ``name`` (kvpress, llmlingua), imported when a method that uses it is built, or
    one ConfigError line: ``who`` ("method=kvpress needs") the package, the install command and ``note``."""
    import importlib

    from ctxbench.core.errors import ConfigError

    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        raise ConfigError(f"{who} the {name} package ({e.name} is missing); install it with: {install}   "
                          f"(or `make setup`; {note})") from e


class TrainingFreeMethod(TrainableMethod):
    """A method evaluated as it is (StreamingLLM, H2O, SnapKV, kvpress's presses): ``train`` refuses it."""

    def train_examples(self, samples: list) -> list:
        from ctxbench.core.errors import ConfigError

        raise ConfigError(f"method={self.cfg.name} is training-free (nothing to train); use it with `eval`")

    def collate(self, examples: list) -> dict[str, torch.Tensor]:
        return pad_batch(examples, self.tokenizer.pad_token_id)

    def forward(self, batch: dict[str, torch.Tensor]) -> MethodOutput:
        raise ValueError(f"method={self.cfg.name} has no training loss")
