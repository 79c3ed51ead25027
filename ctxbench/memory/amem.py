"""A-Mem (Xu et al., 2025; WujiangXu/A-mem): agentic memory as linked notes.

Each turn becomes a note — content, time, LLM-generated keywords, context and tags, an embedding of
all of them, and links. On add, the top-``k_neighbors`` notes are shown to the LLM (ids remapped
to small integers; invented ids rejected and counted), which chooses links for the new note and
evolves neighbours (their context and tags are rewritten and re-embedded; the store keeps the old
values in its change history).

Retrieval follows A-Mem's LoCoMo evaluation (WujiangXu/A-mem ``test_advanced.py``
``advancedMemAgent.answer_question``): the question is first turned into search keywords by one LLM
call (``generate_query_llm``; here a bounded JSON list, phase ``answer``, so it counts in the answer's
calls and tokens), and the keywords, not the question, are embedded as the query
(``query_keywords: false`` searches with the question itself, the earlier behaviour; a reply without
usable keywords falls back to the question, counted as an invalid/truncated structured output). The
top-``k`` notes are taken, ``k`` per LoCoMo category where ``k_by_category`` names one (the paper's
Appendix A.5 Table 8: GPT-4o-mini 40/40/50/50/40 for multi-hop/temporal/open-domain/single-hop/
adversarial), and expanded along links (both directions) by up to ``expand`` more notes
(null = the question's ``k``, as ``memory_layer.py`` ``find_related_memories_raw`` stops at k).

Footprint: a note holds its content and its LLM-generated keywords, context and tags; all of them
count in :meth:`AMem.memory_stats` tokens.
"""
from __future__ import annotations

from typing import Any

from ctxbench.config.schemas.memory import AmemMemory
from ctxbench.core.errors import ConfigError
from ctxbench.core.plan import PlannedEmbed, planned
from ctxbench.metrics.base import LOCOMO_CATEGORIES, canonical_name, category_name
from ctxbench.core.registry import register
from ctxbench.core.types import History, Question

from ctxbench.memory.base import MemorySystem
from ctxbench.memory.prompts import amem as P
from ctxbench.memory.stores.records import Record

def note_text(content: str, meta: dict) -> str:
    """What is embedded: content plus the LLM-generated attributes (as A-Mem does)."""
    return (f"{content} context: {meta.get('context', '')} keywords: {', '.join(meta.get('keywords', []))} "
            f"tags: {', '.join(meta.get('tags', []))}")


def note_attribute_text(meta: dict) -> list[str]:
    """The LLM-generated attributes a note holds besides its content (counted in the footprint)."""
    return [str(meta.get("context", "")), ", ".join(meta.get("keywords", [])), ", ".join(meta.get("tags", []))]


def category_k(mapping: Any) -> dict[str, int]:
    """``k_by_category`` as {category name: k}; keys are names (multi-hop) or LoCoMo ids (1..5)."""
    out: dict[str, int] = {}
    for key, value in dict(mapping or {}).items():
        name = str(key).strip()
        if name.lstrip("-").isdigit():
            name = LOCOMO_CATEGORIES.get(int(name), name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"config key 'memory.k_by_category.{key}' must be an integer >= 1, got {value!r}")
        out[canonical_name(name)] = int(value)
    return out


def show(r: Record) -> str:
    m = r.meta
    return f"[{r.time}] {r.text} (context: {m.get('context', '')}; tags: {', '.join(m.get('tags', []))})"


