"""RAG baseline: chunks of turns (``chunk_size``/``overlap``) or LLM session summaries, embedded
and retrieved top-``k`` by cosine similarity (exact faiss inner product on normalised vectors).

Under ``task=compression`` (:meth:`RAG.set_compression_ratio`) "retrieved memory" sits on the same
axis as the compression methods: the retrieved text is cut to ceil((1 − r) × the history's tokens),
counted by the answering backend (hits kept whole in rank order, the first that does not fit cut
at the budget), so the reader holds at most that many tokens of the history.
"""
from __future__ import annotations

from typing import Any, Callable

from ctxbench.config.schemas.memory import RagMemory
from ctxbench.core.errors import ConfigError
from ctxbench.core.plan import PlannedEmbed, planned
from ctxbench.core.registry import register
from ctxbench.core.task_protocol import check_ratio, ratio_budget, ratio_extra
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


def cap_tokens(texts: list[str], budget: int, count: Callable[[str], int], sep: str = "\n") -> str:
    """``texts`` joined by ``sep``, in order, cut so that ``count`` of the result is at most ``budget``:
    whole texts while they fit, then the longest prefix of the next one that fits (by bisection on
    characters), then nothing more."""
    out = ""
    for text in texts:
        joined = out + (sep if out else "") + text
        if count(joined) <= budget:
            out = joined
            continue
        lo, hi = 0, len(text)  # the longest prefix of `text` that still fits
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if count(out + (sep if out else "") + text[:mid]) <= budget:
                lo = mid
            else:
                hi = mid - 1
        if text[:lo].strip():
            out = out + (sep if out else "") + text[:lo].rstrip()
        break
    return out


@register("memory", "rag")
class RAG(MemorySystem):
    Settings = RagMemory  # its config schema (ctxbench/config/schemas/memory.py)
    name = "rag"

    def __init__(self, cfg: Any, **deps: Any) -> None:
        super().__init__(cfg, **deps)
        self.k = cfg.k
        self.granularity = cfg.granularity
        if self.granularity not in ("turns", "session_summary"):
            raise ConfigError(f"memory.granularity={self.granularity!r}: choose 'turns' or 'session_summary'")
        self.size, self.overlap = cfg.chunk_size, cfg.overlap
        self._ratio: float | None = None  # task=compression
        self._budget: int | None = None

    def set_compression_ratio(self, ratio: float) -> None:
        """From now on the retrieved text is cut to ceil((1 − ratio) × the history's tokens)."""
        self._ratio = check_ratio(ratio, "compression ratio")

    def ingest(self, history: History) -> None:
        super().ingest(history)
        if self._ratio is not None:  # the history's tokens as the full-context baseline renders them
            from ctxbench.core.render import render_history

            self._budget = ratio_budget(self._ratio, int(self.llm.count_tokens(render_history(history, "locomo"))))

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
            embs = self.embed([self.embedded_text(c[0], session) for c in chunks])
            for (text, ids), e in zip(chunks, embs):
                self.add_record("chunk", text, {"turns": ids, "session": session.id}, session.date, emb=e)
        else:
            transcript = "\n".join(f"{t.speaker}: {t.text}" for t in session.turns)
            r = self.llm.chat(P.summary_messages(session.date, transcript),
                              max_new_tokens=self.cfg.summary_max_tokens, phase="construction")
            text = f"[{session.date}] {r.text.strip()}"
            self.add_record("summary", text, {"session": session.id}, session.date)

    def embedded_text(self, chunk: str, session: Session) -> str:
        """The text a chunk is embedded as: the chunk as the reader sees it, or without its ``[date]`` head
        with ``memory.embed_dates=false`` (LongMemEval dates a shared session anew in each haystack, so only
        an undated chunk is embedded once per distinct session; LongMemEval's own retrieval embeds it so)."""
        head = f"[{session.date}] " if session.date else ""
        return chunk[len(head):] if head and not self.cfg.embed_dates and chunk.startswith(head) else chunk

    def estimate_calls(self, history: History, questions: list[Question]) -> Any:
        """Chunks (embedded, exact texts) or one summary call per session (exact prompts); per question one
        query embedding and one answer holding min(k, items) items of the mean item's tokens (a summary:
        :meth:`output_tokens` of its cap plus its date)."""
        sessions = self.steps(history)
        count = self.llm.count_tokens
        if self.granularity == "turns":
            chunks = [(c[0], s) for s in sessions for c in chunk_turns(s, self.size, self.overlap)]
            texts = [text for text, _ in chunks]
            yield PlannedEmbed(tuple(self.embedded_text(text, s) for text, s in chunks), kind="rag.chunk")
            sizes = [count(t) for t in texts]
        else:
            sizes = []
            for s in sessions:
                transcript = "\n".join(f"{t.speaker}: {t.text}" for t in s.turns)
                yield planned(self.llm, "construction", P.summary_messages(s.date, transcript),
                              self.cfg.summary_max_tokens, "rag.summary")
                sizes.append(count(f"[{s.date}] ") + self.output_tokens(self.cfg.summary_max_tokens))
            yield PlannedEmbed(unknown=len(sessions), kind="rag.summary")
        mean = sum(sizes) / len(sizes) if sizes else 0.0
        shown = min(int(self.k), len(sizes))
        context = int(round(mean * shown)) + max(0, shown - 1)
        rule = f"min(k={self.k}, {len(sizes)} items) x {mean:.1f} mean item tokens"
        if self._ratio is not None:  # task=compression: cut to the history's budget (:meth:`ingest`)
            from ctxbench.core.render import render_history

            budget = ratio_budget(self._ratio, int(self.llm.count_tokens(render_history(history, "locomo"))))
            context = min(context, budget)
            rule += f", at most ceil((1 - {self._ratio:g}) x history tokens)"
        for q in questions:
            yield PlannedEmbed((q.question,), kind="rag.query")
            yield self.planned_answer(q, context, rule)

    def retrieve(self, question: Question) -> str:
        hits = [r.text for r, _ in self.search(question.question, self.k)]
        if self._ratio is None:
            return "\n".join(hits)
        return cap_tokens(hits, int(self._budget or 0), self.llm.count_tokens)

    def retrieve_noted(self, question: Question) -> tuple[str, dict[str, Any]]:
        return self.retrieve(question), ratio_extra(self._ratio, self._budget)

    def prompt_version(self) -> str:
        return P.VERSION
