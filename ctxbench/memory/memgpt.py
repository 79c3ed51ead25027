"""MemGPT (Packer et al., 2023, arXiv 2310.08560; letta-ai/letta's original ``memgpt`` code):
virtual context management for a model with a small window.

Main context = system instructions + a *working context* (core memory) the model edits itself + a
FIFO queue of recent messages (sized in tokens with the llm's tokenizer), headed by a recursive
summary. While the history is ingested, every message goes to *recall storage* (all messages,
SQLite FTS5 keyword search: ``conversation_search``) and into the FIFO. The queue manager then
follows the paper's §2.2 (letta ``memgpt/agent.py`` / ``memgpt/constants.py``):

- **memory pressure**: when the FIFO first exceeds ``warn_frac`` of ``fifo_tokens`` (paper: 70% of
  the context window; letta's ``MESSAGE_SUMMARY_WARNING_FRAC`` is 0.75) a system alert is put into
  the main context (``MESSAGE_SUMMARY_WARNING_STR``: save what matters before the history is
  trimmed) and the agent gets up to ``pressure_steps`` function calls (construction phase):
  ``archival_memory_insert``, ``core_memory_append``, ``core_memory_replace`` or ``done``. *Archival
  storage* (embedded, faiss vector search) holds only what the agent inserts this way.
- **flush**: when the FIFO exceeds ``fifo_tokens`` (paper: 100% of the window) the oldest messages
  are evicted until ``evict_frac`` of the budget is free and a new summary is written from the
  previous summary plus the evicted messages (one LLM call). Evicted messages stay in recall
  storage (they were written there on arrival), searchable by ``conversation_search``; they are
  not copied anywhere else. ``archive_evicted: true`` keeps ctxbench's earlier behaviour (evicted
  turns also embedded into archival storage automatically), which is not MemGPT's.

``fifo_tokens`` is capped at what the window leaves beside the main context's fixed part (system
prompt, working context, summary, one step's room: :meth:`MemGPT.window_fifo`), so the paper
setting passes the model's context window (``${llm.context_window}``) and gets MemGPT's "flush at
100% of the window".

Answering pages: the model replies with one JSON function call per step —
``archival_memory_search``, ``conversation_search``, ``core_memory_append``,
``core_memory_replace`` or ``send_message`` (the answer) — for up to ``max_steps`` steps. One JSON
Schema covers every call shape (:func:`.prompts.memgpt.call_schema`) and the backend decodes under
it; a step without a usable call (cut at ``step_max_tokens``, or invalid where nothing enforced the
schema) is counted and answered with an error; if no
``send_message`` comes, a best-effort answer is asked with the shared QA prompt over what the
model saw (working context, summary, search results, FIFO). Every call is counted per phase.

Footprint (``memory_items`` / ``memory_tokens``): every message once (recall storage; the FIFO is a
view of it, not a second copy), the archival passages, and the working context and summary held in
state (:meth:`MemGPT.memory_stats`).
"""
from __future__ import annotations

import json
import logging
import re
from typing import Any

from ctxbench.config.schemas.memory import MemgptMemory
from ctxbench.core.errors import ConfigError
from ctxbench.core.plan import PlannedEmbed, planned
from ctxbench.qa.forms import question_text
from ctxbench.core.registry import register
from ctxbench.core.types import History, Prediction, Question, Session
from ctxbench.llm.fit import held_text_tokens

from ctxbench.memory.base import MemorySystem
from ctxbench.memory.prompts import memgpt as P
from ctxbench.memory.stores.retrieval_notes import noting_retrieved
from ctxbench.memory.stores.structured import output_counts, own_counts

FTS_TABLE = "memgpt_recall"
log = logging.getLogger(__name__)


def fts_query(text: str) -> str:
    """An FTS5 MATCH expression: any of the query's words (quoted, so no syntax errors)."""
    words = list(dict.fromkeys(w for w in re.findall(r"\w+", text.lower()) if len(w) > 1))
    return " OR ".join(f'"{w}"' for w in words[:32])


