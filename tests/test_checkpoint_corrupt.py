"""Every damaged checkpoint file is a one-line CheckpointError naming the file; resume=auto skips a damaged newest."""
from __future__ import annotations

import json

import pytest
import torch

from ctxbench.training import checkpoint as ck


def saved(root, step=1):
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 2)).sum().backward()
    opt.step()
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    c = ck.save_checkpoint(root, step, trainable={"w": torch.ones(4)}, method_config={"name": "lm"},
                           optimizer=opt, scheduler=sched, state={"micro": 2, "rng": {}})
    return c, opt, sched


def reseal(ckpt):
    """Rewrite the manifest after editing a file, as if the file had been written that way."""
    manifest = {p.name: {"bytes": p.stat().st_size, "sha256": ck._sha256(p)}
                for p in sorted(ckpt.iterdir()) if p.name != ck.MANIFEST}
    (ckpt / ck.MANIFEST).write_text(json.dumps(manifest))


def one_line_naming(err, name):
    msg = str(err.value)
    assert "\n" not in msg and name in msg, msg
    return msg


def test_garbage_weights_without_a_manifest_name_the_file(tmp_path):
    c, _, _ = saved(tmp_path)
    (c / ck.MANIFEST).unlink()
    (c / ck.WEIGHTS).write_bytes(b"not a safetensors file at all")
    with pytest.raises(ck.CheckpointError) as e:
        ck.load_weights(c)
    one_line_naming(e, "trainable.safetensors")


def test_changed_bytes_are_caught_by_the_manifest(tmp_path):
    c, opt, sched = saved(tmp_path)
    f = c / "optimizer.pt"
    f.write_bytes(b"\0" * f.stat().st_size)
    with pytest.raises(ck.CheckpointError, match="optimizer.pt is corrupt") as e:
        ck.load_training_state(c, opt, sched)
    one_line_naming(e, str(c))


@pytest.mark.parametrize("name", ["optimizer.pt", "scheduler.pt"])
def test_unreadable_optimizer_or_scheduler_state_names_the_file(tmp_path, name):
    c, opt, sched = saved(tmp_path)
    (c / name).write_bytes(b"garbage, not a torch file")
    reseal(c)
    with pytest.raises(ck.CheckpointError, match=f"cannot load {name}") as e:
        ck.load_training_state(c, opt, sched)
    one_line_naming(e, str(c))


def test_optimizer_state_for_another_model_names_the_file(tmp_path):
    c, _, _ = saved(tmp_path)
    other = torch.optim.AdamW(torch.nn.Linear(3, 3, bias=False).parameters())
    with pytest.raises(ck.CheckpointError, match="cannot load optimizer.pt"):
        ck.load_training_state(c, other, None)


@pytest.mark.parametrize("text", ['{"step": 1, "mic', "[1, 2]", '{"step": 1}'])
def test_corrupt_state_json_names_the_file(tmp_path, text):
    c, opt, sched = saved(tmp_path)
    (c / "state.json").write_text(text)
    reseal(c)
    with pytest.raises(ck.CheckpointError) as e:
        ck.load_training_state(c, opt, sched)
    one_line_naming(e, "state.json")


@pytest.mark.parametrize("text", ["{not json", '["a"]', '{"trainable.safetensors": 5}'])
def test_corrupt_manifest_names_the_file(tmp_path, text):
    c, _, _ = saved(tmp_path)
    (c / ck.MANIFEST).write_text(text)
    with pytest.raises(ck.CheckpointError) as e:
        ck.load_weights(c)
    one_line_naming(e, "MANIFEST.json")


def test_weights_that_do_not_fit_the_method_name_the_file(tmp_path):
    class Method(torch.nn.Module):  # load_trainable as the methods do: copy into own parameters
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(3))

        def load_trainable(self, state):
            with torch.no_grad():
                for k, v in state.items():
                    dict(self.named_parameters())[k].copy_(v)

    c, _, _ = saved(tmp_path)
    with pytest.raises(ck.CheckpointError, match="trainable.safetensors does not fit") as e:
        ck.load_trained(Method(), c)
    one_line_naming(e, str(c))


def test_latest_complete_skips_a_damaged_newest_with_a_warning(tmp_path):
    old, _, _ = saved(tmp_path, 2)
    new, _, _ = saved(tmp_path, 4)
    (new / "state.json").write_text("{}")
    warnings = []
    assert ck.latest_complete(tmp_path, warn=warnings.append) == old
    assert len(warnings) == 1 and "step_0000004" in warnings[0] and "state.json" in warnings[0]
    (old / ck.WEIGHTS).write_bytes(b"x")
    with pytest.raises(ck.CheckpointError, match="no usable checkpoint") as e:
        ck.latest_complete(tmp_path, warn=warnings.append)
    one_line_naming(e, "state.json")
    assert ck.latest_complete(tmp_path / "none") is None
