"""Mem0g's ingestion resumes atomically: a crash inside a step (after some of its graph writes), then a
rerun, gives the graph (nodes, edges, validity, mention counts), records, usage counts and progress of
a clean run; a graph holding writes of steps the records never reached is refused in one line."""
from __future__ import annotations

import pytest

from ctxbench.memory.stores.records import StoreError

from memory_scripted import ScriptedLLM
from test_memory_mem0g import history, make, responder


class Crash(Exception):
    """Stands for a kill inside a step: nothing after it runs, nothing uncommitted survives."""


def crash_on(mem, method: str, n: int) -> None:
    """``mem.graph.<method>`` raises on its ``n``-th call (the earlier ones are written)."""
    real, calls = getattr(mem.graph, method), []

    def wrapped(*args, **kwargs):
        calls.append(args)
        if len(calls) == n:
            raise Crash(f"{method} #{n}")
        return real(*args, **kwargs)

    setattr(mem.graph, method, wrapped)


def snapshot(mem) -> dict:
    g, s = mem.graph, mem.store
    return {"nodes": [(n.id, n.name, n.type, n.created, n.updated, n.mentions, n.emb.tolist()) for n in g.nodes("h")],
            "edges": [(e.id, e.src, e.dst, e.relation, e.valid, e.created, e.invalidated, e.updated, e.mentions,
                       None if e.emb is None else e.emb.tolist()) for e in g.edges("h", valid_only=False)],
            "records": [(r.id, r.kind, r.text, r.meta, r.time, r.deleted) for r in s.records("h", include_deleted=True)],
            "progress": s.progress("h"), "summary": s.get_state("h", "summary"),
            "counts": {k: v for k, v in mem.counts.items() if v}}


def clean_run(tmp_path) -> dict:
    mem = make(tmp_path / "clean", ScriptedLLM(responder()))
    mem.ingest(history())
    out = snapshot(mem)
    mem.close()
    return out


# step 0 (session 1's pair) adds alice→google, then bob→chess; step 2 (session 2's pair) invalidates
# alice→google, touches alice, adds the node meta, then adds alice→meta
@pytest.mark.parametrize("method,n", [("add_edge", 2),  # after the step's first new edge
                                      ("add_edge", 3),  # after an invalidation, a touched node, a new node
                                      ("touch_node", 1)])  # after the invalidation only
def test_a_crash_inside_a_step_then_resume_gives_the_clean_graph(tmp_path, method, n):
    want = clean_run(tmp_path)
    assert want["edges"] and any(not e[4] for e in want["edges"])  # an invalidated edge among them
    mem = make(tmp_path / "run", ScriptedLLM(responder()))
    crash_on(mem, method, n)
    with pytest.raises(Crash):
        mem.ingest(history())
    mem.close()  # the process is gone: what was not committed is lost
    again = make(tmp_path / "run", ScriptedLLM(responder()))
    again.ingest(history())
    assert snapshot(again) == want
    again.close()


def test_graph_writes_of_a_step_the_records_never_reached_are_refused(tmp_path):
    mem = make(tmp_path, ScriptedLLM(responder()))
    mem.ingest(history())
    mem.store.set_progress("h", 1)  # the records say: only step 0 applied; the graph holds step 2's writes
    mem.store.commit()
    mem.close()
    again = make(tmp_path, ScriptedLLM(responder()))
    with pytest.raises(StoreError, match=r"graph holds writes of step 2 .* progress record says only 1 steps"):
        again.ingest(history())
    again.close()
