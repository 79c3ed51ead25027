"""Graph store for Mem0g: entities (nodes with an embedding and a type) and relation edges that are
never deleted — a contradicted edge is marked ``valid = false`` with the time it was invalidated.

Times are conversation times (the session date of the message that taught or touched an item):
a node has ``created`` / ``updated``, an edge ``created`` / ``updated`` / ``invalidated``; both count
their ``mentions`` (mem0ai/mem0 v0.1.x ``mem0/memory/graph_memory.py`` ``_add_entities`` sets
``created`` and ``mentions`` on nodes and relations, and labels each node with its entity type).

Backends (``memory.graph.backend``):

- ``ladybug`` (default): LadybugDB, the maintained fork of Kùzu — embedded, on-disk, Cypher; the
  embedded graph database mem0's graph memory supports (as ``kuzu``), so no server is needed.
- ``neo4j``: the official ``neo4j`` driver against a server (``uri``, ``user``, ``password``);
  the driver is imported only when this backend is chosen.

Both speak the same Cypher; the graph of each history is kept apart by a ``hid`` property.

Resume (the graph's writes commit statement by statement, the records and the progress counter once
per ingestion step): every write carries the index of the ingestion step that made it — ``step`` on a
node or edge it created, ``mstep`` on one it changed, with ``undo`` (JSON) holding what that item was
before the step's first change. :meth:`_CypherGraph.roll_back` undoes every write of the step the
records never committed, so replaying that step starts from the graph the previous step left: no
edge invalidated or mention counted twice, the same ids as an uninterrupted run.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ctxbench.config.compose import option_config
from ctxbench.core.errors import ConfigError, MissingDependency


@dataclass
class Node:
    id: int
    name: str
    emb: np.ndarray
    type: str = ""  # the entity type extracted with it (mem0: the node label)
    created: str = ""  # conversation time the node was first extracted
    updated: str = ""  # conversation time it was last extracted again
    mentions: int = 1

    def text(self) -> str:
        """What the graph holds for this node, as counted in the memory footprint."""
        return f"{self.name} ({self.type})" if self.type else self.name


@dataclass
class Edge:
    id: int
    src: int
    dst: int
    src_name: str
    relation: str
    dst_name: str
    valid: bool
    created: str  # conversation time the edge was learnt
    invalidated: str  # conversation time it was contradicted ("" while valid)
    emb: np.ndarray | None = None
    updated: str = ""  # conversation time it was last stated again ("" = never restated)
    mentions: int = 1
    step: int = -1  # the ingestion step that added it (its provenance; -1 unknown)

    def text(self) -> str:
        return f"{self.src_name} {self.relation} {self.dst_name}"

    def interval(self) -> str:
        """Its validity: ``since <created>`` while valid, ``valid <created> – <invalidated>`` once contradicted."""
        return f"since {self.created}" if self.valid else f"valid {self.created} – {self.invalidated}"

    def line(self) -> str:
        """The edge with its validity interval, as retrieval shows it (and the footprint counts it)."""
        return f"{self.text()} ({self.interval()})"


class _CypherGraph:
    """Shared logic; subclasses implement ``_run(query, params) -> list[list]``."""

    where = "graph store"  # named in errors (LadybugGraph: its file)

    def _run(self, query: str, params: dict[str, Any] | None = None) -> list[list[Any]]:
        raise NotImplementedError

    def _vector(self, text: Any, what: str) -> np.ndarray:
        """A stored embedding (a JSON list of numbers); anything else is a one-line StoreError naming it."""
        try:
            return np.asarray(json.loads(text), dtype=np.float32)
        except (TypeError, ValueError, RecursionError):
            from ctxbench.memory.stores.records import StoreError

            raise StoreError(self.where, f"damaged graph store: the embedding of {what} is not a JSON list of "
                                         f"numbers ({str(text)[:60]!r}); delete it or use a new hydra.run.dir"
                             ) from None

    def _next_id(self, what: str) -> int:
        q = ("MATCH (n:Entity) RETURN max(n.id)" if what == "node"
             else "MATCH ()-[r:Rel]->() RETURN max(r.id)")
        rows = self._run(q)
        cur = rows[0][0] if rows and rows[0] and rows[0][0] is not None else 0
        return int(cur) + 1

    def _undo(self, match: str, fields: tuple[str, ...], item_id: int, step: int) -> str:
        """``undo`` for a change of the item at ``step``: its ``fields`` before the step's first change
        (JSON), kept as it is when this step changed it already."""
        rows = self._run(f"{match} WHERE x.id = $id RETURN x.mstep, x.undo, "
                         + ", ".join(f"x.{f}" for f in fields), {"id": item_id})
        if not rows:
            return ""
        mstep, undo, *values = rows[0]
        return undo if mstep == step else json.dumps(dict(zip(fields, values)))

    def add_node(self, hid: str, name: str, emb: np.ndarray, type_: str = "", created: str = "", *,
                 step: int) -> int:
        nid = self._next_id("node")
        self._run("CREATE (:Entity {id: $id, hid: $hid, name: $name, emb: $emb, type: $t, created: $c, "
                  "updated: $c, mentions: 1, step: $step, mstep: -1, undo: ''})",
                  {"id": nid, "hid": hid, "name": name, "emb": json.dumps([float(x) for x in emb]),
                   "t": type_, "c": created, "step": step})
        return nid

    NODE_STATE = ("updated", "mentions", "type")  # what a step's change to a node can alter
    EDGE_STATE = ("updated", "mentions", "valid", "invalidated")

    def touch_node(self, nid: int, at: str, type_: str = "", *, step: int) -> None:
        """An entity extracted again: ``updated`` = ``at``, one more mention; an untyped node takes ``type_``."""
        undo = self._undo("MATCH (x:Entity)", self.NODE_STATE, nid, step)
        self._run("MATCH (n:Entity) WHERE n.id = $id SET n.updated = $at, n.mentions = n.mentions + 1, "
                  "n.type = CASE WHEN n.type = '' THEN $t ELSE n.type END, n.mstep = $step, n.undo = $undo",
                  {"id": nid, "at": at, "t": type_, "step": step, "undo": undo})

    def nodes(self, hid: str) -> list[Node]:
        rows = self._run("MATCH (n:Entity) WHERE n.hid = $hid RETURN n.id, n.name, n.emb, n.type, n.created, "
                         "n.updated, n.mentions ORDER BY n.id", {"hid": hid})
        return [Node(int(r[0]), r[1], self._vector(r[2], f"node {r[0]}"), r[3] or "", r[4] or "", r[5] or "",
                     int(r[6] or 0)) for r in rows]

    def add_edge(self, hid: str, src: int, relation: str, dst: int, created: str,
                 emb: np.ndarray | None = None, *, step: int) -> int:
        eid = self._next_id("edge")
        self._run("MATCH (a:Entity), (b:Entity) WHERE a.id = $s AND b.id = $d "
                  "CREATE (a)-[:Rel {id: $id, hid: $hid, relation: $rel, valid: true, created: $c, "
                  "invalidated: '', emb: $emb, updated: '', mentions: 1, step: $step, mstep: -1, undo: ''}]->(b)",
                  {"s": src, "d": dst, "id": eid, "hid": hid, "rel": relation, "c": created, "step": step,
                   "emb": "" if emb is None else json.dumps([float(x) for x in emb])})
        return eid

    def touch_edge(self, eid: int, at: str, *, step: int) -> None:
        """A relation stated again while valid: ``updated`` = ``at``, one more mention."""
        undo = self._undo("MATCH ()-[x:Rel]->()", self.EDGE_STATE, eid, step)
        self._run("MATCH ()-[r:Rel]->() WHERE r.id = $id SET r.updated = $at, r.mentions = r.mentions + 1, "
                  "r.mstep = $step, r.undo = $undo", {"id": eid, "at": at, "step": step, "undo": undo})

    def invalidate(self, eid: int, at: str, *, step: int) -> None:
        undo = self._undo("MATCH ()-[x:Rel]->()", self.EDGE_STATE, eid, step)
        self._run("MATCH ()-[r:Rel]->() WHERE r.id = $id SET r.valid = false, r.invalidated = $at, "
                  "r.mstep = $step, r.undo = $undo", {"id": eid, "at": at, "step": step, "undo": undo})

    def roll_back(self, hid: str, done: int) -> None:
        """Undo the writes of step ``done`` (0-based: the one after the ``done`` steps the records
        committed), which a crash left half made: its new edges and nodes deleted, the items it changed
        restored. Writes of a later step mean the graph is not this progress record's: a StoreError."""
        from ctxbench.memory.stores.records import REMEDY, StoreError

        later: list[int] = []
        for match in ("MATCH (x:Entity)", "MATCH ()-[x:Rel]->()"):
            for row in self._run(f"{match} WHERE x.hid = $hid RETURN max(x.step), max(x.mstep)", {"hid": hid}):
                later += [int(v) for v in row if v is not None and int(v) > done]
        if later:
            raise StoreError(self.where, f"history {hid!r}: the graph holds writes of step {max(later)} (0-based) "
                                         f"but the progress record says only {done} steps were applied (the "
                                         f"graph of another run?); {REMEDY}")
        for match, fields in (("MATCH ()-[x:Rel]->()", self.EDGE_STATE), ("MATCH (x:Entity)", self.NODE_STATE)):
            for item_id, undo in self._run(f"{match} WHERE x.hid = $hid AND x.mstep = $s AND x.step < $s "
                                           "RETURN x.id, x.undo", {"hid": hid, "s": done}):
                old = self._json_undo(undo, item_id)
                sets = ", ".join(f"x.{f} = ${f}" for f in fields)
                self._run(f"{match} WHERE x.id = $id SET {sets}, x.mstep = -1, x.undo = ''",
                          {"id": item_id, **{f: old[f] for f in fields}})
        self._run("MATCH ()-[r:Rel]->() WHERE r.hid = $hid AND r.step >= $s DELETE r", {"hid": hid, "s": done})
        self._run("MATCH (n:Entity) WHERE n.hid = $hid AND n.step >= $s DETACH DELETE n", {"hid": hid, "s": done})

    def _json_undo(self, text: Any, item_id: int) -> dict[str, Any]:
        try:
            old = json.loads(text)
            if isinstance(old, dict):
                return old
        except (TypeError, ValueError, RecursionError):
            pass
        from ctxbench.memory.stores.records import REMEDY, StoreError

        raise StoreError(self.where, f"damaged graph store: the undo record of item {item_id} is not a JSON "
                                     f"object ({str(text)[:60]!r}); {REMEDY}")

    def edges(self, hid: str, node_ids: list[int] | None = None, valid_only: bool = True) -> list[Edge]:
        q = "MATCH (a:Entity)-[r:Rel]->(b:Entity) WHERE r.hid = $hid"
        params: dict[str, Any] = {"hid": hid}
        if valid_only:
            q += " AND r.valid = true"
        if node_ids is not None:
            q += " AND (a.id IN $ids OR b.id IN $ids)"
            params["ids"] = [int(i) for i in node_ids]
        q += (" RETURN r.id, a.id, b.id, a.name, r.relation, b.name, r.valid, r.created, r.invalidated, r.emb, "
              "r.updated, r.mentions, r.step ORDER BY r.id")
        out = []
        for r in self._run(q, params):
            emb = self._vector(r[9], f"edge {r[0]}") if r[9] else None
            out.append(Edge(int(r[0]), int(r[1]), int(r[2]), r[3], r[4], r[5], bool(r[6]), r[7], r[8], emb,
                            r[10] or "", int(r[11] or 0), -1 if r[12] is None else int(r[12])))
        return out

    def clear(self, hid: str) -> None:
        self._run("MATCH (n:Entity) WHERE n.hid = $hid DETACH DELETE n", {"hid": hid})


