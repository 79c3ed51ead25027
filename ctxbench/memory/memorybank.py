"""MemoryBank (Zhong et al., 2024; zhongwanjun/MemoryBank-SiliconFriend).

Memory: every turn as a timestamped record; per day an LLM event summary and a running user
portrait; after the last day a global summary of the daily events. Forgetting follows the
Ebbinghaus curve R = exp(−t/S): ``t`` is days since the memory was stored or last recalled,
measured on the conversation's own dates; ``S`` (strength) starts at 1 and grows by 1 at each
recall, which also resets ``t``. (The reference code computes exp(−t/5·S), i.e. exp(−t·S/5), which
makes stronger memories fade *faster*; this follows the paper instead.)

When a later day is ingested, the day's turns first recall their most similar stored turns
(cosine ≥ ``recall_threshold``, top ``recall_k``), then turn memories are forgotten (soft-deleted,
kept in the change history); summaries are never forgotten. How, by ``forgetting``:

- ``sample`` (the reference, and the paper setting): each memory is kept with probability R and
  forgotten otherwise, one draw per memory per conversation day, ``t`` in whole calendar days as
  the reference counts them (``memory_bank/memory_retrieval/forget_memory.py``
  ``initial_load_forget_and_save``: ``_get_date_difference`` on dates, then
  ``random.random() > retention_probability`` forgets). The draw is seeded and keyed, not taken
  from a generator's stream: u = hash(``seed``, history, memory id, day) in [0, 1), forgotten when
  u > R, so a rerun or a resumed run makes the same draws (the paper experiments pass the run's
  ``seed``);
- ``threshold`` (the earlier ctxbench rule, kept as an option): forgotten when R <
  ``forget_threshold``, ``t`` in fractional days.

Answering retrieves top-``k`` turn and event memories — a recall, so their S grows and t resets at
the time of the last session, or at the question's own date when the dataset gives one (LongMemEval's
``question_date``, :func:`ctxbench.data.dates.question_time`) — and shows them with the global
summary and the portrait. The portrait and the global summary are held in state, not records: they
count in :meth:`MemoryBank.memory_stats` beside the records.
"""
from __future__ import annotations

import hashlib
import math
from datetime import datetime
from typing import Any

from ctxbench.config.schemas.memory import MemorybankMemory
from ctxbench.core.errors import ConfigError
from ctxbench.core.plan import PlannedEmbed, planned
from ctxbench.core.registry import register
from ctxbench.core.types import History, Question, Session
from ctxbench.data.dates import question_time

from ctxbench.memory.base import MemorySystem, days_between, session_times
from ctxbench.memory.prompts import memorybank as P
from ctxbench.memory.stores.records import Record


def retention(days: float, strength: float) -> float:
    """Ebbinghaus retention R = exp(−t/S), t in days."""
    return math.exp(-max(days, 0.0) / strength)


FORGETTING = ("sample", "threshold")