@register("memory", "memgpt")
class MemGPT(MemorySystem):
    Settings = MemgptMemory  # its config schema (ctxbench/config/schemas/memory.py)
    name = "memgpt"

    def __init__(self, cfg: Any, **deps: Any) -> None:
        super().__init__(cfg, **deps)
        self.fifo_tokens = cfg.fifo_tokens
        self.evict_frac = float(cfg.evict_frac)
        if not 0.0 < self.evict_frac <= 1.0:
            raise ConfigError(f"memory.evict_frac={self.evict_frac}: need 0 < evict_frac <= 1")
        if self.fifo_tokens < 1:
            raise ConfigError(f"memory.fifo_tokens={self.fifo_tokens}: need >= 1")
        self.warn_frac = float(cfg.warn_frac)
        if not 0.0 < self.warn_frac <= 1.0:
            raise ConfigError(f"memory.warn_frac={self.warn_frac}: need 0 < warn_frac <= 1")
        self.pressure_steps = cfg.pressure_steps
        if self.pressure_steps < 0:
            raise ConfigError(f"memory.pressure_steps={self.pressure_steps}: need >= 0 (0 = no warning step)")
        self.archive_evicted = cfg.archive_evicted
        self.max_steps = cfg.max_steps
        if self.max_steps < 1:
            raise ConfigError(f"memory.max_steps={self.max_steps}: need >= 1")
        self.archival_k = cfg.archival_k
        self.recall_k = cfg.recall_k
        self.working_max_tokens = cfg.working_max_tokens
        self.result_max_tokens = cfg.result_max_tokens
        self.step_max_tokens = cfg.step_max_tokens
        self.summary_words = cfg.summary_words
        room = self.window_fifo()
        if self.fifo_tokens > room:
            log.info("memory=memgpt: fifo_tokens=%d capped at %d (llm.context_window=%d less the main context's "
                     "fixed part)", self.fifo_tokens, room, self.llm.context_window)
            self.fifo_tokens = room
        if self.fifo_tokens < 1:
            raise ConfigError(f"memory=memgpt: llm.context_window={self.llm.context_window} leaves no room for "
                              "the FIFO beside the main context (lower memory.working_max_tokens, "
                              "summary_max_tokens, result_max_tokens or step_max_tokens)")
        self.fifo: list[dict[str, Any]] = []
        self.summary, self.working = "", ""
        self.warned = False  # a memory-pressure alert was given since the last flush
        self._loaded = False
        self.store.conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS {FTS_TABLE} USING "
                                "fts5(text, hid UNINDEXED, rid UNINDEXED, tokenize='porter unicode61')")
        self.store.commit()

    def window_fifo(self) -> int:
        """The FIFO room the window leaves beside the main context's fixed part: the system prompt
        (the longer of the answer and memory-pressure ones), a full working context and summary,
        and one step's call and results (the paper flushes when the whole prompt reaches the window)."""
        fixed = max(sum(self.llm.count_tokens(m["content"]) for m in msgs) for msgs in (
            P.agent_messages("", "", "", "", self.max_steps), P.pressure_messages("", "", "", self.pressure_steps)))
        summary = self.cfg.summary_max_tokens
        step = self.step_max_tokens + 2 * (self.result_max_tokens + 40) + 32
        return self.llm.context_window - fixed - self.working_max_tokens - summary - step

    # ---- state -----------------------------------------------------------------------------------
    def reset(self) -> None:
        super().reset()
        self.fifo, self.summary, self.working, self.warned, self._loaded = [], "", "", False, False

    def load(self) -> None:
        super().load()
        if self.store.progress(self.hid) == 0:  # fresh build: drop recall rows of an earlier one
            self.store.conn.execute(f"DELETE FROM {FTS_TABLE} WHERE hid=?", (self.hid,))
        st = self.store.get_state(self.hid, "memgpt")
        if st:
            self.fifo, self.summary, self.working = st["fifo"], st["summary"], st["working"]
            self.warned = bool(st.get("warned", False))
            self._loaded = True

    def save_state(self) -> None:
        self.store.set_state(self.hid, "memgpt", {"fifo": self.fifo, "summary": self.summary,
                                                  "working": self.working, "warned": self.warned})

    # ---- ingestion -------------------------------------------------------------------------------
    def steps(self, history: History) -> list[tuple[int, int | None]]:
        """(session, None) marks a session start (a dated event message), then (session, turn)."""
        self._sessions = self.limit(history)
        if not history.sessions:  # a document: paragraphs as messages of one session
            from ctxbench.core.types import Turn
            paras = [p for p in history.text.split("\n") if p.strip()]
            self._sessions = [Session(id="doc", turns=[Turn("", p, str(i)) for i, p in enumerate(paras)])]
        if not self._loaded:
            who = " and ".join(history.speakers) if history.speakers else "two people"
            self.working = f"I answer questions about a conversation between {who}."
        out: list[tuple[int, int | None]] = []
        for si, s in enumerate(self._sessions):
            out.append((si, None))
            out.extend((si, ti) for ti in range(len(s.turns)))
        return out

    def fifo_size(self) -> int:
        return sum(int(m["tokens"]) for m in self.fifo)

    def message(self, step: tuple[int, int | None]) -> tuple[str, str, str]:
        """(text, turn id, kind) of the message step ``step`` puts into the FIFO: a session start is a
        dated event, a turn its speaker and text."""
        si, ti = step
        s = self._sessions[si]
        if ti is None:
            return f"[new session: {s.date or s.id}]", "", "event"
        t = s.turns[ti]
        return (f"{t.speaker}: {t.text}" if t.speaker else t.text), t.id, "turn"

    def apply(self, step: tuple[int, int | None], i: int) -> None:
        s = self._sessions[step[0]]
        text, tid, kind = self.message(step)
        rid = self.add_record("message", text, {"turn": tid, "session": s.id, "date": s.date}, s.date, index=False)
        dated = f"[{s.date}] {text}" if s.date and kind == "turn" else text
        self.store.conn.execute(f"INSERT INTO {FTS_TABLE}(text, hid, rid) VALUES (?,?,?)", (dated, self.hid, rid))
        self.fifo.append({"text": text, "date": s.date, "kind": kind, "rid": rid,
                          "tokens": self.llm.count_tokens(text)})
        if not self.warned and self.fifo_size() > self.warn_frac * self.fifo_tokens:
            self.warned = True
            self.memory_pressure()
        if self.fifo_size() > self.fifo_tokens:
            self.flush()

    def memory_pressure(self) -> None:
        """The warning before a flush: the agent sees its main context and an alert, and may save
        to archival or core memory with up to ``pressure_steps`` calls (construction phase)."""
        if self.pressure_steps == 0:
            return
        msgs = P.pressure_messages(self.working, self.summary, self.render(self.fifo), self.pressure_steps)
        self.counts["pressure_warnings"] += 1
        for step in range(self.pressure_steps):
            left = self.pressure_steps - step - 1
            call = self.call(self.fit(msgs), P.pressure_schema(), kind="pressure_call", phase="construction",
                             max_new_tokens=self.step_max_tokens, retries=0)
            if call is None:
                self.counts["invalid_pressure_calls"] += 1
                msgs = msgs + [P.error_message(self.call.last_error, left)]
                continue
            name, args = call["function"], call["args"]
            self.counts[f"pressure_{name}"] += 1
            if name == "done":
                break
            if name == "archival_memory_insert":
                result = self.archival_insert(args["content"])
            else:  # the step's commit saves the state
                result, self.working = self.execute(name, args, self.working)
            msgs = msgs + [{"role": "assistant", "content": json.dumps(call)}, P.result_message(name, result, left)]

    def archival_insert(self, content: str) -> str:
        """``archival_memory_insert``: the agent's own passage, dated with the newest message's session."""
        date = next((m["date"] for m in reversed(self.fifo) if m["date"]), "")
        self.add_record("archival", content.strip(), {"source": "agent"}, date)
        return "OK. Saved to archival memory."

    def flush(self) -> None:
        """Queue manager: evict the oldest messages (they stay in recall storage), summarise recursively."""
        evicted = self.evict()
        if not evicted:
            return
        r = self.llm.chat(P.summary_messages(self.summary, self.render(evicted), self.summary_words),
                          max_new_tokens=self.cfg.summary_max_tokens, temperature=0.0,
                          phase="construction")
        if r.text.strip() and not r.failed:
            self.summary = r.text.strip()
        else:
            self.counts["empty_summaries"] += 1
        turns = [m for m in evicted if m["kind"] == "turn"] if self.archive_evicted else []
        if turns:  # archive_evicted: ctxbench's earlier automatic archive (not MemGPT's)
            texts = [f"[{m['date']}] {m['text']}" if m["date"] else m["text"] for m in turns]
            for m, text, e in zip(turns, texts, self.embed(texts)):
                self.add_record("archival", text, {"message": m["rid"]}, m["date"], emb=e)
        self.counts["flushes"] += 1
        self.counts["evicted_messages"] += len(evicted)
        self.warned = False

    def evict(self) -> list[dict[str, Any]]:
        """Pop the oldest FIFO messages until ``evict_frac`` of ``fifo_tokens`` is free; the evicted ones."""
        target = (1.0 - self.evict_frac) * self.fifo_tokens
        evicted: list[dict[str, Any]] = []
        while self.fifo and self.fifo_size() > target:
            evicted.append(self.fifo.pop(0))
        return evicted

    @staticmethod
    def render(msgs: list[dict[str, Any]]) -> str:
        """Messages as lines; a leading turn gets its session date so the FIFO stays dated."""
        lines = [m["text"] for m in msgs]
        if msgs and msgs[0]["kind"] == "turn" and msgs[0]["date"]:
            lines.insert(0, f"[session: {msgs[0]['date']}]")
        return "\n".join(lines)

    def memory_stats(self) -> tuple[int, int]:
        """(items, tokens) kept: every message once (recall storage; the FIFO is a view of those
        records, not a second copy), each archival passage, plus the working context and summary
        held in state (counted in tokens, not as items)."""
        recs = self.store.records(self.hid)
        state = sum(self.llm.count_tokens(x) for x in (self.working, self.summary) if x)
        return len(recs), sum(self.llm.count_tokens(r.text) for r in recs) + state

    # ---- the estimate (eval estimate=true) ---------------------------------------------------------
    def estimate_calls(self, history: History, questions: list[Question]) -> Any:
        """The queue replayed message by message (:meth:`message`, :meth:`evict`: what :meth:`apply` does),
        so the memory-pressure warnings and flushes fall where they will (exact: the FIFO is a pure
        function of the history). Each flush one summary call (exact for the first; later ones show the
        previous summary, assumed :meth:`output_tokens` of its cap). Each warning
        min(``estimate_pressure_calls``, ``pressure_steps``) calls: saves to archival memory, then ``done``
        (the first call of the first warning exact; each later call shows the earlier ones, a call assumed
        :meth:`output_tokens` of ``step_max_tokens``; the working context assumed unedited). Per question
        min(``estimate_answer_steps``, ``max_steps``) function calls: searches, then ``send_message`` (a
        search result assumed :meth:`output_tokens` of ``result_max_tokens``), no fallback answer; at most
        ``max_steps`` calls and the fallback. Archival embeddings: each save, each evicted turn with
        ``archive_evicted`` (exact texts), each search query."""
        steps = self.steps(history)
        summary_toks = self.output_tokens(self.cfg.summary_max_tokens)
        call_toks = self.output_tokens(self.step_max_tokens)
        result_toks = self.output_tokens(self.result_max_tokens)
        n_pressure = min(int(self.cfg.estimate_pressure_calls), self.pressure_steps)
        n_answer = max(1, min(int(self.cfg.estimate_answer_steps), self.max_steps))
        saved = "OK. Saved to archival memory."
        self.fifo, self.summary, self.warned = [], "", False
        summarised, warned_before = False, False
        for step in steps:
            text, _, kind = self.message(step)
            date = self._sessions[step[0]].date
            self.fifo.append({"text": text, "date": date, "kind": kind, "tokens": self.llm.count_tokens(text)})
            if not self.warned and self.fifo_size() > self.warn_frac * self.fifo_tokens:
                self.warned = True
                base = P.pressure_messages(self.working, "", self.render(self.fifo), self.pressure_steps)
                for k in range(n_pressure):
                    exact = k == 0 and not (summarised or warned_before)
                    msgs = base + [m for j in range(k) for m in (
                        {"role": "assistant", "content": ""},
                        P.result_message("archival_memory_insert", saved, self.pressure_steps - j - 1))]
                    extra = k * call_toks + (summary_toks if summarised else 0)
                    yield planned(self.llm, "construction", self.fit(msgs), self.step_max_tokens,
                                  "memgpt.pressure", schema=P.pressure_schema(), exact=exact, extra_tokens=extra,
                                  note=f"{n_pressure} calls per warning (estimate_pressure_calls): saves, then "
                                       f"done; a call {call_toks} tokens, the summary {summary_toks}")
                if n_pressure > 1:
                    yield PlannedEmbed(unknown=n_pressure - 1, kind="memgpt.archival_insert")
                warned_before = warned_before or n_pressure > 0
            if self.fifo_size() > self.fifo_tokens:
                evicted = self.evict()
                if evicted:
                    msgs = P.summary_messages("", self.render(evicted), self.summary_words)
                    yield planned(self.llm, "construction", msgs, self.cfg.summary_max_tokens, "memgpt.summary",
                                  exact=not summarised, extra_tokens=summary_toks if summarised else 0,
                                  note=f"the previous summary assumed {summary_toks} tokens" if summarised else "")
                    summarised = True
                    if self.archive_evicted:
                        yield PlannedEmbed(tuple(f"[{m['date']}] {m['text']}" if m["date"] else m["text"]
                                                 for m in evicted if m["kind"] == "turn"), kind="memgpt.evicted")
                self.warned = False
        rule = (f"{n_answer} calls per question (estimate_answer_steps): searches, then send_message; a call "
                f"{call_toks} tokens, a result {result_toks}" + (f", the summary {summary_toks}" if summarised else ""))
        for q in questions:
            base = self.main_context(q, self.working)
            for k in range(n_answer):
                msgs = base + [m for j in range(k) for m in (
                    {"role": "assistant", "content": ""},
                    P.result_message("archival_memory_search", "", self.max_steps - j - 1))]
                yield planned(self.llm, "answer", self.fit(msgs), self.step_max_tokens, "memgpt.function_call",
                              schema=P.call_schema(), exact=k == 0 and not (summarised or warned_before),
                              extra_tokens=k * (call_toks + result_toks) + (summary_toks if summarised else 0),
                              note=rule)
            if n_answer > 1:
                yield PlannedEmbed(unknown=n_answer - 1, kind="memgpt.search_query")

    # ---- recall and archival search ---------------------------------------------------------------
    def archival_search(self, query: str, page: int = 0) -> list[str]:
        hits = self.search(query, self.archival_k * (page + 1), {"archival"})
        return [f"[{r.time}] {r.text}" if r.time and r.meta.get("source") == "agent" else r.text  # evicted: dated
                for r, _ in hits[self.archival_k * page:]]

    def conversation_search(self, query: str, page: int = 0) -> list[str]:
        q = fts_query(query)
        if not q:
            return []
        rows = self.store.conn.execute(
            f"SELECT text, rid FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH ? AND hid=? "
            f"ORDER BY bm25({FTS_TABLE}), rid LIMIT ? OFFSET ?",
            (q, self.hid, self.recall_k, self.recall_k * page)).fetchall()
        self.note_records([self.store.get(int(r[1])) for r in rows])  # each row is a message record
        return [r[0] for r in rows]

    def provenance_of(self, record: Any) -> dict[str, Any]:
        """A message: its turn and session; an evicted message's archival copy: that message's; a passage
        the agent wrote itself: none (it may draw on any message it had in view)."""
        if "message" in record.meta:
            return super().provenance_of(self.store.get(int(record.meta["message"])))
        return super().provenance_of(record)

    # ---- answering -------------------------------------------------------------------------------
    def clip(self, lines: list[str], budget: int, newest: bool = False) -> list[str]:
        """The longest prefix (or suffix, ``newest``) of ``lines`` within ``budget`` tokens."""
        out, used = [], 0
        for line in (reversed(lines) if newest else lines):
            n = self.llm.count_tokens(line) + 1
            if used + n > budget:
                break
            out.append(line)
            used += n
        return list(reversed(out)) if newest else out

    def execute(self, name: str, args: dict[str, Any], working: str) -> tuple[str, str]:
        """Run one function call on ``working`` (the working context the caller holds): (its result
        text, the working context after it). Edits report failures as text; the caller keeps the
        returned working context where it belongs (the state while ingesting, the answer's own copy)."""
        if name in ("archival_memory_search", "conversation_search"):
            fn = self.archival_search if name == "archival_memory_search" else self.conversation_search
            hits = fn(args["query"], args.get("page", 0))
            lines = self.clip([f"- {h}" for h in hits], self.result_max_tokens)
            return ("\n".join(lines) if lines else "(no results)"), working
        if name == "core_memory_append":
            new = (working + "\n" + args["content"]).strip()
        else:  # core_memory_replace
            if args["old_content"] not in working:
                self.count("failed_edits")
                return "Edit failed: old_content is not in the working context.", working
            new = working.replace(args["old_content"], args["new_content"], 1)
        if self.llm.count_tokens(new) > self.working_max_tokens:
            self.count("failed_edits")
            return f"Edit failed: the working context would exceed {self.working_max_tokens} tokens.", working
        return "OK. Working context:\n" + new, new

    def main_context(self, question: Question, working: str) -> list[dict[str, str]]:
        """System + ``working`` context + summary + as much of the FIFO (newest first) as fits."""
        qtext = question_text(question)
        empty = P.agent_messages(working, self.summary, "", qtext, self.max_steps)
        reserve = self.step_max_tokens + 2 * (self.result_max_tokens + 40) + 32
        room = self.llm.context_window - reserve - sum(self.llm.count_tokens(m["content"]) for m in empty)
        lines = self.render(self.fifo).split("\n") if self.fifo else []
        fifo = "\n".join(self.clip(lines, max(room, 0), newest=True))
        return P.agent_messages(working, self.summary, fifo, qtext, self.max_steps)

    def fit(self, msgs: list[dict[str, str]]) -> list[dict[str, str]]:
        """Drop the oldest call/result exchanges until the prompt fits the window."""
        budget = self.llm.context_window - self.step_max_tokens - 16
        while len(msgs) > 3 and sum(self.llm.count_tokens(m["content"]) + 4 for m in msgs) > budget:
            msgs = msgs[:2] + msgs[4:]
        return msgs

    @property
    def answer_writes_state(self) -> bool:  # type: ignore[override]
        """Working-context edits made while answering persist into the next answer (``persist_core_edits``)."""
        return self.cfg.persist_core_edits

    def answer(self, question: Question) -> Prediction:
        """Page with function calls until ``send_message`` (or the fallback answer). The working context
        is this answer's own copy; its edits become the state only with ``persist_core_edits`` (then
        answers run one at a time, in order: :attr:`answer_writes_state`). Counts are the answer's own."""
        t0, a0 = self.answer_start()
        with own_counts() as mine, noting_retrieved() as retrieved:  # the searches' hits, in call order
            reply, shown, fallback, noted = self.page(question)
        self.store.commit()  # working-context edits persist
        # the agent's own prompts are fitted by :meth:`fit` (whole exchanges dropped): what it saw is held;
        # the fallback's answer prompt is fitted by the backend: what is left of it is held
        held = (held_text_tokens(self.llm, self.answer_messages(shown, question), shown, self.answer_max_tokens())
                if fallback else self.llm.count_tokens(shown))
        usage = self.answer_usage(t0, a0, held, {**noted, "fallback_answer": fallback})
        return Prediction(text=(reply or "").strip(), usage=usage, outputs=output_counts(mine),
                          meta={"context": shown, "prompt_version": self.prompt_version(),
                                "paging_steps": noted["paging_steps"], "invalid_calls": noted["invalid_calls"],
                                "fallback_answer": fallback, "retrieved": retrieved})

    def page(self, question: Question) -> tuple[str | None, str, bool, dict[str, Any]]:
        """The answer's paging loop: (reply, the context shown, whether the fallback answered, what it noted)."""
        working = self.working
        msgs = self.main_context(question, working)
        seen = [msgs[0]["content"], msgs[1]["content"]]
        results: list[str] = []
        calls: dict[str, int] = {}
        invalid, steps, reply = 0, 0, None
        for step in range(self.max_steps):
            left = self.max_steps - step - 1
            call = self.call(self.fit(msgs), P.call_schema(), kind="function_call", phase="answer",
                             max_new_tokens=self.step_max_tokens, retries=0)  # this loop feeds errors back
            steps += 1
            if call is None:
                invalid += 1
                msgs = msgs + [P.error_message(self.call.last_error, left)]
                continue
            name, args = call["function"], call["args"]
            calls[name] = calls.get(name, 0) + 1
            if name == "send_message":
                reply = args["message"]
                break
            result, working = self.execute(name, args, working)
            if self.cfg.persist_core_edits and working != self.working:
                self.working = working
                self.save_state()
            if name.endswith("_search"):
                results.append(result)
            seen.append(result)
            msgs = msgs + [{"role": "assistant", "content": json.dumps(call)}, P.result_message(name, result, left)]
        noted = {"paging_steps": steps, "invalid_calls": invalid, "function_calls": calls}
        if reply is not None:
            return reply, "\n".join(seen), False, noted
        # best effort: the answer prompt over what the model has seen
        parts = [working, f"Summary: {self.summary}" if self.summary else ""]
        parts += [x for x in results if x != "(no results)"]
        head = "\n".join(p for p in parts if p)
        q_tokens = sum(self.llm.count_tokens(m["content"]) for m in self.answer_messages("", question))
        room = self.llm.context_window - self.answer_max_tokens() - q_tokens - 48
        lines = self.clip(head.split("\n"), room)
        rest = room - sum(self.llm.count_tokens(x) + 1 for x in lines)
        fifo = self.clip(self.render(self.fifo).split("\n"), max(rest, 0), newest=True) if self.fifo else []
        context = "\n".join(lines + fifo)
        r = self.llm.chat(self.answer_messages(context, question), max_new_tokens=self.answer_max_tokens(),
                          temperature=0.0, phase="answer", **self.answer_prompt.call_kwargs())
        return r.text, context, True, noted

    def prompt_version(self) -> str:
        return P.VERSION
