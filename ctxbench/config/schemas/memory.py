"""The memory group: one schema per family of conf/memory/ options.

Generated once from the YAML defaults; now the one source of each key (see ctxbench/config/setting.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ctxbench.config.setting import (  # noqa: F401 - the generator's full kit
    COSINE, COUNT, POSITIVE, REQUIRED, SEED, SHARE, between, ge, gt, nested, setting)


@dataclass
class AmemMemory:
    """A-Mem: linked notes (content, time, keywords, tags, context, embedding, links) with memory evolution."""

    name: str = setting('amem', 'the registered name this config builds (ctxbench ls lists them)')
    needs_embedder: bool = setting(True, 'the evaluator builds the embedder for this system')
    k: int = setting(10, 'notes retrieved per question (the paper sweeps k = 10..50) where k_by_category names none', POSITIVE)
    k_by_category: dict | None = setting({}, "per-category k, e.g. {multi-hop: 40, temporal: 40, open-domain: 50, single-hop: 50, adversarial: 40} (A-Mem Appendix A.5 Table 8, GPT-4o-mini; the paper experiment sets it); keys: category names or LoCoMo ids 1..5 (quoted: '4': 50); {} = k for every category; reads the gold category, so protocol_pure=true takes k for all", values=POSITIVE)
    expand: int | None = setting(None, "extra notes reached through links of the retrieved ones; null = the question's k", COUNT)
    query_keywords: bool = setting(True, "turn the question into search keywords with one LLM call (A-Mem's generate_query_llm, test_advanced.py) and embed those; false = embed the question itself (the old behaviour)")
    query_max_keywords: int = setting(8, "keywords in that reply (the query schema's maxItems)", POSITIVE)
    query_max_tokens: int = setting(256, 'room for the keyword reply (8 keywords <= 30 chars; 128 cut 1 of 3 SmolLM2 replies)', POSITIVE)
    k_neighbors: int = setting(5, 'neighbours shown to link generation / evolution on each add', COUNT)
    max_keywords: int = setting(5, "keywords per note (the note schema's maxItems)", POSITIVE)
    max_tags: int = setting(4, 'tags per note', POSITIVE)
    max_evolved: int = setting(2, 'neighbours whose context/tags one new note may rewrite', COUNT)
    note_max_tokens: int = setting(256, "room for the note schema's largest reply (keywords + context + tags)", POSITIVE)
    evolve_max_tokens: int = setting(384, 'room for the memory-evolution reply', POSITIVE)
    index: str = setting('flat', 'faiss index for archival storage: flat (exact) | hnsw', choices=('flat', 'hnsw'))
    max_sessions: int | None = setting(None, 'ingest only the first N sessions (CPU smoke runs); null = all', ge(1, note='null = all'))
    max_turns: int | None = setting(None, '... and at most N turns in all (CPU smoke runs); null = all', ge(1, note='null = all'))
    json_retries: int = setting(1, 'retries per structured request: a truncated reply once with 2x the tokens, an invalid one once with the error shown; a request identical to one that gave an unusable reply is not sent again (retries_saved)', COUNT)
    rebuild: bool = setting(False, "true = drop this history's stored memory and rebuild (default: resume)")
    progress: bool = setting(True, 'tqdm progress bars')


@dataclass
class FullContextMemory:
    """The whole history in the prompt, rendered as the LoCoMo reference does; the oldest turns are cut to fit llm.context_window - reserve (what was cut is counted in usage.extra)."""

    name: str = setting('full_context', 'the registered name this config builds (ctxbench ls lists them)')
    needs_embedder: bool = setting(False, 'the evaluator builds the embedder for this system')
    reserve: int = setting(96, 'tokens kept free for the chat template and the answer', COUNT)
    max_new_tokens: int | None = setting(None, "answer cap; null = the qa_prompt's (locomo: 32 as the LoCoMo reference requests)", POSITIVE)


@dataclass
class Mem0Memory:
    """Mem0: LLM fact extraction (summary + last m messages + new pair), then per fact one ADD/UPDATE/DELETE/NOOP decision against the top-s similar memories."""

    name: str = setting('mem0', 'the registered name this config builds (ctxbench ls lists them)')
    needs_embedder: bool = setting(True, 'the evaluator builds the embedder for this system')
    stores: str = setting('per_speaker', 'per_speaker | shared. per_speaker (the paper setting; Mem0\'s evaluation, evaluation/src/memzero/add.py + search.py): one store per speaker holding the facts about that speaker: each message pair is extracted once (every speaker\'s facts, each starting with its speaker\'s name; the reference extracts once per speaker) and each fact goes to its speaker\'s store, and a question searches every store with its own top-k and shows one "Memories for user NAME:" list of "timestamp: memory" per speaker. shared: one store for everyone, searched once with top-k (ctxbench before issue 16).', choices=('per_speaker', 'shared'))
    k: int = setting(10, "memories retrieved per question, per speaker with stores=per_speaker (MemorySearch's top_k default; the evaluation's Makefile runs --top_k 30)", POSITIVE)
    m: int = setting(10, 'recent messages shown to extraction (paper: 10)', COUNT)
    s: int = setting(10, 'similar memories shown to each update decision (paper: 10)', COUNT)
    summary: bool = setting(True, 'refresh the running conversation summary once per session')
    max_facts: int = setting(4, "candidate facts per message pair (the extraction schema's maxItems)", POSITIVE)
    extract_max_tokens: int = setting(256, 'room for max_facts facts of <= 140 characters (a cut reply is retried with 2x)', POSITIVE)
    update_max_tokens: int = setting(96, 'room for the update-decision reply', POSITIVE)
    summary_max_tokens: int = setting(128, 'generation cap of one summary call (construction phase)', POSITIVE)
    estimate_facts_per_pair: float = setting(2.0, 'eval estimate=true only: facts extraction is assumed to return per message pair (update calls and the facts an answer shows follow from it). An assumption, not measured: a run measures it as counts.facts_extracted / structured_output.construction.by_kind.extract.calls in each history\'s construction.outputs (predictions.jsonl); set it here or as memory.estimate_facts_per_pair=X (docs/estimate.md)', between(0, 64))
    index: str = setting('flat', 'faiss index for archival storage: flat (exact) | hnsw', choices=('flat', 'hnsw'))
    max_sessions: int | None = setting(None, 'ingest only the first N sessions (CPU smoke runs); null = all', ge(1, note='null = all'))
    max_turns: int | None = setting(None, '... and at most N turns in all (CPU smoke runs); null = all', ge(1, note='null = all'))
    json_retries: int = setting(1, 'retries per structured request: a truncated reply once with 2x the tokens, an invalid one once with the error shown; a request identical to one that gave an unusable reply is not sent again (retries_saved)', COUNT)
    rebuild: bool = setting(False, "true = drop this history's stored memory and rebuild (default: resume)")
    progress: bool = setting(True, 'tqdm progress bars')


@dataclass
class Mem0gMemoryGraph:
    """memory.graph"""

    backend: str = setting('ladybug', 'ladybug (embedded, on-disk, in the run folder) | neo4j (needs a server)', choices=('ladybug', 'neo4j'))
    path: str | None = setting(None, 'ladybug: database file in the run folder (null = graph.lbdb)')
    uri: str = setting('bolt://localhost:7687', 'neo4j only')
    user: str = setting('neo4j', 'graph namespace the memories are kept under')
    password: str = setting('', 'neo4j only; prefer an env var: ${oc.env:NEO4J_PASSWORD,""}')
    database: str | None = setting(None, "graph database name (null = the backend's default)")


@dataclass
class Mem0gMemory:
    """Mem0g: Mem0 plus a graph of typed entities and timestamped relations (LadybugDB by default; neo4j optional). Defaults are the reference's (mem0ai/mem0 v0.1.x mem0/memory/graph_memory.py, the paper's versions)."""

    name: str = setting('mem0g', 'the registered name this config builds (ctxbench ls lists them)')
    needs_embedder: bool = setting(True, 'the evaluator builds the embedder for this system')
    stores: str = setting('per_speaker', "Mem0's fact stores: per_speaker | shared (conf/memory/mem0.yaml); the graph is one per conversation", choices=('per_speaker', 'shared'))
    k: int = setting(10, 'Mem0 facts retrieved per question (per speaker with stores=per_speaker)', POSITIVE)
    k_graph: int = setting(10, 'relations shown per question (entity traversal + triplet matching)', POSITIVE)
    m: int = setting(10, 'recent messages shown to extraction (paper: 10)', COUNT)
    s: int = setting(10, 'similar memories shown to each update decision (paper: 10)', COUNT)
    summary: bool = setting(True, 'refresh the running conversation summary once per session')
    use_facts: bool = setting(True, "also extract and show Mem0's facts (the paper combines both)")
    node_threshold: float = setting(0.9, "adding: cosine >= this merges an entity into an existing node (mem0 _add_entities: _search_source_node/_search_destination_node threshold=0.9); 0.7 was ctxbench's old value", COSINE)
    search_threshold: float = setting(0.7, 'neighbourhood lookup: nodes with cosine >= this to an extracted entity (conflict detection) or to a question phrase (retrieval) (mem0 MemoryGraph.threshold, _search_graph_db)', COSINE)
    max_conflict_edges: int = setting(100, 'edges of those nodes shown to conflict detection, most similar node first, then most recent (mem0 _search_graph_db limit=100); lower it for small context windows', COUNT)
    include_invalid: bool = setting(True, 'retrieval may return invalidated edges, shown apart as "valid <from> – <to>" (the paper\'s soft invalidation for temporal questions); false = valid edges only')
    max_facts: int = setting(4, "candidate facts per message pair (the extraction schema's maxItems)", POSITIVE)
    max_entities: int = setting(6, "entities per message pair (the entity schema's maxItems)", POSITIVE)
    max_relations: int = setting(4, "relations per message pair (the relation schema's maxItems)", POSITIVE)
    extract_max_tokens: int = setting(256, 'room for max_facts facts of <= 140 characters (a cut reply is retried with 2x)', POSITIVE)
    update_max_tokens: int = setting(96, 'room for the update-decision reply', POSITIVE)
    summary_max_tokens: int = setting(128, 'generation cap of one summary call (construction phase)', POSITIVE)
    entity_max_tokens: int = setting(256, 'room for max_entities names (<= 40 chars) with types (<= 24 chars); 128 cut SmolLM2 replies', POSITIVE)
    relation_max_tokens: int = setting(256, 'room for the relation-extraction reply', POSITIVE)
    conflict_max_tokens: int = setting(64, 'room for the conflict-resolution reply', POSITIVE)
    estimate_facts_per_pair: float = setting(2.0, 'eval estimate=true only: facts extraction is assumed to return per message pair (update calls and the facts an answer shows follow from it). An assumption, not measured: a run measures it as counts.facts_extracted / structured_output.construction.by_kind.extract.calls in each history\'s construction.outputs (predictions.jsonl); set it here or as memory.estimate_facts_per_pair=X (docs/estimate.md)', between(0, 64))
    estimate_entities_per_pair: float = setting(3.0, 'eval estimate=true only: entities the entity call is assumed to return per message pair (sizes the relation prompt): an assumption, not measured; it would be measured from a run\'s results.json construction counts (docs/estimate.md)', between(0, 64))
    estimate_relations_per_pair: float = setting(2.0, 'eval estimate=true only: relations assumed per message pair (conflict calls and the edges they show follow from it): an assumption, not measured (docs/estimate.md)', between(0, 64))
    graph: Mem0gMemoryGraph | None = nested(Mem0gMemoryGraph, 'the entity graph store')
    index: str = setting('flat', 'faiss index for archival storage: flat (exact) | hnsw', choices=('flat', 'hnsw'))
    max_sessions: int | None = setting(None, 'ingest only the first N sessions (CPU smoke runs); null = all', ge(1, note='null = all'))
    max_turns: int | None = setting(None, '... and at most N turns in all (CPU smoke runs); null = all', ge(1, note='null = all'))
    json_retries: int = setting(1, 'retries per structured request: a truncated reply once with 2x the tokens, an invalid one once with the error shown; a request identical to one that gave an unusable reply is not sent again (retries_saved)', COUNT)
    rebuild: bool = setting(False, "true = drop this history's stored memory and rebuild (default: resume)")
    progress: bool = setting(True, 'tqdm progress bars')


@dataclass
class MemgptMemory:
    """MemGPT (Packer et al., 2023; letta-ai/letta memgpt/): bounded main context (system + self-edited working context + FIFO of recent messages headed by a recursive summary), recall storage (SQLite FTS5 over every message, evicted ones included: conversation_search) and archival storage (faiss vector search over what the agent saves with archival_memory_insert). Before a flush the agent is warned of memory pressure and may save to archival/core memory. The model pages with JSON function calls while answering. Sizes are in tokens of the llm's tokenizer; the defaults fit a 2048 window (the paper setting, conf/scale/*/memgpt/paper.yaml, passes the model's whole window)."""

    name: str = setting('memgpt', 'the registered name this config builds (ctxbench ls lists them)')
    needs_embedder: bool = setting(True, 'the evaluator builds the embedder for this system')
    fifo_tokens: int = setting(700, 'FIFO budget; over it the queue is flushed (paper: flush at 100% of the window); capped at what llm.context_window leaves beside the system prompt, working context, summary and a step', POSITIVE)
    warn_frac: float = setting(0.7, 'memory-pressure alert when the FIFO first exceeds this share of fifo_tokens (paper: 70%; letta code: 0.75)', between(0, 1, low_open=True))
    pressure_steps: int = setting(3, 'function calls the agent gets on the alert (archival_memory_insert, core_memory_*, done); 0 = no alert', ge(0, note='0 = no memory-pressure step'))
    archive_evicted: bool = setting(False, "false = evicted messages stay in recall storage only, archival holds the agent's inserts (MemGPT); true = ctxbench's earlier behaviour: evicted turns also embedded into archival storage automatically")
    evict_frac: float = setting(0.5, 'a flush evicts the oldest messages until this fraction of fifo_tokens is free (paper: 50%)', between(0, 1, low_open=True))
    summary_words: int = setting(80, 'the recursive summary is asked to stay under this many words', POSITIVE)
    summary_max_tokens: int = setting(128, 'generation cap of one summary call (construction phase)', POSITIVE)
    max_steps: int = setting(4, 'function calls per question (paging steps); then a best-effort answer', POSITIVE)
    step_max_tokens: int = setting(128, "generation cap of one function call (fits call_schema's largest: two 160-character arguments)", POSITIVE)
    archival_k: int = setting(5, 'results per archival_memory_search page (letta RETRIEVAL_QUERY_DEFAULT_PAGE_SIZE: 5)', POSITIVE)
    recall_k: int = setting(5, 'results per conversation_search page', POSITIVE)
    result_max_tokens: int = setting(200, 'a function result is clipped to this many tokens', POSITIVE)
    working_max_tokens: int = setting(150, 'working-context size limit (edits beyond it fail and are counted)', POSITIVE)
    persist_core_edits: bool = setting(True, 'working-context edits made while answering carry over to later questions')
    answer_max_tokens: int | None = setting(None, "cap of the best-effort answer (the qa_prompt); null = the qa_prompt's (locomo: 32)", POSITIVE)
    estimate_pressure_calls: int = setting(2, 'eval estimate=true only: calls the agent is assumed to make per memory-pressure warning (saves, then done; at most pressure_steps): an assumption, not measured (docs/estimate.md)', COUNT)
    estimate_answer_steps: int = setting(2, 'eval estimate=true only: function calls per question assumed (searches, then send_message; at most max_steps, the fallback answer not counted): an assumption, not measured (docs/estimate.md)', POSITIVE)
    index: str = setting('flat', 'faiss index for archival storage: flat (exact) | hnsw', choices=('flat', 'hnsw'))
    max_sessions: int | None = setting(None, 'ingest only the first N sessions (CPU smoke runs); null = all', ge(1, note='null = all'))
    max_turns: int | None = setting(None, '... and at most N turns in all (CPU smoke runs); null = all', ge(1, note='null = all'))
    json_retries: int = setting(1, 'retries per structured request: a truncated reply once with 2x the tokens, an invalid one once with the error shown; a request identical to one that gave an unusable reply is not sent again (retries_saved)', COUNT)
    rebuild: bool = setting(False, "true = drop this history's stored memory and rebuild (default: resume)")
    progress: bool = setting(True, 'tqdm progress bars')


@dataclass
class MemorybankMemory:
    """MemoryBank: turn memories + daily event summaries + global summary + user portrait, Ebbinghaus forgetting R = exp(-t/S) on the conversation's own dates (t in days)."""

    name: str = setting('memorybank', 'the registered name this config builds (ctxbench ls lists them)')
    needs_embedder: bool = setting(True, 'the evaluator builds the embedder for this system')
    k: int = setting(10, 'memories (turns and daily events) retrieved per question', POSITIVE)
    forgetting: str = setting('sample', "sample | threshold   when a later day is ingested, each turn memory is ... sample: kept with probability R, t in calendar days (the reference, forget_memory.py; one seeded draw per memory per day, the same on a rerun or a resume) threshold: forgotten when R < forget_threshold, t in fractional days (ctxbench's earlier rule)", choices=('sample', 'threshold'))
    seed: int = setting(0, "the draws' seed (forgetting=sample); the paper experiments set it to the run's seed", SEED)
    forget_threshold: float = setting(0.01, 'forgetting=threshold: turn memories with R below this are forgotten', SHARE)
    recall_k: int = setting(3, 'while ingesting a day, each turn recalls up to this many similar memories ...', ge(0, note='0 = no recall while ingesting'))
    recall_threshold: float = setting(0.6, '... with cosine >= this (a recall: S += 1, t reset)', COSINE)
    portrait: bool = setting(True, 'keep a running user portrait (one LLM call per day)')
    summary_max_tokens: int = setting(128, 'generation cap of one summary call (construction phase)', POSITIVE)
    portrait_max_tokens: int = setting(128, 'room for the user-portrait reply', POSITIVE)
    index: str = setting('flat', 'faiss index for archival storage: flat (exact) | hnsw', choices=('flat', 'hnsw'))
    max_sessions: int | None = setting(None, 'ingest only the first N sessions (CPU smoke runs); null = all', ge(1, note='null = all'))
    max_turns: int | None = setting(None, '... and at most N turns in all (CPU smoke runs); null = all', ge(1, note='null = all'))
    json_retries: int = setting(1, 'retries per structured request: a truncated reply once with 2x the tokens, an invalid one once with the error shown; a request identical to one that gave an unusable reply is not sent again (retries_saved)', COUNT)
    rebuild: bool = setting(False, "true = drop this history's stored memory and rebuild (default: resume)")
    progress: bool = setting(True, 'tqdm progress bars')


