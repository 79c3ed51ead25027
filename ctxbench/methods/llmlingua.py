"""``method=llmlingua``: LLMLingua (arXiv 2310.05736), perplexity-based token pruning of the history.

A small causal LM (the scorer) reads the history in windows of ``method.iterative_size`` tokens and
drops the tokens it finds least surprising, window by window, each window's threshold set so the
whole keeps the budget (LLMLingua's iterative token-level compression; its coarse, demonstration-level
filter needs several contexts and a history is one). The scorer here is the method's own model
bundle (the packaged SmolLM2-135M by default), the same model that then answers from the kept text:
no second copy is loaded. The paper's scorer is a separate small LM (GPT-2 / LLaMA-7B) in front of a
large reader. How llmlingua 0.2.2 is run on transformers 5 and offline, and how the budget is held:
:mod:`ctxbench.methods.prompt_compression`; docs/llmlingua.md.
"""
from __future__ import annotations

from typing import Any

from ctxbench.config.schemas.method import LlmlinguaMethod
from ctxbench.core.registry import register
from ctxbench.methods.prompt_compression import LegacyCacheLM, PromptCompressionMethod, compressor


@register("method", "llmlingua")
class LLMLinguaMethod(PromptCompressionMethod):
    """LLMLingua's perplexity-based pruning with the bundle's model as scorer; answers from the kept text."""
    Settings = LlmlinguaMethod  # its config schema (ctxbench/config/schemas/method.py)

    def __init__(self, cfg: Any, bundle: Any):
        super().__init__(cfg, bundle)
        self.scorer = LegacyCacheLM(bundle.model)
        window = int(getattr(bundle.model.config, "max_position_embeddings", 0) or 2048)
        self.pc = compressor(self.scorer, bundle.tokenizer, bundle.tokenizer, f"ctxbench:{cfg.name}", window,
                             self.device)

    def compress(self, text: str, target: int) -> str:
        res = self.pc.compress_prompt([text], target_token=target, iterative_size=int(self.cfg.iterative_size),
                                      use_context_level_filter=False)
        return res["compressed_prompt"]

    def scorer_tokens(self) -> int:
        return self.scorer.tokens_read
