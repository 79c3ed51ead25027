"""Stores: faiss index (exact and HNSW), SQLite records with change history, LadybugDB graph keeps
invalidated edges. (Structured output: tests/test_structured_output.py.)"""
from __future__ import annotations


import numpy as np
import pytest

from ctxbench.memory.stores.graph import LadybugGraph, open_graph
from ctxbench.memory.stores.records import RecordStore
from ctxbench.memory.stores.vector import VectorIndex
from ctxbench.config.compose import option_config


def unit(rows):
    rows = np.asarray(rows, dtype=np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


@pytest.mark.parametrize("kind", ["flat", "hnsw"])
def test_vector_index_top_k_and_remove(kind):
    rng = np.random.default_rng(1)
    vecs = unit(rng.normal(size=(50, 16)))
    idx = VectorIndex(16, kind)
    idx.add(list(range(100, 150)), vecs)
    q = vecs[7]
    want = list(np.argsort(-(vecs @ q))[:5] + 100)
    assert [i for i, _ in idx.search(q, 5)] == want
    idx.remove([107])
    assert 107 not in [i for i, _ in idx.search(q, 5)] and len(idx) == 49
    assert [i for i, _ in idx.search(q, 3, allowed={120, 130})] == sorted({120, 130}, key=lambda i: -(vecs[i - 100] @ q))


def test_records_history_and_progress(tmp_path):
    st = RecordStore(tmp_path / "r.sqlite")
    a = st.add("h", "fact", "x likes tea", {"s": 1}, "t0", np.ones(3))
    st.update("h", a, text="x likes green tea")
    st.delete("h", a)
    st.set_progress("h", 4)
    st.set_state("h", "summary", {"v": 1})
    st.commit()
    st2 = RecordStore(tmp_path / "r.sqlite")
    assert st2.records("h") == [] and st2.records("h", include_deleted=True)[0].text == "x likes green tea"
    assert [c["op"] for c in st2.changes("h")] == ["ADD", "UPDATE", "DELETE"]
    assert st2.changes("h")[1]["old"]["text"] == "x likes tea"
    assert st2.progress("h") == 4 and st2.get_state("h", "summary") == {"v": 1}
    assert np.allclose(st2.get(a).emb, 1.0)
    b = st2.add("h", "fact", "uncommitted")
    st2.rollback()
    with pytest.raises(KeyError, match="no record"):
        st2.get(b)


def test_ladybug_graph_invalidation_kept(tmp_path):
    g = open_graph({"backend": "ladybug"}, tmp_path)
    assert isinstance(g, LadybugGraph)
    a, b, c = (g.add_node("h", n, np.ones(3), step=0) for n in ("alice", "google", "meta"))
    e1 = g.add_edge("h", a, "works_at", b, "2023-03-01", np.ones(3), step=0)
    g.add_edge("h", a, "works_at", c, "2023-06-09", step=0)
    g.add_node("other", "alice", np.ones(3), step=0)
    g.invalidate(e1, "2023-06-09", step=0)
    assert [e.dst_name for e in g.edges("h")] == ["meta"]
    old = [e for e in g.edges("h", valid_only=False) if e.id == e1][0]
    assert not old.valid and old.invalidated == "2023-06-09" and old.created == "2023-03-01"
    assert len(g.nodes("h")) == 3 and len(g.nodes("other")) == 1
    assert g.edges("h", [c])[0].src_name == "alice"
    g.close()


def test_neo4j_backend_needs_driver(tmp_path):
    try:
        import neo4j  # noqa: F401
    except ImportError:
        with pytest.raises(RuntimeError, match="pip install neo4j"):
            open_graph({"backend": "neo4j"}, tmp_path)
    with pytest.raises(ValueError, match="unknown backend"):
        open_graph({"backend": "nope"}, tmp_path)


# ---- damaged files and stores that do not match their progress (issue 14) -------------------------

GARBAGE = bytes(range(256)) * 64  # not a database of any kind


def test_garbage_sqlite_store_is_a_one_line_error_naming_the_file(tmp_path):
    from ctxbench.memory.stores.records import StoreError

    path = tmp_path / "rag.sqlite"
    path.write_bytes(GARBAGE)
    with pytest.raises(StoreError) as e:
        RecordStore(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}: damaged memory store") and "delete it" in msg and "\n" not in msg


def test_sqlite_store_with_damaged_pages_is_caught_on_open(tmp_path):
    from ctxbench.memory.stores.records import StoreError

    path = tmp_path / "r.sqlite"
    st = RecordStore(path)
    for i in range(200):
        st.add("h", "fact", f"fact number {i} " * 20)
    st.commit()
    st.close()
    data = bytearray(path.read_bytes())
    data[4096 * 2: 4096 * 4] = GARBAGE[: 4096 * 2]  # pages 3-4 overwritten, the header intact
    path.write_bytes(bytes(data))
    with pytest.raises(StoreError, match=r"r\.sqlite: damaged memory store"):
        RecordStore(path)


def test_garbage_graph_store_is_a_one_line_error_naming_the_file(tmp_path):
    from ctxbench.memory.stores.records import StoreError

    (tmp_path / "graph.lbdb").write_bytes(GARBAGE)
    with pytest.raises(StoreError) as e:
        open_graph({"backend": "ladybug"}, tmp_path)
    assert str(e.value).startswith(f"{tmp_path / 'graph.lbdb'}: cannot open the graph store")
    assert "delete it" in str(e.value) and "\n" not in str(e.value)


def test_vector_index_refuses_embeddings_of_another_dimension():
    from ctxbench.memory.stores.records import StoreError

    idx = VectorIndex(16)
    with pytest.raises(StoreError, match="2 embeddings of 8 values for an index of dimension 16"):
        idx.add([1, 2], np.ones((2, 8)))


def test_check_resume_refuses_a_store_that_does_not_match_its_progress(tmp_path):
    from ctxbench.memory.stores.records import StoreError

    path = tmp_path / "m.sqlite"
    st = RecordStore(path)
    cfg = {"name": "rag", "k": 10, "progress": True}
    st.check_resume("h", 5, cfg, "tiny")  # fresh: records the config
    st.add("h", "chunk", "a")
    st.commit()
    with pytest.raises(StoreError, match=r"m\.sqlite: history 'h' has 1 records but its progress record says no step"):
        st.check_resume("h", 5, cfg, "tiny")
    st.set_progress("h", 7)
    st.commit()
    with pytest.raises(StoreError, match="has 7 steps applied but this history has only 5"):
        st.check_resume("h", 5, cfg, "tiny")
    st.check_resume("h", 7, {**cfg, "progress": False, "rebuild": True}, "tiny")  # keys that change nothing stored
    with pytest.raises(StoreError, match=r"built with a different config: llm tiny → other, memory\.k 10 → 1"):
        st.check_resume("h", 7, {**cfg, "k": 1}, "other")
    st.check_resume("other_history", 3, {**cfg, "k": 1}, "other")  # each history has its own record


def test_ingest_refuses_a_store_whose_progress_was_lost(tmp_path):
    from omegaconf import OmegaConf

    from ctxbench.memory.rag import RAG
    from ctxbench.memory.stores.records import StoreError
    from ctxbench.core.types import History, Session, Turn

    from memory_scripted import BowEmbedder, ScriptedLLM

    hist = History(id="h", sessions=[Session("s1", [Turn("A", f"turn {i} words", f"D1:{i}") for i in range(6)],
                                             "1:00 pm on 1 May, 2023")])
    cfg = option_config("memory", {"name": "rag", "k": 4, "chunk_size": 2, "progress": False})

    def rag(c=cfg):
        return RAG(c, llm=ScriptedLLM(lambda m, p: "x"), embedder=BowEmbedder(), workdir=tmp_path)

    first = rag()
    first.ingest(hist)
    n = len(first.store.records("h"))
    first.store.set_progress("h", 0)  # what a second process starting on the same store sees
    first.store.commit()
    with pytest.raises(StoreError, match=rf"rag\.sqlite: history 'h' has {n} records but its progress record"):
        rag().ingest(hist)
    first.store.set_progress("h", len(first.steps(hist)))  # progress restored
    first.store.commit()
    rag().ingest(hist)  # the same config resumes
    with pytest.raises(StoreError, match=r"rag\.sqlite: history 'h' was built with a different config: "
                                         r"memory\.chunk_size 2 → 3"):
        rag(OmegaConf.merge(cfg, {"chunk_size": 3})).ingest(hist)
    rag(OmegaConf.merge(cfg, {"chunk_size": 3, "rebuild": True})).ingest(hist)  # the documented way out
