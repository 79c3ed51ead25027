"""RAG baseline: chunks of turns (``chunk_size``/``overlap``) or LLM session summaries, embedded
and retrieved top-``k`` by cosine similarity (exact faiss inner product on normalised vectors).
"""
from __future__ import annotations

from typing import Any

from ctxbench.core.errors import ConfigError
from ctxbench.core.registry import register
from ctxbench.core.types import History, Question, Session

from ctxbench.memory.base import MemorySystem
from ctxbench.memory.prompts import rag as P


def chunk_turns(session: Session, size: int, overlap: int) -> list[tuple[str, list[str]]]:
    """Windows of ``size`` turns advancing by ``size - overlap``; (text, turn ids) each."""
    if size < 1 or not 0 <= overlap < size:
        raise ConfigError(f"memory.chunk_size={size}, memory.overlap={overlap}: need size>=1, 0<=overlap<size")
    turns, out = session.turns, []
    start = 0
    while start < len(turns):
        win = turns[start:start + size]
        head = f"[{session.date}] " if session.date else ""
        out.append((head + "\n".join(f"{t.speaker}: {t.text}" for t in win), [t.id for t in win]))
        if start + size >= len(turns):
            break
        start += size - overlap
    return out


@register("memory", "rag")
class RAG(MemorySystem):
    name = "rag"

    def __init__(self, cfg: Any, **deps: Any) -> None:
        super().__init__(cfg, **deps)
        self.k = cfg.k
        self.granularity = cfg.granularity
        if self.granularity not in ("turns", "session_summary"):
            raise ConfigError(f"memory.granularity={self.granularity!r}: choose 'turns' or 'session_summary'")
        self.size, self.overlap = cfg.chunk_size, cfg.overlap

    def steps(self, history: History) -> list[Session]:
        if not history.sessions:  # a document: treat paragraphs as turns of one session
            from ctxbench.core.types import Turn
            paras = [p for p in history.text.split("\n") if p.strip()]
            return [Session(id="doc", turns=[Turn("", p, str(i)) for i, p in enumerate(paras)])]
        return self.limit(history)

    def apply(self, session: Session, i: int) -> None:
        if self.granularity == "turns":
            chunks = chunk_turns(session, self.size, self.overlap)
            if not chunks:
                return
            embs = self.embed([c[0] for c in chunks])
            for (text, ids), e in zip(chunks, embs):
                self.add_record("chunk", text, {"turns": ids, "session": session.id}, session.date, emb=e)
        else:
            transcript = "\n".join(f"{t.speaker}: {t.text}" for t in session.turns)
            r = self.llm.chat(P.summary_messages(session.date, transcript),
                              max_new_tokens=self.cfg.summary_max_tokens, phase="construction")
            text = f"[{session.date}] {r.text.strip()}"
            self.add_record("summary", text, {"session": session.id}, session.date)

    def retrieve(self, question: Question) -> str:
        hits = self.search(question.question, self.k)
        return "\n".join(r.text for r, _ in hits)

    def prompt_version(self) -> str:
        return P.VERSION
