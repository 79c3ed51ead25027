"""ReadAgent (Lee et al., 2024, arXiv 2402.09727; google-research/read-agent): gist memory with
interactive lookup.

1. **Episode pagination**: the history is a list of paragraphs (one per turn, the first of each
   session dated; a document's lines). From the cursor, paragraphs are added while the page stays
   within ``max_page_tokens``; candidate break labels ``<j>`` are shown between paragraphs once the
   page would hold at least ``min_page_tokens``; the LLM picks one (``{"break": j}``, the schema an
   enum of the labels offered, so another label cannot be generated). Without a usable reply (cut,
   or invalid where nothing enforced the schema) the last label is used, as the reference does for
   a label it cannot use. A rest of the history shorter than ``tail_tokens`` becomes the last page
   without a call.
2. **Gisting**: each page is shortened by the LLM into a gist (construction phase).
3. **Lookup** (answer phase): given all gists ("<Page i> gist") and the question, the LLM names up
   to ``max_lookups`` pages (``{"pages": [2, 7]}``; the schema allows only existing page numbers and
   at most ``max_lookups`` of them).
4. **Answer**: the shared QA prompt over the gist memory with the chosen pages replaced by their
   full text.

One ingestion step = one page (pagination + gist), committed with the cursor, so a rerun resumes.
"""
from __future__ import annotations

from typing import Any, ClassVar

from ctxbench.config.schemas.memory import ReadagentMemory
from ctxbench.core.errors import ConfigError
from ctxbench.core.plan import planned
from ctxbench.qa.forms import question_text
from ctxbench.core.registry import register
from ctxbench.core.types import History, Prediction, Question

from ctxbench.memory.base import MemorySystem
from ctxbench.memory.prompts import readagent as P
from ctxbench.memory.stores.retrieval_notes import note_retrieval


def paragraphs_of(history: History, max_sessions: int | None = None) -> list[tuple[str, str]]:
    """(text, date) per paragraph: one per turn, each session's first turn headed by its date."""
    if not history.sessions:
        return [(p.strip(), "") for p in history.text.split("\n") if p.strip()]
    sessions = history.sessions[: int(max_sessions)] if max_sessions else history.sessions
    out = []
    for s in sessions:
        for i, t in enumerate(s.turns):
            line = f"{t.speaker}: {t.text}" if t.speaker else t.text
            if i == 0 and s.date:
                line = f"DATE: {s.date}\n{line}"
            out.append((line, s.date))
    return out


def paragraph_sources(history: History, max_sessions: int | None = None) -> list[tuple[str | None, str]]:
    """(session id, turn id) of each paragraph of :func:`paragraphs_of` (a document's: (None, ""))."""
    if not history.sessions:
        return [(None, "") for p in history.text.split("\n") if p.strip()]
    sessions = history.sessions[: int(max_sessions)] if max_sessions else history.sessions
    return [(s.id, t.id) for s in sessions for t in s.turns]


