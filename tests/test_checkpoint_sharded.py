"""Sharded checkpoints (DeepSpeed / FSDP) in one process: the folder layout every rank writes into,
the MANIFEST over the shards, a damaged shard never reaching a pickle loader, the layout checks on
resume, and ``launcher=fsdp``'s plugin and its refusal on CPU. The 2-process runs that write and
resume real shards are in tests/test_distributed.py."""
from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from ctxbench.training import checkpoint as ck
from ctxbench.config.schemas import load_conf_file

SHARD = "accelerate/pytorch_model/zero_pp_rank_{}_mp_rank_00_optim_states.pt"


class Acc:
    """Test double of an Accelerator: its distributed type, process count and load_state.

    ``load_state`` unpickles rank 1's shard with full pickle, as DeepSpeed's checkpoint engine does
    (``torch.load(weights_only=False)``): what must only ever see verified files."""

    def __init__(self, distributed_type="DEEPSPEED", num_processes=2):
        self.distributed_type, self.num_processes, self.loaded = distributed_type, num_processes, []

    def load_state(self, folder, **kwargs):
        with open(Path(folder) / SHARD.split("/", 1)[1].format(1), "rb") as f:
            self.loaded.append(pickle.load(f))


def sharded_checkpoint(root: Path, step: int, acc: Acc) -> Path:
    """A checkpoint as the loop writes one under DeepSpeed: every rank's shard, then rank 0's files."""
    tmp = ck.begin_checkpoint(root, step)
    for rank in range(acc.num_processes):  # what each rank's save_state writes
        f = tmp / SHARD.format(rank)
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(pickle.dumps({"rank": rank, "exp_avg": [0.1 * rank] * 4}))
    ck.write_files(tmp, step, trainable={"w": torch.ones(4)}, method_config={"name": "lm"},
                   state={"micro": step, "rng": {"0": {}}, "layout": ck.layout(acc)})
    return ck.publish_checkpoint(root, step)


def test_manifest_covers_every_rank_shard(tmp_path):
    c = sharded_checkpoint(tmp_path, 3, Acc())
    assert c.name == "step_0000003" and not ck.tmp_folder(tmp_path, 3).exists()
    manifest = ck.verify(c)
    assert {SHARD.format(0), SHARD.format(1), ck.WEIGHTS, ck.STATE_JSON} <= set(manifest)
    assert "optimizer.pt" not in manifest
    assert json.loads((c / ck.STATE_JSON).read_text())["layout"] == {
        "format": "accelerate", "distributed_type": "DEEPSPEED", "processes": 2}
    f = c / SHARD.format(1)
    f.write_bytes(f.read_bytes()[:-3])
    with pytest.raises(ck.CheckpointError, match=f"file {SHARD.format(1)} is truncated"):
        ck.verify(c)


def test_a_swapped_in_shard_is_never_unpickled(tmp_path):
    """resume=auto verifies the MANIFEST before the sharded loader (a full unpickler) reads a file."""
    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'pwned'}",))

    acc = Acc()
    sharded_checkpoint(tmp_path, 3, acc)
    newer = sharded_checkpoint(tmp_path, 5, acc)
    (newer / SHARD.format(1)).write_bytes(pickle.dumps(Evil()))
    warnings = []
    found, _ = ck.resume_newest(tmp_path, lambda c: ck.load_sharded(acc, c), warn=warnings.append)
    assert found.name == "step_0000003"
    assert not (tmp_path / "pwned").exists()
    assert acc.loaded == [{"rank": 1, "exp_avg": [0.1] * 4}]
    assert len(warnings) == 1 and warnings[0].startswith(
        f"warning: skipping a damaged checkpoint: checkpoint {newer}: file {SHARD.format(1)} is truncated")
    assert warnings[0].endswith("; resuming from step_0000003")


def test_missing_shard_folder_is_a_checkpoint_error(tmp_path):
    c = ck.save_checkpoint(tmp_path, 2, trainable={"w": torch.ones(2)}, method_config={"name": "lm"})
    with pytest.raises(ck.CheckpointError, match=r"folder accelerate/ is missing"):
        ck.load_sharded(Acc(), c)