@dataclass
class NoContextMemory:
    """The question alone, no history: the floor every system should beat."""

    name: str = setting('no_context', 'the registered name this config builds (ctxbench ls lists them)')
    needs_embedder: bool = setting(False, 'the evaluator builds the embedder for this system')
    max_new_tokens: int | None = setting(None, "answer cap; null = the qa_prompt's (locomo: 32, brief: 48)", POSITIVE)


@dataclass
class RagMemory:
    """RAG baseline: chunks of turns (or LLM session summaries) retrieved top-k by cosine."""

    name: str = setting('rag', 'the registered name this config builds (ctxbench ls lists them)')
    needs_embedder: bool = setting(True, 'the evaluator builds the embedder for this system')
    granularity: str = setting('turns', 'turns | session_summary (one LLM summary per session, construction phase)', choices=('turns', 'session_summary'))
    chunk_size: int = setting(2, 'turns per chunk', POSITIVE)
    overlap: int = setting(0, 'turns shared by consecutive chunks (< chunk_size)', COUNT)
    k: int = setting(10, 'chunks shown to the answering model', POSITIVE)
    embed_dates: bool = setting(True, "false = embed each chunk without its [session date] head (the answering model still sees it): LongMemEval_S dates a shared session anew in each haystack, so only then is a shared session's chunk embedded once per run (docs/estimate.md)")
    index: str = setting('flat', 'faiss index: flat (exact) | hnsw', choices=('flat', 'hnsw'))
    summary_max_tokens: int = setting(128, 'generation cap of one summary call (construction phase)', POSITIVE)
    max_sessions: int | None = setting(None, 'ingest only the first N sessions (CPU smoke runs); null = all', ge(1, note='null = all'))
    max_turns: int | None = setting(None, '... and at most N turns in all (CPU smoke runs); null = all', ge(1, note='null = all'))
    json_retries: int = setting(1, 'retries per structured request: a truncated reply once with 2x the tokens, an invalid one once with the error shown; a request identical to one that gave an unusable reply is not sent again (retries_saved)', COUNT)
    rebuild: bool = setting(False, "true = drop this history's stored memory and rebuild (default: resume)")
    progress: bool = setting(True, 'tqdm progress bars')