@register("memory", "amem")
class AMem(MemorySystem):
    Settings = AmemMemory  # its config schema (ctxbench/config/schemas/memory.py)
    name = "amem"

    def __init__(self, cfg: Any, **deps: Any) -> None:
        super().__init__(cfg, **deps)
        self.k = cfg.k
        self.k_neighbors = cfg.k_neighbors
        self.expand = cfg.expand  # None: the question's k
        self.k_by_category = category_k(cfg.k_by_category)
        self.query_keywords = cfg.query_keywords

    def steps(self, history: History) -> list[tuple[int, int]]:
        self._sessions = self.limit(history)
        return [(si, ti) for si, s in enumerate(self._sessions) for ti in range(len(s.turns))]

    def apply(self, step: tuple[int, int], i: int) -> None:
        s = self._sessions[step[0]]
        t = s.turns[step[1]]
        self.add_note(f"{t.speaker} says: {t.text}", s.date, {"turn": t.id, "session": s.id})

    def add_note(self, content: str, time: str, extra: dict | None = None) -> int:
        attrs = self.call(P.note_messages(time, content),
                          P.note_schema(self.cfg.max_keywords, self.cfg.max_tags),
                          kind="note", max_new_tokens=self.cfg.note_max_tokens)
        meta = {"keywords": [], "context": "", "tags": [], "links": [], **(extra or {})}
        if attrs:
            meta.update(attrs)
        emb = self.embed([note_text(content, meta)])[0]
        hits = self.index.search(emb, self.k_neighbors) if self.k_neighbors > 0 else []
        if hits:
            idmap = {str(j): rid for j, (rid, _) in enumerate(hits)}
            shown = [(str(j), show(self.store.get(rid))) for j, (rid, _) in enumerate(hits)]
            d = self.call(P.evolve_messages(f"[{time}] {content} (context: {meta['context']})", shown),
                          P.evolve_schema(list(idmap), self.cfg.max_evolved, self.cfg.max_tags),
                          kind="evolve", max_new_tokens=self.cfg.evolve_max_tokens)
            if d:  # the schema's enums: only ids that were shown
                for key in dict.fromkeys(d["links"]):
                    if idmap[key] not in meta["links"]:
                        meta["links"].append(idmap[key])
                        self.counts["links"] += 1
                for nb in d["neighbors"]:
                    self.evolve(idmap[nb["id"]], nb["context"], nb["tags"])
        return self.add_record("note", content, meta, time, emb=emb)

    def estimate_calls(self, history: History, questions: list[Question]) -> Any:
        """Per turn one note call (exact: a pure function of the turn and its date, so a session shared by
        two haystacks is asked once and served from the call cache after) and, from the second note on,
        one evolve call showing min(k_neighbors, notes so far) neighbours; per question the keyword call
        (exact) and one answer over min(k + expand, notes) notes. A note as shown is its content and date
        plus its LLM context and tags, assumed half their schema's bound in characters / 4; evolutions'
        re-embeddings depend on the model's decisions and are not counted."""
        count = self.llm.count_tokens
        attrs = (P.CONTEXT_CHARS + self.cfg.max_tags * P.WORD_CHARS) // 8  # half their schema bound, 4 chars a token
        schema = P.note_schema(self.cfg.max_keywords, self.cfg.max_tags)
        shown: list[int] = []  # tokens of each note as shown to evolve and answer calls
        for s in self.limit(history):
            for t in s.turns:
                content = f"{t.speaker} says: {t.text}"
                yield planned(self.llm, "construction", P.note_messages(s.date, content), self.cfg.note_max_tokens,
                              "amem.note", schema=schema)
                yield PlannedEmbed(unknown=1, kind="amem.note")
                n = min(self.k_neighbors, len(shown)) if self.k_neighbors > 0 else 0
                if n:
                    ids = [str(j) for j in range(n)]
                    msgs = P.evolve_messages(f"[{s.date}] {content} (context: )", [(j, "") for j in ids])
                    mean = sum(shown) / len(shown)
                    yield planned(self.llm, "construction", msgs, self.cfg.evolve_max_tokens, "amem.evolve",
                                  exact=False, extra_tokens=attrs + int(round(mean * n)),
                                  note=f"{n} neighbours x {mean:.1f} mean note tokens (content + {attrs} for "
                                       "its context and tags)")
                shown.append(count(f"[{s.date}] {content}") + attrs)
        mean = sum(shown) / len(shown) if shown else 0.0
        for q in questions:
            if self.query_keywords:
                yield planned(self.llm, "answer", P.query_messages(q.question), self.cfg.query_max_tokens,
                              "amem.query", schema=P.query_schema(self.cfg.query_max_keywords))
            yield PlannedEmbed(unknown=1, kind="amem.query")
            k = self.k_for(q)
            n = min(k + (k if self.expand is None else int(self.expand)), len(shown))
            yield self.planned_answer(q, int(round(mean * n)) + max(0, n - 1),
                                      f"min(k + expand = {n}, notes) x {mean:.1f} mean note tokens")

    def evolve(self, rid: int, context: str | None, tags: list[str] | None) -> None:
        old = self.store.get(rid)
        meta = dict(old.meta)
        if context:
            meta["context"] = context
        if tags:
            meta["tags"] = list(tags)
        if meta == old.meta:
            return
        emb = self.embed([note_text(old.text, meta)])[0]
        self.store.update(self.hid, rid, meta=meta, emb=emb, op="EVOLVE")
        self.index.add([rid], emb[None, :])
        self.counts["evolutions"] += 1

    def k_for(self, question: Question) -> int:
        """The notes retrieved for this question: its category's ``k_by_category``, else ``k``."""
        return self.k_by_category.get(category_name(question), self.k)

    def query_text(self, question: Question) -> str:
        """What is embedded to search: the LLM's keywords for the question (A-Mem's
        ``generate_query_llm``), or the question when ``query_keywords`` is off or no keywords came."""
        if not self.query_keywords:
            return question.question
        got = self.call(P.query_messages(question.question), P.query_schema(self.cfg.query_max_keywords),
                        kind="query", phase="answer", max_new_tokens=self.cfg.query_max_tokens)
        words = [w.strip() for w in (got or {}).get("keywords", []) if w.strip()]
        return ", ".join(dict.fromkeys(words)) if words else question.question

    def retrieve(self, question: Question) -> str:
        k = self.k_for(question)
        expand = k if self.expand is None else self.expand
        hits = self.search(self.query_text(question), k)
        got = [r for r, _ in hits]
        seen = {r.id for r in got}
        if expand > 0 and got:
            notes = {r.id: r for r in self.store.records(self.hid, "note")}
            back: dict[int, list[int]] = {}
            for r in notes.values():
                for l in r.meta.get("links", []):
                    back.setdefault(l, []).append(r.id)
            extra = []
            for r in got:
                for l in list(r.meta.get("links", [])) + back.get(r.id, []):
                    if l not in seen and l in notes and len(extra) < expand:
                        seen.add(l)
                        extra.append(notes[l])
            got += extra
            self.note_records(extra)  # the linked notes shown after the hits (provenance: their turns)
        return "\n".join(show(r) for r in got)

    def memory_stats(self) -> tuple[int, int]:
        """(notes, tokens): each note's content plus its keywords, context and tags."""
        recs = self.store.records(self.hid)
        count = self.llm.count_tokens
        return len(recs), sum(count(r.text) + sum(count(a) for a in note_attribute_text(r.meta) if a)
                              for r in recs)

    def prompt_version(self) -> str:
        return P.VERSION
