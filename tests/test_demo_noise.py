"""An eval's output (stdout, stderr, its .log) carries no faiss loader lines that look like errors (``ModuleNotFoundError`` for AVX builds)."""
from __future__ import annotations

import logging
from ctxbench.config.compose import option_config

from conftest import TINY_ANSWERS


def test_rag_eval_stderr_has_no_faiss_module_not_found(cli, tmp_path):
    r = cli("eval", "memory=rag", "llm=hf", "llm.model=tiny", "dataset=locomo_sample", "limit=1", "progress=false",
            TINY_ANSWERS, f"hydra.run.dir={tmp_path / 'run'}")
    assert r.returncode == 0, r.stderr[-2000:]
    logs = "".join(p.read_text() for p in (tmp_path / "run").glob("*.log"))
    for shown in (r.stdout, r.stderr, logs):  # Hydra logs INFO to stdout and the run's .log file
        assert "ModuleNotFoundError" not in shown
        assert "faiss.loader" not in shown


def test_faiss_warnings_still_show():
    from ctxbench.memory.stores.vector import import_faiss

    faiss = import_faiss()
    assert hasattr(faiss, "IndexFlatIP")
    loader = logging.getLogger("faiss.loader")
    assert loader.getEffectiveLevel() == logging.WARNING  # INFO hidden, WARNING and above kept


def test_a_lora_wrap_prints_no_library_deprecation(recwarn):
    """peft reads transformers' deprecated ``is_gradient_checkpointing`` on every wrap; users saw its
    FutureWarning on every train and eval of a LoRA method."""
    import warnings

    from omegaconf import OmegaConf

    from ctxbench.models.loading import load_model
    from ctxbench.methods.lora import add_lora

    bundle = load_model(option_config("model", {"name": "tiny"}))
    warnings.simplefilter("always")
    wrapped = add_lora(bundle.model, OmegaConf.merge(option_config("method", {"name": "lm"}).lora,
                                                {"r": 2, "alpha": 4, "target_modules": ["q_proj"]}))
    assert any(p.requires_grad for p in wrapped.parameters())
    assert not [w for w in recwarn if "is_gradient_checkpointing" in str(w.message)]