@dataclass
class ReadagentMemory:
    """ReadAgent (Lee et al., 2024): LLM episode pagination -> a gist per page -> at answer time the LLM picks pages to re-read from the gists; the answer sees those pages in full and the other gists. Page sizes are in tokens of the llm's tokenizer (the paper: 600-word pages, labels after 280 words, up to 5-6 lookups, on 8k+ windows); the defaults fit the 2048-token CPU window."""

    name: str = setting('readagent', 'the registered name this config builds (ctxbench ls lists them)')
    needs_embedder: bool = setting(False, 'the evaluator builds the embedder for this system')
    max_page_tokens: int = setting(400, 'a page never exceeds this (paper: word_limit 600 words)', POSITIVE)
    min_page_tokens: int = setting(200, 'break labels are offered once the page holds this many (paper: start_threshold 280 words)', POSITIVE)
    tail_tokens: int = setting(200, 'a rest of the history up to this size becomes the last page without a call (paper: 350 words)', COUNT)
    preceding_tokens: int | None = setting(100, 'tail of the previous page shown to the pagination prompt; null = the whole page (paper)', ge(0, note='null = the whole previous page'))
    break_max_tokens: int = setting(24, 'generation cap of a pagination call', POSITIVE)
    gist_max_tokens: int = setting(96, 'generation cap of a gist', POSITIVE)
    max_lookups: int = setting(2, 'pages re-read in full per question (paper ReadAgent-P: up to 5)', COUNT)
    lookup_max_tokens: int = setting(48, 'generation cap of the lookup call (answer phase)', POSITIVE)
    answer_max_tokens: int | None = setting(None, "answer cap; null = the qa_prompt's max_new_tokens (locomo: 32)", POSITIVE)
    max_sessions: int | None = setting(None, 'paginate only the first N sessions (CPU smoke runs); null = all', ge(1, note='null = all'))
    json_retries: int = setting(1, 'retries per structured request: a truncated reply once with 2x the tokens, an invalid one once with the error shown; a request identical to one that gave an unusable reply is not sent again (retries_saved)', COUNT)
    rebuild: bool = setting(False, "true = drop this history's pages and gists and rebuild (default: resume)")
    progress: bool = setting(True, 'tqdm progress bars')


