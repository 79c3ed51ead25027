"""No code path unpickles untrusted files: pickle only through DialSim's restricted unpickler,
torch.load only with weights_only=True, weights only as safetensors."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

PKG = Path(__file__).resolve().parents[1] / "ctxbench"
ALLOWED_PICKLE = {PKG / "data" / "safe_pickle.py"}


def calls(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f"{getattr(f.value, 'id', '?')}.{f.attr}" if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            yield name, node


@pytest.mark.parametrize("path", sorted(PKG.rglob("*.py")), ids=lambda p: str(p.relative_to(PKG)))
def test_no_unsafe_deserialisation(path):
    tree = ast.parse(path.read_text())
    for name, node in calls(tree):
        if name in ("pickle.load", "pickle.loads", "pickle.Unpickler", "dill.load", "joblib.load"):
            assert path in ALLOWED_PICKLE, f"{path}:{node.lineno} unpickles outside the restricted unpickler"
        if name == "torch.load":
            kw = {k.arg: k.value for k in node.keywords}
            ok = isinstance(kw.get("weights_only"), ast.Constant) and kw["weights_only"].value is True
            assert ok, f"{path}:{node.lineno} torch.load without weights_only=True"


def test_optimizer_state_loads_weights_only(tmp_path):
    """The checkpoint's optimizer state really loads under weights_only=True."""
    p = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.AdamW([p], lr=0.1)
    p.grad = torch.ones(3)
    opt.step()
    torch.save(opt.state_dict(), tmp_path / "opt.pt")
    state = torch.load(tmp_path / "opt.pt", weights_only=True)
    assert state["state"][0]["step"] == 1


def test_malicious_pickle_in_checkpoint_is_refused(tmp_path):
    import os
    import pickle

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'pwned'}",))

    (tmp_path / "optimizer.pt").write_bytes(pickle.dumps(Evil()))
    with pytest.raises(Exception):
        torch.load(tmp_path / "optimizer.pt", weights_only=True)
    assert not (tmp_path / "pwned").exists()
