"""A-Mem (Xu et al., 2025; WujiangXu/A-mem): agentic memory as linked notes.

Each turn becomes a note — content, time, LLM-generated keywords, context and tags, an embedding of
all of them, and links. On add, the top-``k_neighbors`` notes are shown to the LLM (ids remapped
to small integers; invented ids rejected and counted), which chooses links for the new note and
evolves neighbours (their context and tags are rewritten and re-embedded; the store keeps the old
values in its change history). Retrieval takes the top-``k`` notes and expands along links (both
directions) by up to ``expand`` more notes.
"""
from __future__ import annotations

from typing import Any

from ctxbench.registry import register
from ctxbench.types import History, Question

from .base import MemorySystem
from .prompts import amem as P
from .stores.records import Record

def note_text(content: str, meta: dict) -> str:
    """What is embedded: content plus the LLM-generated attributes (as A-Mem does)."""
    return (f"{content} context: {meta.get('context', '')} keywords: {', '.join(meta.get('keywords', []))} "
            f"tags: {', '.join(meta.get('tags', []))}")


def show(r: Record) -> str:
    m = r.meta
    return f"[{r.time}] {r.text} (context: {m.get('context', '')}; tags: {', '.join(m.get('tags', []))})"


@register("memory", "amem")
class AMem(MemorySystem):
    name = "amem"

    def __init__(self, cfg: Any, **deps: Any) -> None:
        super().__init__(cfg, **deps)
        self.k_neighbors = int(cfg.get("k_neighbors", 5))
        self.expand = int(cfg.get("expand", self.k))

    def steps(self, history: History) -> list[tuple[int, int]]:
        self._sessions = self.limit(history)
        return [(si, ti) for si, s in enumerate(self._sessions) for ti in range(len(s.turns))]

    def apply(self, step: tuple[int, int], i: int) -> None:
        s = self._sessions[step[0]]
        t = s.turns[step[1]]
        self.add_note(f"{t.speaker} says: {t.text}", s.date, {"turn": t.id})

    def add_note(self, content: str, time: str, extra: dict | None = None) -> int:
        attrs = self.call(P.note_messages(time, content),
                          P.note_schema(int(self.cfg.get("max_keywords", 5)), int(self.cfg.get("max_tags", 4))),
                          kind="note", max_new_tokens=int(self.cfg.get("note_max_tokens", 256)))
        meta = {"keywords": [], "context": "", "tags": [], "links": [], **(extra or {})}
        if attrs:
            meta.update(attrs)
        emb = self.embed([note_text(content, meta)])[0]
        hits = self.index.search(emb, self.k_neighbors) if self.k_neighbors > 0 else []
        if hits:
            idmap = {str(j): rid for j, (rid, _) in enumerate(hits)}
            shown = [(str(j), show(self.store.get(rid))) for j, (rid, _) in enumerate(hits)]
            d = self.call(P.evolve_messages(f"[{time}] {content} (context: {meta['context']})", shown),
                          P.evolve_schema(list(idmap), int(self.cfg.get("max_evolved", 2)),
                                          int(self.cfg.get("max_tags", 4))),
                          kind="evolve", max_new_tokens=int(self.cfg.get("evolve_max_tokens", 384)))
            if d:  # the schema's enums: only ids that were shown
                for key in dict.fromkeys(d["links"]):
                    if idmap[key] not in meta["links"]:
                        meta["links"].append(idmap[key])
                        self.counts["links"] += 1
                for nb in d["neighbors"]:
                    self.evolve(idmap[nb["id"]], nb["context"], nb["tags"])
        return self.add_record("note", content, meta, time, emb=emb)

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

    def retrieve(self, question: Question) -> str:
        hits = self.search(question.question, self.k)
        got = [r for r, _ in hits]
        seen = {r.id for r in got}
        if self.expand > 0 and got:
            notes = {r.id: r for r in self.store.records(self.hid, "note")}
            back: dict[int, list[int]] = {}
            for r in notes.values():
                for l in r.meta.get("links", []):
                    back.setdefault(l, []).append(r.id)
            extra = []
            for r in got:
                for l in list(r.meta.get("links", [])) + back.get(r.id, []):
                    if l not in seen and l in notes and len(extra) < self.expand:
                        seen.add(l)
                        extra.append(notes[l])
            got += extra
        return "\n".join(show(r) for r in got)

    def prompt_version(self) -> str:
        return P.VERSION
