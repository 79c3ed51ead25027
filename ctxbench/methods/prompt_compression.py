"""Hard prompt compression (LLMLingua, LLMLingua-2) as a system: the shared part of both methods.

``ingest(history)`` renders the history text (``History.text``, or :func:`render_history`) and
compresses it to the budget: at most ``ceil((1 - ratio) x n)`` tokens of the reader's tokenizer, n
the history's. ``answer(question)`` puts the kept text where the answer prompt's context goes
(``kv_prompt.qa_frame``: the chat head, the context, the question and any reply prefix) and decodes
greedily with the bundle's model. ``set_compression_ratio(r)`` (the compression task's call) sets r.

Microsoft's ``llmlingua`` package (0.2.2) is used as shipped; two things about its
``PromptCompressor`` do not fit this process, and are bridged *per instance* (the package itself,
and every other object in the process, are left as they are):

- ``PromptCompressor.__init__`` asks tiktoken for gpt-3.5-turbo's encoding (a download from
  openaipublic.blob.core.windows.net: offline it fails) and loads its scorer again by name.
  :func:`compressor` builds the instance without ``__init__`` and sets the attributes
  ``__init__``/``load_model`` would: the model and tokenizer it is given (the method's own bundle:
  no second copy), and as ``oai_tokenizer`` (what the package counts budgets and results in) the
  reader's tokenizer (:class:`ReaderTokens`), so every budget is in the tokens the reader holds.
- LLMLingua's scorer loop (``iterative_compress_prompt``/``get_ppl``) passes and slices the KV
  cache in the legacy tuple format (``for k, v in past_key_values``); transformers 5 takes and
  returns ``DynamicCache`` objects under a renamed keyword. :class:`LegacyCacheLM` wraps the
  scorer: a list of ``[k, v]`` in, a list of ``[k, v]`` out; it also counts the tokens the scorer
  read (the construction cost).

The budget is enforced, not hoped for: LLMLingua's own count can overshoot a little (SmolLM2, a
2k-token text at r = 0.5: 1009 kept for a budget of 1001), so :meth:`PromptCompressionMethod.ingest`
asks again with the target lowered by the overshoot (``RETRIES`` times) and, if still over, keeps the
first ``budget`` tokens of the compressed text (``Usage.extra["budget_cut_tokens"]``). r = 0 keeps
the text as it is, without calling the compressor (LLMLingua at rate 1 still drops a few tokens).
"""
from __future__ import annotations

import time
from typing import Any

import torch

from ctxbench.core.errors import ConfigError
from ctxbench.core.task_protocol import ratio_budget
from ctxbench.core.types import History, Prediction, Question, Usage
from ctxbench.methods.base import TrainingFreeMethod, optional_package
from ctxbench.methods.kv_prompt import qa_frame, stop_token_ids
from ctxbench.models.loading import cache_kwarg, returned_cache

VERSION = "0.2.2"
INSTALL = f"pip install --no-deps llmlingua=={VERSION} tiktoken"
RETRIES = 3  # compressions asked again with a lowered target when the kept text is over the budget


def import_llmlingua() -> Any:
    """The ``llmlingua`` package, or one ConfigError line saying how to install it."""
    return optional_package("llmlingua", "method=llmlingua/llmlingua2 need", INSTALL,
                            "--no-deps: its other deps are ctxbench's")


class ReaderTokens:
    """The reader's tokenizer behind the ``encode(text) -> ids`` that llmlingua asks tiktoken for."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer

    def encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]


class LegacyCacheLM:
    """A causal LM called the way llmlingua 0.2.2 calls its scorer, run on transformers 5.

    ``past_key_values`` comes in as a list of ``[k, v]`` per layer (or None) and goes out the same
    way (``response.past_key_values``); the model itself reads and returns a ``DynamicCache`` under
    :func:`cache_kwarg`'s keyword. ``tokens_read`` counts every input token the scorer was given."""

    def __init__(self, model: Any):
        self.model = model
        self.cache_kwarg = cache_kwarg(model)
        self.tokens_read = 0

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                 past_key_values: Any = None, use_cache: bool = True) -> Any:
        from types import SimpleNamespace

        from transformers import DynamicCache

        cache = DynamicCache()
        for i, (k, v) in enumerate(past_key_values or []):
            cache.update(k, v, i)
        self.tokens_read += int(input_ids.shape[1])
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, **{self.cache_kwarg: cache},
                         use_cache=True)
        legacy = [[layer.keys, layer.values] for layer in returned_cache(out).layers]
        return SimpleNamespace(logits=out.logits, past_key_values=legacy)


def compressor(model: Any, tokenizer: Any, reader_tokenizer: Any, model_name: str, max_positions: int,
               device: Any) -> Any:
    """A ``llmlingua.PromptCompressor`` on an already loaded ``model``/``tokenizer`` (see the module
    docstring for why ``__init__`` is not run); ``model_name`` is what the package branches on."""
    pc_cls = import_llmlingua().PromptCompressor
    pc = pc_cls.__new__(pc_cls)
    pc.model_name = model_name
    pc.use_llmlingua2 = False
    pc.retrieval_model, pc.retrieval_model_name = None, None
    pc.open_api_config = {}
    pc.cache_bos_num, pc.prefix_bos_num = 10, 100  # __init__'s values
    pc.oai_tokenizer = ReaderTokens(reader_tokenizer)
    pc.tokenizer, pc.model = tokenizer, model
    pc.device = str(device)
    pc.context_idxs = []
    pc.max_position_embeddings = int(max_positions)
    return pc


