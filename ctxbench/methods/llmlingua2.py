"""``method=llmlingua2``: LLMLingua-2 (arXiv 2403.12968), a token classifier that keeps or drops each word.

A bidirectional encoder fine-tuned to label each word keep / drop (Microsoft's
``microsoft/llmlingua-2-xlm-roberta-large-meetingbank`` or ``-bert-base-multilingual-cased-meetingbank``)
reads the history in chunks of 512 tokens; the words with the highest keep probability are kept,
as many as the budget allows (counted in the reader's tokens). The classifier is a folder the user
gives as ``method.classifier``: ctxbench ships none and never downloads one; a missing folder is
refused in one line. The answer is decoded by the method's own model bundle from the kept text.

llmlingua 0.2.2's ``init_llmlingua2`` is not run: it calls ``seed_everything(42)``, which reseeds
the process's torch / numpy / random generators and sets ``PYTHONHASHSEED``; its other settings
(batch 50, 512-token chunks, 100 force-token slots added to the classifier's vocabulary, their
embedding rows drawn from a fixed seed so two builds compress alike) are set here on this instance
and its own copy of the classifier. The rest of the bridge:
:mod:`ctxbench.methods.prompt_compression`; docs/llmlingua.md.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ctxbench.config.schemas.method import Llmlingua2Method
from ctxbench.core.errors import ConfigError
from ctxbench.core.registry import register
from ctxbench.methods.prompt_compression import PromptCompressionMethod, compressor

# the classifier families llmlingua 0.2.2 knows (it branches on these substrings of the model name)
FAMILIES = {"xlm-roberta": "microsoft/llmlingua-2-xlm-roberta-large-meetingbank",
            "bert": "microsoft/llmlingua-2-bert-base-multilingual-cased-meetingbank"}
MAX_SEQ_LEN, MAX_BATCH, MAX_FORCE_TOKENS = 512, 50, 100  # init_llmlingua2's values


class CountingClassifier:
    """The token classifier, counting the (unpadded) tokens it reads."""

    def __init__(self, model: Any):
        self.model = model
        self.tokens_read = 0

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Any:
        self.tokens_read += int(attention_mask.sum())
        return self.model(input_ids=input_ids, attention_mask=attention_mask)


def load_classifier(path: Any) -> tuple[Any, Any, str]:
    """(model, tokenizer, llmlingua's model name) of the classifier folder ``method.classifier``."""
    from transformers import AutoConfig, AutoModelForTokenClassification, AutoTokenizer

    fix = f"set method.classifier to a local folder of LLMLingua-2 weights ({FAMILIES['xlm-roberta']})"
    if path is None or not str(path).strip():
        raise ConfigError(f"method=llmlingua2 needs method.classifier (it is null): {fix}")
    folder = Path(str(path)).expanduser()
    if not (folder / "config.json").is_file():
        raise ConfigError(f"method.classifier={str(path)!r}: no config.json there (not a model folder): {fix}")
    config = AutoConfig.from_pretrained(folder)
    family = FAMILIES.get(config.model_type)
    if family is None or not any("ForTokenClassification" in a for a in config.architectures or []):
        raise ConfigError(f"method.classifier={str(path)!r}: a {config.model_type} "
                          f"{'/'.join(config.architectures or ['model'])}, not a token classifier of a family "
                          f"llmlingua knows ({', '.join(FAMILIES)}): {fix}")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForTokenClassification.from_pretrained(folder, dtype=torch.float32)
    return model.eval(), tokenizer, family


@register("method", "llmlingua2")
class LLMLingua2Method(PromptCompressionMethod):
    """LLMLingua-2's keep/drop token classifier (``method.classifier``); answers from the kept text."""
    Settings = Llmlingua2Method  # its config schema (ctxbench/config/schemas/method.py)

    def __init__(self, cfg: Any, bundle: Any):
        super().__init__(cfg, bundle)
        model, tokenizer, family = load_classifier(cfg.classifier)
        model.to(self.device)
        # what init_llmlingua2 sets, without its seed_everything(42) (see the module docstring)
        special = {v for k, v in tokenizer.special_tokens_map.items() if k != "additional_special_tokens"}
        added = [f"[NEW{i}]" for i in range(MAX_FORCE_TOKENS)]
        tokenizer.add_special_tokens({"additional_special_tokens": added})
        with torch.random.fork_rng(devices=[]):  # the new rows' draw: seeded, the caller's RNG untouched
            torch.manual_seed(0)
            model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
        self.classifier = CountingClassifier(model)
        self.pc = compressor(self.classifier, tokenizer, bundle.tokenizer, family, MAX_SEQ_LEN, self.device)
        self.pc.use_llmlingua2 = True
        self.pc.max_batch_size, self.pc.max_seq_len, self.pc.max_force_token = MAX_BATCH, MAX_SEQ_LEN, MAX_FORCE_TOKENS
        self.pc.special_tokens, self.pc.added_tokens = special, added

    def compress(self, text: str, target: int) -> str:
        res = self.pc.compress_prompt([text], target_token=target, force_tokens=list(self.cfg.force_tokens or []))
        return res["compressed_prompt"]

    def scorer_tokens(self) -> int:
        return self.classifier.tokens_read