class LadybugGraph(_CypherGraph):
    """Embedded on-disk graph (LadybugDB / Kùzu Cypher) at ``path``."""

    def __init__(self, path: str | Path) -> None:
        import ladybug

        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.where = str(path)
        try:
            self.db = ladybug.Database(str(path))
            self.conn = ladybug.Connection(self.db)
            self.conn.execute("CREATE NODE TABLE IF NOT EXISTS Entity(id INT64, hid STRING, name STRING, "
                              "emb STRING, type STRING, created STRING, updated STRING, mentions INT64, "
                              "step INT64, mstep INT64, undo STRING, PRIMARY KEY(id))")
            self.conn.execute("CREATE REL TABLE IF NOT EXISTS Rel(FROM Entity TO Entity, id INT64, hid STRING, "
                              "relation STRING, valid BOOLEAN, created STRING, invalidated STRING, emb STRING, "
                              "updated STRING, mentions INT64, step INT64, mstep INT64, undo STRING)")
            old = self._missing_columns()
        except RuntimeError as e:  # a damaged file, or one another process has open
            from ctxbench.data.errors import first_line

            from ctxbench.memory.stores.records import StoreError

            raise StoreError(path, f"cannot open the graph store ({first_line(e)}); if it is damaged, delete it "
                                   "or use a new hydra.run.dir") from None
        if old:
            from ctxbench.memory.stores.records import StoreError

            self.close()
            raise StoreError(path, f"graph store written by an older ctxbench (no {', '.join(old)}); delete it "
                                   "or use a new hydra.run.dir")

    COLUMNS = {"Entity": ("type", "created", "updated", "mentions", "step", "mstep", "undo"),
               "Rel": ("updated", "mentions", "step", "mstep", "undo")}

    def _missing_columns(self) -> list[str]:
        """Columns this version writes that an existing file's tables lack ("Table.column")."""
        out = []
        for table, cols in self.COLUMNS.items():
            have = {r[1] for r in self._run(f"CALL table_info('{table}') RETURN *")}
            out += [f"{table}.{c}" for c in cols if c not in have]
        return out

    def _run(self, query: str, params: dict[str, Any] | None = None) -> list[list[Any]]:
        res = self.conn.execute(query, params or {})
        rows = []
        while res.has_next():
            rows.append(res.get_next())
        return rows

    def close(self) -> None:
        self.conn.close()
        self.db.close()