def draw(seed: int, hid: str, rid: int, day: str) -> float:
    """A uniform number in [0, 1) fixed by (seed, history, memory, day): the same on every rerun."""
    digest = hashlib.sha256(f"{int(seed)}|{hid}|{int(rid)}|{day}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0 ** 64


def render(session: Session) -> str:
    return "\n".join(f"{t.speaker}: {t.text}" for t in session.turns)


@register("memory", "memorybank")
class MemoryBank(MemorySystem):
    Settings = MemorybankMemory  # its config schema (ctxbench/config/schemas/memory.py)
    name = "memorybank"
    answer_writes_state = True  # a recall strengthens the memory and restarts its forgetting clock

    def __init__(self, cfg: Any, **deps: Any) -> None:
        super().__init__(cfg, **deps)
        self.k = cfg.k
        self.forgetting = cfg.forgetting
        if self.forgetting not in FORGETTING:
            raise ConfigError(f"config key 'memory.forgetting' must be one of {' | '.join(FORGETTING)}, "
                              f"got {self.forgetting!r}")
        self.seed = cfg.seed
        self.forget_threshold = float(cfg.forget_threshold)
        self.recall_k = cfg.recall_k
        self.recall_threshold = float(cfg.recall_threshold)
        self.portrait_on = cfg.portrait
        self.portrait, self.global_summary, self.now = "", "", ""

    # ---- steps -------------------------------------------------------------------------------
    def steps(self, history: History) -> list[tuple]:
        """("day", [session idx]) for each conversation day, then ("global",)."""
        self._sessions = self.limit(history)
        self._times = session_times(self._sessions)
        days: list[list[int]] = []
        for i, t in enumerate(self._times):
            if days and self._times[days[-1][0]].date() == t.date():
                days[-1].append(i)
            else:
                days.append([i])
        return [("day", d) for d in days] + [("global",)]

    def load(self) -> None:
        super().load()
        st = self.store.get_state(self.hid, "mb", {})
        self.portrait, self.global_summary = st.get("portrait", ""), st.get("global", "")
        self.now = st.get("now", "")

    def save_state(self) -> None:
        self.store.set_state(self.hid, "mb", {"portrait": self.portrait, "global": self.global_summary,
                                              "now": self.now})

    def apply(self, step: tuple, i: int) -> None:
        if step[0] == "global":
            events = [r.text for r in self.store.records(self.hid, "event")]
            if events:
                r = self.llm.chat(P.global_messages(events), phase="construction",
                                  max_new_tokens=self.cfg.summary_max_tokens)
                self.global_summary = r.text.strip()
            return
        sessions = [self._sessions[j] for j in step[1]]
        when = self._times[step[1][0]]
        for s, t in zip(sessions, (self._times[j] for j in step[1])):
            self.ingest_session(s, t)
        date = when.strftime("%d %B %Y")
        transcript = "\n".join(render(s) for s in sessions)
        r = self.llm.chat(P.event_messages(date, transcript), phase="construction",
                          max_new_tokens=self.cfg.summary_max_tokens)
        if r.text.strip():
            self.add_record("event", f"[{date}] {r.text.strip()}", {"day": date, "sessions": [s.id for s in sessions]},
                            when.isoformat())
        if self.portrait_on:
            r = self.llm.chat(P.portrait_messages(self.portrait, date, transcript), phase="construction",
                              max_new_tokens=self.cfg.portrait_max_tokens)
            if r.text.strip():
                self.portrait = r.text.strip()

    def estimate_calls(self, history: History, questions: list[Question]) -> Any:
        """Per conversation day one event summary (exact: the day's transcript) and, with ``portrait``, one
        portrait update (exact but for the previous portrait, assumed :meth:`output_tokens` of its cap);
        one global summary over the days' events (each assumed :meth:`output_tokens` of the summary cap).
        Every turn embedded (exact texts). Per question one answer over min(k, turns + days) memories of the
        mean turn tokens, the global summary and the portrait."""
        count = self.llm.count_tokens
        steps = self.steps(history)
        event_toks = self.output_tokens(self.cfg.summary_max_tokens)
        portrait_toks = self.output_tokens(self.cfg.portrait_max_tokens)
        days, turns = 0, []
        for step in steps:
            if step[0] == "global":
                if days:
                    yield planned(self.llm, "construction", P.global_messages([]), self.cfg.summary_max_tokens,
                                  "memorybank.global", exact=False, extra_tokens=days * event_toks,
                                  note=f"{days} events x {event_toks} tokens")
                continue
            sessions = [self._sessions[j] for j in step[1]]
            date = self._times[step[1][0]].strftime("%d %B %Y")
            transcript = "\n".join(render(s) for s in sessions)
            texts = [f"{t.speaker}: {t.text}" for s in sessions for t in s.turns]
            yield PlannedEmbed(tuple(texts), kind="memorybank.turn")
            turns += [count(t) for t in texts]
            yield planned(self.llm, "construction", P.event_messages(date, transcript), self.cfg.summary_max_tokens,
                          "memorybank.event")
            yield PlannedEmbed(unknown=1, kind="memorybank.event")
            if self.portrait_on:
                yield planned(self.llm, "construction", P.portrait_messages("", date, transcript),
                              self.cfg.portrait_max_tokens, "memorybank.portrait", exact=not days,
                              extra_tokens=portrait_toks if days else 0,
                              note=f"the previous portrait assumed {portrait_toks} tokens" if days else "")
            days += 1
        mean = sum(turns) / len(turns) if turns else 0.0
        held = (event_toks if days else 0) + (portrait_toks if self.portrait_on and days else 0)
        for q in questions:
            yield PlannedEmbed((q.question,), kind="memorybank.query")
            n = min(int(self.k), len(turns) + days)
            yield self.planned_answer(q, int(round(mean * n)) + held,
                                      f"min(k={self.k}, memories) x {mean:.1f} mean turn tokens + summaries")

    def ingest_session(self, s: Session, when: datetime) -> None:
        texts = [f"{t.speaker}: {t.text}" for t in s.turns]
        embs = self.embed(texts) if texts else []
        if self.recall_k > 0:
            for e in embs:
                for rid, sim in self.index.search(e, self.recall_k, self._turn_ids()):
                    if sim >= self.recall_threshold:
                        self.recall(self.store.get(rid), when)
        self.forget(when)
        for t, text, e in zip(s.turns, texts, embs):
            self.add_record("turn", text, {"S": 1.0, "last": when.isoformat(), "turn": t.id, "date": s.date,
                                            "session": s.id},
                            when.isoformat(), emb=e)
        self.now = when.isoformat()

    # ---- forgetting curve ------------------------------------------------------------------------
    def _turn_ids(self) -> set[int]:
        return {r.id for r in self.store.records(self.hid, "turn")}

    def recall(self, r: Record, when: datetime) -> None:
        """A recall strengthens a memory: S += 1 and t restarts at ``when``."""
        if r.meta.get("last") == when.isoformat() and r.meta.get("recalled_at") == when.isoformat():
            return  # one recall per memory per moment
        meta = {**r.meta, "S": float(r.meta.get("S", 1.0)) + 1.0, "last": when.isoformat(),
                "recalled_at": when.isoformat()}
        self.store.update(self.hid, r.id, meta=meta, op="RECALL")
        self.count("recalls")  # an answer's recall: in that answer's own counts

    def retention_of(self, r: Record, now: datetime) -> float:
        return retention(days_between(datetime.fromisoformat(r.meta["last"]), now), float(r.meta.get("S", 1.0)))

    def forgotten(self, r: Record, now: datetime) -> bool:
        """Whether turn memory ``r`` is forgotten at ``now`` (module doc: ``sample`` | ``threshold``)."""
        if self.forgetting == "threshold":
            return self.retention_of(r, now) < self.forget_threshold
        days = (now.date() - datetime.fromisoformat(r.meta["last"]).date()).days
        keep = retention(float(days), float(r.meta.get("S", 1.0)))
        return draw(self.seed, self.hid, r.id, now.date().isoformat()) > keep

    def forget(self, now: datetime) -> None:
        for r in self.store.records(self.hid, "turn"):
            if self.forgotten(r, now):
                self.store.delete(self.hid, r.id, op="FORGET")
                self.index.remove([r.id])
                self.counts["forgotten"] += 1

    def memory_stats(self) -> tuple[int, int]:
        """(items, tokens): the live records plus the portrait and global summary held in state."""
        items, tokens = super().memory_stats()
        held = [t for t in (self.portrait, self.global_summary) if t]
        return items + len(held), tokens + sum(self.llm.count_tokens(t) for t in held)

    # ---- answering -------------------------------------------------------------------------------
    def retrieve(self, question: Question) -> str:
        hits = self.search(question.question, self.k, {"turn", "event"})
        now = datetime.fromisoformat(self.now) if self.now else None
        asked = question_time(question)  # a question asked at a date of its own (LongMemEval) recalls then
        if asked is not None:
            now = asked if now is None else max(now, asked)
        lines = []
        for r, _ in hits:
            if r.kind == "turn":
                if now is not None:
                    self.recall(r, now)
                lines.append(f"[{r.meta.get('date', r.time)}] {r.text}")
            else:
                lines.append(r.text)
        parts = []
        if self.global_summary:
            parts.append(f"Summary: {self.global_summary}")
        if self.portrait:
            parts.append(f"Portrait: {self.portrait}")
        parts.append("Memories:\n" + "\n".join(lines))
        return "\n\n".join(parts)

    def prompt_version(self) -> str:
        return P.VERSION
