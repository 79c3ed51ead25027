"""The packaged all-MiniLM-L6-v2 loads offline through the registry: 384-d, normalised, batched,
and similar sentences are closer than unrelated ones."""
from __future__ import annotations

import numpy as np
from omegaconf import OmegaConf

from ctxbench.core import registry
from ctxbench.config.compose import option_config


def test_minilm_offline():
    emb = registry.build("embedder", option_config("embedder", {"name": "minilm", "batch_size": 2}))
    assert emb.dim == 384
    v = emb.encode(["Alice works at Google.", "Alice is employed by Google.", "The soup is too salty.",
                    "Alice works at Google."])
    assert v.shape == (4, 384) and v.dtype == np.float32
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-4)
    assert v[0] @ v[1] > v[0] @ v[2] + 0.3
    assert np.allclose(v[0], v[3])
