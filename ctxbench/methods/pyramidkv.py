"""``method=pyramidkv``: PyramidKV — SnapKV's selection with a budget that shrinks with depth.

Cai et al., "PyramidKV: Dynamic KV Cache Compression based on Pyramidal Information Funneling"
(arXiv 2406.02069): attention is spread wide in lower layers and concentrated in upper ones, so
lower layers get more slots and upper layers fewer, in an arithmetic progression whose mean is
the uniform budget M (the same KV bytes as every method at M). Within a layer the slots are chosen
as SnapKV does (pooled votes of an observation window, the window kept), at ingest and when the
question arrives. Budgets follow the reference code (``pyramidkv_utils.py``): with ``beta``,

    min = (M − window) // beta,   max = 2·(M − window) − min,   step = (max − min) / (layers − 1)
    budget(layer l) = window + round(max − l·step)

The reference floors ``step``, which leaves every layer a little more (a mean of 133.5 slots for
M = 128 on 30 layers); here it is not floored, so the mean is M (to rounding) and the KV bytes are
those of a uniform M. Under ``task=compression`` M is each history's ceil((1 − r) × n); an M that
leaves no room beside the window gets a uniform budget.
"""
from __future__ import annotations

from ctxbench.config.schemas.method import PyramidkvMethod
from ctxbench.core.errors import ConfigError
from ctxbench.core.registry import register
from ctxbench.methods.kv_cache import QuestionAwareKVMethod
from ctxbench.methods.press import Press
from ctxbench.methods.snapkv import snapkv_press


def pyramid_budget(layer_idx: int, n_layers: int, mem_size: int, window: int, beta: float) -> int:
    """Slots of layer ``layer_idx`` of ``n_layers`` for a mean budget ``mem_size``."""
    room = mem_size - window
    if room < 1:
        raise ConfigError(f"method.mem_size={mem_size} leaves no room beside method.window={window}")
    lo = int(room // beta)
    hi = 2 * room - lo
    if n_layers == 1:
        return mem_size
    return window + round(hi - layer_idx * (hi - lo) / (n_layers - 1))


@register("method", "pyramidkv")
class PyramidKV(QuestionAwareKVMethod):
    Settings = PyramidkvMethod  # its config schema (ctxbench/config/schemas/method.py)
    def make_press(self) -> Press:
        window, beta = self.cfg.window, float(self.cfg.beta)
        if beta < 1:
            raise ConfigError(f"method.beta={beta}: must be ≥ 1 (the top layer keeps (M − window) / beta)")

        def budget(layer_idx: int, n_layers: int, mem_size: int) -> int:
            if self._ratio is not None and mem_size <= window:  # a ratio's M too small for a pyramid: uniform M
                return mem_size
            return pyramid_budget(layer_idx, n_layers, mem_size, window, beta)

        return snapkv_press(self.cfg, budget)