class Neo4jGraph(_CypherGraph):
    """A Neo4j server through the official driver (``pip install neo4j``)."""

    def __init__(self, uri: str, user: str, password: str, database: str | None = None) -> None:
        try:
            import neo4j
        except ImportError as e:
            raise MissingDependency("memory.graph.backend=neo4j needs the official driver: pip install neo4j") from e
        self.driver = neo4j.GraphDatabase.driver(uri, auth=(user, password))
        self.database = database
        self._run("CREATE INDEX entity_id IF NOT EXISTS FOR (n:Entity) ON (n.id)")

    def _run(self, query: str, params: dict[str, Any] | None = None) -> list[list[Any]]:
        records, _, _ = self.driver.execute_query(query, params or {}, database_=self.database)
        return [list(r.values()) for r in records]

    def close(self) -> None:
        self.driver.close()


def open_graph(cfg: Any, workdir: Path) -> _CypherGraph:
    """Build the backend named by ``cfg.backend`` (``ladybug`` or ``neo4j``); ``cfg`` is ``memory.graph``,
    filled from mem0g's schema (null or a partial mapping: the rest at their defaults)."""
    cfg = option_config("memory", {"name": "mem0g", "graph": cfg or {}}).graph
    backend = cfg.backend
    if backend == "ladybug":
        return LadybugGraph(Path(workdir) / (cfg.path or "graph.lbdb"))
    if backend == "neo4j":
        return Neo4jGraph(cfg.uri, cfg.user, cfg.password, cfg.database)
    raise ConfigError(f"memory.graph.backend={backend!r}: unknown backend; choose 'ladybug' or 'neo4j'")
