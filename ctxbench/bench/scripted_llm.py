"""A deterministic, zero-cost chat model for ``suite=memory_systems`` (a measuring instrument).

It answers each memory-construction prompt of the shipped memory systems with a small *valid*
reply derived from the prompt's own text (facts = the new messages' first words, entities = the
capitalised words, an ADD decision, a one-line summary ...), recognised by the prompt's system
message. The replies live beside the prompts: each ``ctxbench/memory/prompts/<system>.py`` declares
its own ``SCRIPTED`` table (see ``prompts/scripting.py``).

With the LLM's own time taken out, the suite measures what a memory system itself costs per
conversation: embedding, stores, graph, prompt building, and how many LLM calls it makes and
how many tokens it sends. Tokens are counted with a real tokenizer (SmolLM2's by default), so
tokens/question are those the system would send to that model. Prompts it does not recognise get
a generic reply and are counted in ``unknown`` (reported in bench.json), never silently.
"""
from __future__ import annotations

import importlib
import pkgutil
from collections import Counter
from typing import Any, Callable

from ctxbench.llm.base import ChatResult, Message, UsageMeter
from ctxbench.llm.stop import apply_stop
from ctxbench.memory.prompts.scripting import lines as _lines
from ctxbench.memory.prompts.scripting import words as _words


class ScriptedChatModel:
    """``chat(messages, ...)`` → a valid reply for the prompt kind; counted in ``meter`` like a backend."""

    model_name = "scripted"
    cache_id = "scripted"

    def __init__(self, count_tokens: Callable[[str], int] | None = None, context_window: int = 8192) -> None:
        self.meter = UsageMeter()
        self._count = count_tokens or (lambda t: len(t.split()))
        self._window = int(context_window)
        self.kinds: Counter = Counter()
        self.unknown: Counter = Counter()
        self._routes = self._build_routes()

    @property
    def context_window(self) -> int:
        return self._window

    def count_tokens(self, text: str) -> int:
        return int(self._count(text))

    # ---- replies per prompt kind ---------------------------------------------------------------
    @staticmethod
    def _build_routes() -> dict[str, tuple[str, Callable[[str], str]]]:
        """system-prompt start → (kind, reply(user text)), from every prompt module's ``SCRIPTED``."""
        import ctxbench.memory.prompts as prompts

        routes: dict[str, tuple[str, Callable[[str], str]]] = {}
        for mod in pkgutil.iter_modules(prompts.__path__):
            module = importlib.import_module(f"{prompts.__name__}.{mod.name}")
            consts = {v: n for n, v in vars(module).items() if isinstance(v, str) and n.isupper()}
            for key, fn in getattr(module, "SCRIPTED", {}).items():
                name = next((n for v, n in consts.items() if v.startswith(key)), "?")
                routes[key] = (f"{mod.name}.{name.removesuffix('_SYSTEM').lower()}", fn)
        return routes

    def _route(self, system: str) -> tuple[str, Callable[[str], str]] | None:
        """The route whose key is the longest start of ``system`` (a whole prompt, or a template's fixed start)."""
        best = max((k for k in self._routes if k and system.startswith(k)), key=len, default=None)
        return self._routes[best] if best else None

    def reply(self, messages: list[Message], phase: str) -> str:
        system = next((m["content"] for m in messages if m.get("role") == "system"), "")
        user = messages[-1]["content"] if messages else ""
        route = self._route(system) if system else None
        if route is None and phase == "answer":
            self.kinds["answer"] += 1
            said = (_words(ln.split(":", 1)[1], 8) for ln in _lines(user) if ":" in ln)
            return next((w for w in said if w), "Not mentioned in the conversation.")  # never empty: that is no answer
        if route is None:
            self.unknown[_words(system or user, 8)] += 1
            return "{}" if "JSON" in (system + user) else _words(user, 20)
        kind, fn = route
        self.kinds[kind] += 1
        return fn(user)

    # ---- the ChatLLM interface -----------------------------------------------------------------
    def chat(self, messages: list[Message], *, max_new_tokens: int = 64, temperature: float = 0.0,
             phase: str = "answer", json_mode: bool = False, schema: dict[str, Any] | None = None,
             stop: list[str] | None = None) -> ChatResult:
        text, stopped = apply_stop(self.reply(messages, phase), stop or [])  # the backends' stop rule (llm/stop.py)
        text = self._truncate(text, max_new_tokens)
        r = ChatResult(text=text, prompt_tokens=sum(self.count_tokens(m["content"]) for m in messages),
                       completion_tokens=self.count_tokens(text), stopped=stopped)
        self.meter.add(phase, r)
        return r

    def chat_batch(self, batch: list[list[Message]], **kw: Any) -> list[ChatResult]:
        return [self.chat(m, **kw) for m in batch]

    def _truncate(self, text: str, max_new_tokens: int) -> str:
        if text.lstrip().startswith(("{", "[")):
            return text  # JSON replies are short by construction; cutting them would only break them
        words = text.split()
        while words and self.count_tokens(" ".join(words)) > max_new_tokens:
            words = words[:-1]
        return " ".join(words)


def tokenizer_counter(model_name: str | None) -> Callable[[str], int] | None:
    """Token counting with a conf/model's tokenizer (loaded alone, without the weights), or None."""
    if not model_name:
        return None
    try:
        from ctxbench.models.loading import smollm2_dir, tiny_tokenizer

        if model_name == "tiny":
            tok = tiny_tokenizer()
        else:
            from transformers import AutoTokenizer

            from ctxbench.config.schemas import load_option

            mcfg = load_option("model", model_name)  # the file keeps only what differs from its schema
            # conf/model options: model=hf's have a path, tiny none (their schemas differ)
            path = smollm2_dir() if model_name == "smollm2_135m" else (mcfg.get("path") or mcfg.get("hub_id"))
            tok = AutoTokenizer.from_pretrained(str(path))
    except Exception:  # noqa: BLE001 - fall back to whitespace words (said in bench.json)
        return None
    return lambda text: len(tok(text, add_special_tokens=False)["input_ids"])