@register("memory", "readagent")
class ReadAgent(MemorySystem):
    Settings = ReadagentMemory  # its config schema (ctxbench/config/schemas/memory.py)
    name = "readagent"
    needs_embedder: ClassVar[bool] = False  # pages and gists are read by the LLM: nothing is embedded

    def __init__(self, cfg: Any, **deps: Any) -> None:
        super().__init__(cfg, **deps)
        self.max_page = cfg.max_page_tokens
        self.min_page = cfg.min_page_tokens
        if not 0 < self.min_page <= self.max_page:
            raise ConfigError(f"memory.min_page_tokens={self.min_page}, memory.max_page_tokens={self.max_page}: "
                              "need 0 < min <= max")
        self.tail = cfg.tail_tokens
        self.preceding = cfg.preceding_tokens
        self.max_lookups = cfg.max_lookups
        if self.max_lookups < 0:
            raise ConfigError(f"memory.max_lookups={self.max_lookups}: need >= 0")
        self.cursor = 0

    # ---- ingestion ---------------------------------------------------------------------------------
    def reset(self) -> None:
        super().reset()
        self.cursor = 0

    def load(self) -> None:
        super().load()
        self.cursor = int(self.store.get_state(self.hid, "readagent", {}).get("cursor", 0))

    def save_state(self) -> None:
        self.store.set_state(self.hid, "readagent", {"cursor": self.cursor})

    def steps(self, history: History) -> list[int]:
        """One slot per paragraph (an upper bound on pages); slots after the last page do nothing."""
        self._paras = paragraphs_of(history, self.cfg.max_sessions)
        self._src = paragraph_sources(history, self.cfg.max_sessions)
        self._tok = [self.llm.count_tokens(p) for p, _ in self._paras]
        return list(range(len(self._paras)))

    def apply(self, step: int, i: int) -> None:
        if self.cursor >= len(self._paras):
            return
        start = self.cursor
        end = self.paginate(start)
        text = "\n".join(p for p, _ in self._paras[start:end])
        n = len(self.store.records(self.hid, "page"))
        date = self._paras[start][1]
        src = self._src[start:end]  # provenance: the sessions and turns of the page's paragraphs
        sessions = list(dict.fromkeys(sid for sid, _ in src if sid is not None))
        meta = {"page": n, "start": start, "end": end, "date": date, "turns": [tid for _, tid in src if tid],
                "sessions": sessions}
        self.add_record("page", text, meta, date, index=False)
        r = self.llm.chat(P.gist_messages(text), max_new_tokens=self.cfg.gist_max_tokens,
                          temperature=0.0, phase="construction")
        gist = r.text.strip()
        if not gist or r.failed:
            self.counts["empty_gists"] += 1
            gist = text  # no gist: the page stands for itself (counted)
        self.add_record("gist", gist, {"page": n, "date": date}, date, index=False)
        self.cursor = end

    def paginate(self, i: int) -> int:
        """End (exclusive) of the page starting at paragraph ``i``: LLM-chosen among the labels."""
        end, msgs, labels = self.offer(i, self._prev_start(i) if i > 0 else None)
        if end is not None:
            return end
        got = self.call(msgs, P.break_schema(labels), kind="break", max_new_tokens=self.cfg.break_max_tokens)
        self.counts["pagination_calls"] += 1
        return labels[-1] if got is None else int(got["break"])

    def offer(self, i: int, prev_start: int | None) -> tuple[int | None, list[dict[str, str]], list[int]]:
        """What pagination offers from paragraph ``i`` (the previous page starting at ``prev_start``):
        (the end when no choice is left — one label, or a short rest — else None; the pagination
        prompt; the labels). A pure function of the paragraphs (the estimate plans with it too)."""
        N = len(self._paras)
        passage, labels, used, j = [self._paras[i][0]], [], self._tok[i], i + 1
        while j < N and used + self._tok[j] <= self.max_page:
            if used >= self.min_page:
                passage.append(f"<{j}>")
                labels.append(j)
            passage.append(self._paras[j][0])
            used += self._tok[j]
            j += 1
        passage.append(f"<{j}>")
        labels.append(j)
        if j == N and used <= max(self.tail, 0) or len(labels) == 1:
            return j, [], labels
        preceding = ""
        if prev_start is not None:
            prev = "\n".join(p for p, _ in self._paras[prev_start:i]).split("\n")
            if self.preceding is not None:
                prev = self._clip_end(prev, int(self.preceding))
            preceding = "\n".join(prev)
        following = self._paras[j][0] if j < N else ""
        return None, P.pagination_messages(preceding, "\n".join(passage), following), labels

    def _prev_start(self, i: int) -> int:
        pages = self.store.records(self.hid, "page")
        return int(pages[-1].meta["start"]) if pages else max(0, i - 1)

    def _clip_end(self, lines: list[str], budget: int) -> list[str]:
        out, used = [], 0
        for line in reversed(lines):
            n = self.llm.count_tokens(line) + 1
            if used + n > budget:
                break
            out.append(line)
            used += n
        return list(reversed(out))

    # ---- the estimate (eval estimate=true) ---------------------------------------------------------
    BREAK_RULE = "the break assumed at the middle label offered (labels[len // 2])"

    def estimate_calls(self, history: History, questions: list[Question]) -> Any:
        """Pagination replayed with :meth:`offer` (the prompts :meth:`paginate` sends): a page whose end
        is forced (one label, or a rest within ``tail_tokens``) makes no pagination call; otherwise one
        call, its break assumed at the middle label offered. Prompts are exact while every earlier break
        was forced (then they are a pure function of the history); after the first chosen break they
        follow the rule. One gist call per page (its prompt the page's text). A gist as shown later is
        assumed min(:meth:`output_tokens` of its cap, the page's tokens). Per question one look-up call
        over every page's gist and one answer over the gists with min(max_lookups, pages) pages of the
        mean page's tokens in full (the model assumed to use every look-up: an upper bound), each cut
        to the room :meth:`memory_text` has."""
        self.steps(history)
        count = self.llm.count_tokens
        half_gist = self.output_tokens(self.cfg.gist_max_tokens)
        blocks: list[int] = []  # tokens of each page's block as a gist (header + assumed gist + newline)
        full: list[int] = []  # tokens of each page's block in full
        start, prev, settled, N = 0, None, True, len(self._paras)
        while start < N:
            end, msgs, labels = self.offer(start, prev)
            chosen = end is None
            if chosen:
                yield planned(self.llm, "construction", msgs, self.cfg.break_max_tokens, "readagent.break",
                              schema=P.break_schema(labels), exact=settled,
                              note="" if settled else self.BREAK_RULE)
                end = labels[len(labels) // 2]
            text = "\n".join(p for p, _ in self._paras[start:end])
            settled = settled and not chosen
            yield planned(self.llm, "construction", P.gist_messages(text), self.cfg.gist_max_tokens,
                          "readagent.gist", exact=settled, note="" if settled else self.BREAK_RULE)
            head = count(self.block(len(blocks), self._paras[start][1], "")) + 1
            blocks.append(head + min(half_gist, count(text)))
            full.append(head + count(text))
            prev, start = start, end
        n = min(self.max_lookups, len(blocks))
        extra = (sum(full) - sum(blocks)) / len(blocks) * n if blocks else 0.0
        rule = (f"{len(blocks)} gists of min({half_gist}, page) tokens + {n} looked-up pages in full "
                f"(mean page {sum(full) / max(1, len(full)):.1f} tokens); pages: {self.BREAK_RULE}")
        for q in questions:
            qtext = question_text(q)
            if self.max_lookups and blocks:
                mt = self.cfg.lookup_max_tokens
                empty = P.lookup_messages("", qtext, self.max_lookups)
                yield planned(self.llm, "answer", empty, mt, "readagent.lookup",
                              schema=P.pages_schema(len(blocks), self.max_lookups), exact=False,
                              extra_tokens=max(0, min(sum(blocks), self._room(empty, mt))),
                              note=f"{len(blocks)} gists of min({half_gist}, page) tokens")
            room = self._room(self.answer_messages("", q), self.answer_max_tokens())
            yield self.planned_answer(q, max(0, min(int(round(sum(blocks) + extra)), room)), rule)

    # ---- lookup and answer -------------------------------------------------------------------------
    def pages(self) -> list[tuple[str, str, str]]:
        """(page text, gist, date) in page order."""
        gists = {r.meta["page"]: r.text for r in self.store.records(self.hid, "gist")}
        return [(r.text, gists.get(r.meta["page"], ""), r.meta.get("date", ""))
                for r in sorted(self.store.records(self.hid, "page"), key=lambda r: r.meta["page"])]

    @staticmethod
    def block(p: int, date: str, body: str) -> str:
        return f"<Page {p}>{f' ({date})' if date else ''}\n{body}"

    def _room(self, empty: list[dict[str, str]], max_new_tokens: int) -> int:
        """Tokens left for the memory text in a prompt whose other parts are ``empty``."""
        used = sum(self.llm.count_tokens(m["content"]) + 8 for m in empty)
        return self.llm.context_window - max_new_tokens - used - 16

    def memory_text(self, pages: list[tuple[str, str, str]], expand: set[int], room: int) -> tuple[str, int]:
        """Gists with the ``expand`` pages in full, oldest gists dropped if over ``room``; (text, dropped)."""
        blocks = [self.block(p, d, full if p in expand else g) for p, (full, g, d) in enumerate(pages)]
        sizes = [self.llm.count_tokens(b) + 1 for b in blocks]
        keep, dropped = list(range(len(blocks))), 0
        while keep and sum(sizes[k] for k in keep) > room:
            victim = next((k for k in keep if k not in expand), keep[0])
            keep.remove(victim)
            dropped += 1
        return "\n".join(blocks[k] for k in keep), dropped

    def lookup(self, question: Question) -> tuple[list[int], dict[str, Any]]:
        """Ask which pages to read again: (the valid page numbers, at most ``max_lookups``; what the
        look-up noted: gists dropped to fit, the pages asked for, whether the reply was unusable)."""
        pages = self.pages()
        if self.max_lookups == 0 or not pages:
            return [], {}
        note_retrieval(self.max_lookups, len(pages))  # the top_k guard: every page may be read in full
        mt = self.cfg.lookup_max_tokens
        qtext = question_text(question)
        room = self._room(P.lookup_messages("", qtext, self.max_lookups), mt)
        gists, dropped = self.memory_text(pages, set(), room)
        got = self.call(P.lookup_messages(gists, qtext, self.max_lookups),
                        P.pages_schema(len(pages), self.max_lookups), kind="lookup", phase="answer",
                        max_new_tokens=mt)
        asked = [int(p) for p in got["pages"]] if got else []
        noted = {"lookup_dropped_gists": dropped, "asked_pages": asked, "lookup_unparsed": int(got is None)}
        return list(dict.fromkeys(asked)), noted

    def retrieve_noted(self, question: Question) -> tuple[str, dict[str, Any]]:
        """The gists with the looked-up pages in full, and what this question's look-up noted (kept in
        this call: a history's questions may be answered side by side on this instance)."""
        chosen, noted = self.lookup(question)
        pages = self.pages()
        records = sorted(self.store.records(self.hid, "page"), key=lambda r: r.meta["page"])
        self.note_records([records[p] for p in chosen if 0 <= p < len(records)])  # the pages read again
        room = self._room(self.answer_messages("", question), self.answer_max_tokens())
        text, dropped = self.memory_text(pages, set(chosen), room)
        return text, {**noted, "looked_up": sorted(chosen), "dropped_gists": dropped, "pages": len(pages)}

    def retrieve(self, question: Question) -> str:
        return self.retrieve_noted(question)[0]

    def answer(self, question: Question) -> Prediction:
        pred = super().answer(question)
        pred.meta.update({k: v for k, v in pred.usage.extra.items() if k in ("looked_up", "asked_pages")})
        return pred

    def prompt_version(self) -> str:
        return P.VERSION