@pytest.mark.parametrize("saved,now,says", [
    (("DEEPSPEED", 2), ("MULTI_CPU", 2), "holds the sharded state of 2 processes under DEEPSPEED; this run is "
                                         "MULTI_CPU: resume it with that launcher"),
    (("DEEPSPEED", 2), ("DEEPSPEED", 4), "this run is 4 under DEEPSPEED: resume with the same launcher and "
                                         "--num_processes"),
    (("DEEPSPEED", 2), ("FSDP", 2), "this run is 2 under FSDP"),
    (("MULTI_CPU", 2), ("DEEPSPEED", 2), "was saved without sharded state (optimizer.pt of MULTI_CPU); this run is "
                                         "DEEPSPEED"),
])
def test_layout_mismatch_is_one_line(tmp_path, saved, now, says):
    acc_saved = Acc(*saved)
    if ck.is_sharded(acc_saved):
        c = sharded_checkpoint(tmp_path, 3, acc_saved)
    else:
        c = ck.save_checkpoint(tmp_path, 3, trainable={"w": torch.ones(2)}, method_config={"name": "lm"},
                               state={"micro": 3, "rng": {}, "layout": ck.layout(acc_saved)})
    state = json.loads((c / ck.STATE_JSON).read_text())
    with pytest.raises(ck.CheckpointError) as e:
        ck.check_layout(c, state, Acc(*now))
    msg = str(e.value)
    assert says in msg and f"checkpoint={c}" in msg and "\n" not in msg
    ck.check_layout(c, state, acc_saved)  # the same layout resumes


def test_full_trainable_without_shards_is_the_method_state():
    class Method(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.frozen = torch.nn.Parameter(torch.arange(3.0)), torch.nn.Parameter(torch.ones(2), False)

        def trainable_state_dict(self):
            return {n: p.detach() for n, p in self.named_parameters() if p.requires_grad}

    class One(Acc):
        def unwrap_model(self, model):
            return model

    got = ck.full_trainable(One("NO", 1), Method())
    assert list(got) == ["a"] and torch.equal(got["a"], torch.arange(3.0))


def test_fsdp_plugin_from_the_launcher_config():
    from ctxbench.core.paths import conf_dir
    from ctxbench.training.accelerator import fsdp_plugin

    conf = load_conf_file(conf_dir() / "launcher" / "fsdp.yaml").fsdp
    p2 = fsdp_plugin(conf)
    assert p2.fsdp_version == 2 and p2.reshard_after_forward is True
    assert str(p2.state_dict_type).endswith("SHARDED_STATE_DICT")
    conf.version, conf.sharding_strategy = 1, "SHARD_GRAD_OP"
    p1 = fsdp_plugin(conf)
    assert p1.fsdp_version == 1 and p1.use_orig_params is True and str(p1.sharding_strategy).endswith("SHARD_GRAD_OP")


def test_fsdp_on_cpu_is_refused_in_one_line(cli, tmp_path):
    """accelerate never turns FSDP on for a CPU run: refused, rather than silently training DDP."""
    r = cli("train", "method=lm", "model=tiny", "launcher=fsdp", "trainer.max_steps=1", "trainer.progress=false",
            f"hydra.run.dir={tmp_path / 'run'}")
    assert r.returncode == 2, r.stderr[-2000:]
    lines = r.stderr.strip().splitlines()
    assert lines[-1].startswith("ctxbench: error: launcher=fsdp: accelerate enabled no FSDP for this run"), lines
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_fsdp_version_is_checked_at_compose_time(cli, tmp_path):
    r = cli("train", "launcher=fsdp", "launcher.fsdp.version=3", f"hydra.run.dir={tmp_path / 'run'}")
    assert r.returncode == 2
    assert "config key 'launcher.fsdp.version' must be in [1, 2]" in r.stderr