# schema node (conf/memory/<option>.yaml lists /schema/memory/<node>) -> schema
SCHEMAS = {
    'amem': AmemMemory,
    'full_context': FullContextMemory,
    'mem0': Mem0Memory,
    'mem0g': Mem0gMemory,
    'memgpt': MemgptMemory,
    'memorybank': MemorybankMemory,
    'no_context': NoContextMemory,
    'rag': RagMemory,
    'readagent': ReadagentMemory,
}
# the `name` an option composes to -> its schema (where a key's bounds are looked up)
BY_NAME = {
    'amem': (AmemMemory,),
    'full_context': (FullContextMemory,),
    'mem0': (Mem0Memory,),
    'mem0g': (Mem0gMemory,),
    'memgpt': (MemgptMemory,),
    'memorybank': (MemorybankMemory,),
    'no_context': (NoContextMemory,),
    'rag': (RagMemory,),
    'readagent': (ReadagentMemory,),
}


@dataclass
class HttpMemory:
    """memory=http: a memory system in another process (any language), spoken to in JSON over HTTP (docs/http_protocol.md); each session is one resumable step, acknowledged by the remote."""

    name: str = setting('http', 'the registered name this config builds (ctxbench ls lists them)')
    needs_embedder: bool = setting(False, 'the evaluator builds the embedder for this system (memory=http embeds nothing itself: true only builds one for the backend lent to the remote)')
    url: str = setting(REQUIRED, "the remote memory system's base URL, e.g. http://127.0.0.1:8765 (its endpoints: docs/http_protocol.md)", url=True)
    mode: str = setting('retrieve', "retrieve: the remote returns memories (POST /retrieve) and ctxbench answers with the run's answer prompt, as every other row; answer: the remote answers itself (POST /answer), calling the backend the run lends it", choices=('retrieve', 'answer'))
    k: int = setting(10, 'memories asked of /retrieve per question (sent as k; the remote may return fewer)', POSITIVE)
    timeout_s: float = setting(120.0, 'seconds each request may take (connect and reply); then it is retried, then the history fails', gt(0))
    retries: int = setting(2, 'retries of a request that timed out, could not connect, lost its connection or got HTTP 5xx (every request is idempotent); a 4xx or malformed JSON is not retried', COUNT)
    backoff_s: float = setting(0.5, 'wait before the first retry; doubles each retry', COUNT)
    answer_max_tokens: int | None = setting(None, "answer cap (ctxbench's answer call with mode=retrieve, max_tokens sent to /answer with mode=answer); null = the qa_prompt's", POSITIVE)
    max_sessions: int | None = setting(None, 'feed only the first N sessions (CPU smoke runs); null = all', ge(1, note='null = all'))
    max_turns: int | None = setting(None, '... and at most N turns in all (CPU smoke runs); null = all', ge(1, note='null = all'))
    json_retries: int = setting(1, "retries per structured request of ctxbench's own (memory=http makes none: the MemorySystem setting every memory system shares)", COUNT)
    rebuild: bool = setting(False, "true = reset this history on the remote (POST /reset) and in the run folder, then feed it again (default: resume)")
    progress: bool = setting(True, 'tqdm progress bars')


SCHEMAS['http'] = HttpMemory
BY_NAME['http'] = (HttpMemory,)
