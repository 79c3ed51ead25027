"""A deterministic, zero-cost chat model for ``suite=memory_systems`` (a measuring instrument).

It answers each memory-construction prompt of the shipped memory systems with a small *valid*
reply derived from the prompt's own text (facts = the new messages' first words, entities = the
capitalised words, an ADD decision, a one-line summary ...), recognised by the prompt's system
message. With the LLM's own time taken out, the suite measures what a memory system itself costs
per conversation: embedding, stores, graph, prompt building, and how many LLM calls it makes and
how many tokens it sends. Tokens are counted with a real tokenizer (SmolLM2's by default), so
tokens/question are those the system would send to that model. Prompts it does not recognise get
a generic reply and are counted in ``unknown`` (reported in bench.json), never silently.
"""
from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any, Callable

from ..llm.base import ChatResult, Message, UsageMeter

WORD = re.compile(r"[A-Za-z][A-Za-z'\-]+")
NAME = re.compile(r"\b[A-Z][a-z]{2,}\b")


def _words(text: str, n: int) -> str:
    return " ".join(text.split()[:n])


def _after(text: str, marker: str) -> str:
    return text.split(marker, 1)[1] if marker in text else text


def _lines(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if ln.strip()]


def _entities(text: str, k: int = 6) -> list[str]:
    return list(dict.fromkeys(NAME.findall(text)))[:k]


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
    def _build_routes(self) -> dict[str, tuple[str, Callable[[str], str]]]:
        """system prompt → (kind, reply(user text)). Prompt modules that are absent are left out."""
        routes: dict[str, tuple[str, Callable[[str], str]]] = {}

        def add(module: str, const: str, kind: str, fn: Callable[[str], str]) -> None:
            try:
                mod = __import__(f"ctxbench.memory.prompts.{module}", fromlist=[const])
                routes[getattr(mod, const)] = (kind, fn)
            except (ImportError, AttributeError):
                pass

        def facts(user: str) -> str:
            new = _lines(_after(user, "NEW MESSAGES"))[1:3]
            new = [ln for ln in new if not ln.startswith("JSON")]
            return json.dumps({"facts": [_words(ln, 12) for ln in new if len(ln.split()) > 2]})

        def update(user: str) -> str:
            fact = _after(user, "NEW FACT: ").split("\n")[0].strip()
            existing = [ln.split(": ", 1)[-1] for ln in _lines(_after(user, "EXISTING MEMORIES:").split("NEW FACT")[0])]
            if fact in existing:
                return json.dumps({"event": "NOOP"})
            return json.dumps({"event": "ADD", "text": fact})

        def summary(user: str) -> str:
            return _words(" ".join(_lines(user)[1:]), 40) or "Nothing happened."

        def entities(user: str) -> str:
            return json.dumps({"entities": _entities(user) or ["conversation"]})

        def relations(user: str) -> str:
            ents = [e.strip() for e in _after(user, "Entities: ").split("\n")[0].split(",") if e.strip()]
            rels = [{"source": a, "relation": "mentioned_with", "target": b} for a, b in zip(ents, ents[1:])]
            return json.dumps({"relations": rels[:4]})

        def note(user: str) -> str:
            body = _after(user, "): ").split("\n\nJSON")[0]
            words = sorted(set(WORD.findall(body)), key=lambda w: (-len(w), w))[:3] or ["chat"]
            return json.dumps({"keywords": words, "context": _words(body, 12) or "a message",
                               "tags": ["conversation"]})

        def evolve(user: str) -> str:
            ids = re.findall(r"^(\w+): ", _after(user, "NEIGHBOURS:"), re.M)
            return json.dumps({"links": ids[:1], "neighbors": []})

        add("mem0", "EXTRACT_SYSTEM", "mem0.extract", facts)
        add("mem0", "UPDATE_SYSTEM", "mem0.update", update)
        add("mem0", "SUMMARY_SYSTEM", "mem0.summary", summary)
        add("mem0g", "ENTITY_SYSTEM", "mem0g.entities", entities)
        add("mem0g", "RELATION_SYSTEM", "mem0g.relations", relations)
        add("mem0g", "CONFLICT_SYSTEM", "mem0g.conflict", lambda u: json.dumps({"outdated": []}))
        add("amem", "NOTE_SYSTEM", "amem.note", note)
        add("amem", "EVOLVE_SYSTEM", "amem.evolve", evolve)
        for const, kind in (("EVENT_SYSTEM", "memorybank.event"), ("PORTRAIT_SYSTEM", "memorybank.portrait"),
                            ("GLOBAL_SYSTEM", "memorybank.global")):
            add("memorybank", const, kind, summary)
        add("rag", "SUMMARY_SYSTEM", "rag.summary", summary)
        return routes

    def reply(self, messages: list[Message], phase: str) -> str:
        system = next((m["content"] for m in messages if m.get("role") == "system"), "")
        user = messages[-1]["content"] if messages else ""
        if phase == "answer":
            self.kinds["answer"] += 1
            ctx = [ln for ln in _lines(user) if ":" in ln]
            return _words(ctx[0].split(":", 1)[1], 8) if ctx else "Not mentioned in the conversation."
        route = self._routes.get(system)
        if route is None:
            self.unknown[_words(system or user, 8)] += 1
            return "{}" if "JSON" in (system + user) else _words(user, 20)
        kind, fn = route
        self.kinds[kind] += 1
        return fn(user)

    # ---- the ChatLLM interface -----------------------------------------------------------------
    def chat(self, messages: list[Message], *, max_new_tokens: int = 64, temperature: float = 0.0,
             phase: str = "answer", json_mode: bool = False) -> ChatResult:
        text = self.reply(messages, phase)
        text = self._truncate(text, max_new_tokens)
        r = ChatResult(text=text, prompt_tokens=sum(self.count_tokens(m["content"]) for m in messages),
                       completion_tokens=self.count_tokens(text))
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
        from omegaconf import OmegaConf

        from ..models.loading import smollm2_dir, tiny_tokenizer

        if model_name == "tiny":
            tok = tiny_tokenizer()
        else:
            from transformers import AutoTokenizer

            from .common import CONF_DIR

            mcfg = OmegaConf.load(CONF_DIR / "model" / f"{model_name}.yaml")
            path = smollm2_dir() if model_name == "smollm2_135m" else (mcfg.get("path") or mcfg.get("hub_id"))
            tok = AutoTokenizer.from_pretrained(str(path))
    except Exception:  # noqa: BLE001 - fall back to whitespace words (said in bench.json)
        return None
    return lambda text: len(tok(text, add_special_tokens=False)["input_ids"])