class PromptCompressionMethod(TrainingFreeMethod):
    """A history compressed as text to a token budget, answered by the bundle's model from the kept text.

    Subclasses give :meth:`compress` (the text and a target in reader tokens → kept text) and
    :meth:`scorer_tokens` (what the compressor's model has read so far)."""

    def __init__(self, cfg: Any, bundle: Any):
        super().__init__(cfg, bundle)
        self.model = bundle.model
        self.ratio = float(cfg.compression_ratio)
        self._kept = ""
        self._speakers: list[str] = []
        self._n_text = self._n_kept = self._read = self._cut = self._tries = 0
        self._ingest_seconds = 0.0

    # -- the compression task's protocol ----------------------------------------------------------
    def set_compression_ratio(self, ratio: float) -> None:
        """Compress each history ingested from now on to at most ceil((1 - ratio) x n) reader tokens."""
        r = float(ratio)
        if not 0.0 <= r < 1.0:
            raise ConfigError(f"compression ratio {ratio!r}: must be in [0, 1) (0 = keep everything)")
        self.ratio = r

    # -- what a subclass gives --------------------------------------------------------------------
    def compress(self, text: str, target: int) -> str:
        """``text`` compressed to about ``target`` reader tokens."""
        raise NotImplementedError

    def scorer_tokens(self) -> int:
        """Tokens the compressor's model has read since it was built."""
        raise NotImplementedError

    # -- as a system --------------------------------------------------------------------------------
    def reader_ids(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    @torch.no_grad()
    def ingest(self, history: History) -> None:
        """Render the history and compress it to ceil((1 - ratio) x n) reader tokens."""
        from ctxbench.core.render import render_history

        self.eval()
        t0 = time.perf_counter()
        self._speakers = list(history.speakers)
        text = render_history(history, "locomo")
        n = len(self.reader_ids(text))
        budget = ratio_budget(self.ratio, n)
        read0, kept, tries = self.scorer_tokens(), text, 0
        if self.ratio > 0 and n > 0:
            target = budget
            while tries < RETRIES:
                tries += 1
                kept = self.compress(text, target)
                over = len(self.reader_ids(kept)) - budget
                if over <= 0 or target <= 1:
                    break
                target = max(1, target - over)
        ids = self.reader_ids(kept)
        keep = min(len(ids), budget)
        while len(self.reader_ids(kept)) > budget:  # still over: the first tokens that fit
            kept = self.tokenizer.decode(ids[:keep])
            keep -= 1
        self._cut = len(ids) - len(self.reader_ids(kept))
        self._kept, self._n_text, self._n_kept = kept, n, len(self.reader_ids(kept))
        self._read, self._tries = self.scorer_tokens() - read0, tries
        self._ingest_seconds = time.perf_counter() - t0

    def budget(self) -> int:
        return ratio_budget(self.ratio, self._n_text)

    def extra(self) -> dict[str, Any]:
        return {"compression_ratio": self.ratio, "budget": self.budget(), "history_tokens": self._n_text,
                "compress_calls": self._tries, "budget_cut_tokens": self._cut}

    def construction_usage(self) -> Usage:
        return Usage(construction_prompt_tokens=self._read, construction_calls=self._tries,
                     memory_items=self._n_kept, memory_tokens=self._n_text, ingest_seconds=self._ingest_seconds,
                     extra=self.extra())

    @torch.no_grad()
    def answer(self, question: Question) -> Prediction:
        """The answer prompt with the kept text as its context; a greedy decode with the bundle's model."""
        t0 = time.perf_counter()
        tok = self.tokenizer
        before, after = qa_frame(tok, self.answer_prompt, question, self._speakers)
        ids = torch.tensor([self.reader_ids(before + self._kept + after)], device=self.device)
        stop = stop_token_ids(tok)
        out = self.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                  max_new_tokens=self.answer_max_tokens(question), do_sample=False,
                                  eos_token_id=stop or None, pad_token_id=tok.pad_token_id
                                  if tok.pad_token_id is not None else (stop[0] if stop else 0),
                                  temperature=None, top_p=None, top_k=None)
        new = out[0, ids.shape[1]:].tolist()
        for j, t in enumerate(new):
            if t in stop:
                new = new[:j]
                break
        usage = Usage(answer_prompt_tokens=int(ids.shape[1]), answer_completion_tokens=len(new), answer_calls=1,
                      held_text=self._n_kept, memory_items=self._n_kept, memory_tokens=self._n_text,
                      answer_seconds=time.perf_counter() - t0, extra=self.extra())
        return Prediction(text=tok.decode(new, skip_special_tokens=True).strip(), usage=usage)
