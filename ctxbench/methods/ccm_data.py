"""CCM training examples (offline) and the paper's hub datasets (for users with the network).

Offline sources, all laid out by :func:`ctxbench.methods.ccm_mask.build_layout`:

- **text documents** (``dataset=text``, PwC contexts, Pile): token chunks of ``method.step_tokens``;
  an example is ``method.train_steps`` consecutive chunks; the loss is on every chunk after the
  first, read from the compressed memory of the chunks before it (the next-step continuation);
  a document's questions (PwC) add examples: its chunks (at most ``max_qa_steps``) as steps, then
  the question, loss on the answer;
- **session histories** (LoCoMo): sessions as steps (rendered with their date, capped at
  ``method.max_session_tokens``), windows of ``train_steps`` consecutive sessions; the loss is on
  each next session's first turns;
- **questions** with evidence: the sessions up to the last evidence session (at most
  ``train_steps``; an evidence session starts two turns before its first evidence turn) as steps,
  then the chat-formatted question as target, loss on the answer.

Hub loaders (``dataset=text dataset.name=ccm_dailydialog`` etc., or a conf/dataset yaml with that
name): DailyDialog (turns as steps, the last turn as output — the reference's dialogue setting),
MetaICL (demonstrations as steps, the test input as question) and LaMP (profile items as steps).
They need ``datasets.load_dataset`` to reach the hub and fail with a clear message offline.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from ctxbench.data.errors import DataError
from ctxbench.core.registry import register
from ctxbench.core.types import History, Question, Sample, Session, Turn
from ctxbench.methods.ccm_mask import Layout


def session_text(session: Session, intro: str = "", start_turn: int = 0) -> str:
    """A session as CCM reads it: the date block and its turns from ``start_turn`` on."""
    from ctxbench.core.render import render_session_block, render_turn

    return intro + render_session_block(session.date, [render_turn(t.speaker, t.text) for t in session.turns[start_turn:]])


def session_number(session: Session, index: int) -> int:
    """The session's number: the digits its id ends with, else its 1-based position."""
    m = re.search(r"(\d+)$", session.id or "")
    return int(m.group(1)) if m else index + 1


def _evidence_turns(question: Question) -> list[tuple[int, int]]:
    from ctxbench.data.locomo import parse_evidence_id

    out: list[tuple[int, int]] = []
    for e in question.evidence or []:
        out.extend(parse_evidence_id(str(e)))
    return out


def _cap(ids: list[int], cap: int) -> list[int]:
    return ids[:cap] if cap else ids


def examples_from_samples(method: Any, samples: list[Sample]) -> list[Layout]:
    """All training layouts for ``samples`` (see module docstring)."""

    cfg = method.cfg
    size = cfg.step_tokens
    k = cfg.train_steps
    cap = int(cfg.max_session_tokens or 0)
    use_sessions = cfg.session_examples
    use_qa = cfg.qa_examples
    limit = cfg.max_examples
    out: list[Layout] = []
    for sample in samples:
        h = sample.history
        if not h.sessions:
            ids = method.encode(h.text)
            chunks = [ids[j:j + size] for j in range(0, len(ids), size)]
            chunks = [c for c in chunks if len(c) > 1]
            for j in range(0, len(chunks) - 1, k):  # windows of k chunks (the last may be shorter, >= 2)
                win = chunks[j:j + k]
                if len(win) >= 2:
                    out.append(method.layout(win))
            if use_qa and chunks:  # PwC-style: the whole document as steps, then question → answer
                for q in sample.questions:
                    ids_, labels = method.qa_target(q, q.answer)
                    out.append(method.layout(chunks[-cfg.max_qa_steps:], ids_, labels,
                                             loss_steps_from=len(chunks) + 2))
            continue
        sessions = [s for s in h.sessions if s.turns]

        def render(s: Session, start_turn: int = 0) -> list[int]:
            return _cap(method.encode(session_text(s, "", start_turn) + "\n"), cap)

        if use_sessions and len(sessions) >= 2:
            rendered = [render(s) for s in sessions]
            for j in range(0, max(1, len(rendered) - k + 1)):
                win = rendered[j:j + k]
                if len(win) >= 2:
                    out.append(method.layout(win))
        if not use_qa:
            continue
        by_num = {session_number(s, i): (i, s) for i, s in enumerate(sessions)}
        for q in sample.questions:
            ev = _evidence_turns(q)
            if ev:
                last = max(s for s, _ in ev if s in by_num) if any(s in by_num for s, _ in ev) else None
                if last is None:
                    continue
                idx = by_num[last][0]
            elif q.meta.get("ccm_steps") == "all":
                idx = len(sessions) - 1
            else:
                continue
            lo = max(0, idx - k + 1)
            steps = []
            for i in range(lo, idx + 1):
                s = sessions[i]
                num = session_number(s, i)
                turn_nums = [t for sn, t in ev if sn == num]
                start = 0
                if turn_nums:
                    ids_ = [tt.id for tt in s.turns]
                    want = f"D{num}:{min(turn_nums)}"
                    start = max(0, ids_.index(want) - 2) if want in ids_ else 0
                steps.append(render(s, start))
            if q.meta.get("ccm_target") == "continuation":
                prompt = method.encode(q.question + "\n")
                ans = method.encode(str(q.answer) + (method.tokenizer.eos_token or ""))
                ids, labels = prompt + ans, [-100] * (len(prompt) - 1) + ans + [-100]
            else:
                ids, labels = method.qa_target(q, q.answer)
            out.append(method.layout(steps, ids, labels, loss_steps_from=k + 2))  # loss on the answer only
        if limit and len(out) >= int(limit):
            break
    return out[: int(limit)] if limit else out


# ---- hub datasets of the paper (network needed) --------------------------------------------------

def _load_hub(cfg: Any, default_id: str, split: str):
    from omegaconf.errors import MissingMandatoryValue

    try:
        hub_id = cfg.hub_id or default_id
    except MissingMandatoryValue:
        hub_id = ""
    if os.environ.get("HF_DATASETS_OFFLINE") == "1" or os.environ.get("HF_HUB_OFFLINE") == "1":
        raise DataError(hub_id or cfg.name, "needs the Hugging Face hub, but HF_DATASETS_OFFLINE / "
                        "HF_HUB_OFFLINE is set; use dataset=locomo or dataset=text offline")
    if not hub_id:
        raise DataError(cfg.name, "set dataset.hub_id to the hub dataset to read", field="hub_id")
    import datasets

    try:
        return datasets.load_dataset(hub_id, cfg.subset, split=split)
    except Exception as e:  # noqa: BLE001 - report the hub failure with the dataset named
        first = str(e).strip().splitlines()[0] if str(e).strip() else repr(e)
        raise DataError(hub_id, f"could not be loaded from the hub ({type(e).__name__}: {first})") from None


def _rows(ds: Any, cfg: Any) -> list[dict]:
    n = int(cfg.limit or len(ds))  # 0 or null = all, as the schema says
    return [ds[i] for i in range(min(n, len(ds)))]


@register("dataset", "ccm_dailydialog")
def load_dailydialog(cfg: Any) -> list[Sample]:
    """DailyDialog: every turn but the last two is a step; the second-to-last is read raw and the
    last is the output (as the reference's DialogueDataset)."""
    ds = _load_hub(cfg, "li2017dailydialog/daily_dialog", cfg.split)
    out = []
    for i, row in enumerate(_rows(ds, cfg)):
        turns = [str(t).strip() for t in row[cfg.field]]
        if len(turns) < 3:
            continue
        speakers = ["A", "B"]
        sessions = [Session(id=f"session_{j + 1}", turns=[Turn(speakers[j % 2], t)]) for j, t in enumerate(turns[:-2])]
        q = Question(id=f"dd-{i}", question=f"{speakers[len(turns) % 2]}: {turns[-2]}", answer=f"{turns[-1]}",
                     meta={"ccm_steps": "all", "ccm_target": "continuation"})
        out.append(Sample(History(id=f"dd-{i}", sessions=sessions, speakers=speakers), [q]))
    return out


def _json_file(path: Path, what: str) -> Any:
    import json

    if not path.exists():
        raise DataError(str(path), f"not found ({what})")
    try:
        if path.suffix == ".jsonl":
            return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise DataError(str(path), f"is not valid JSON ({e})") from None


def _hub_file(cfg: Any, filename: str) -> Path:
    """One file of a hub dataset repo (``huggingface_hub``; refused offline, naming the repo and file)."""
    hub_id = cfg.hub_id
    if os.environ.get("HF_DATASETS_OFFLINE") == "1" or os.environ.get("HF_HUB_OFFLINE") == "1":
        raise DataError(f"{hub_id}:{filename}", "needs the Hugging Face hub, but HF_HUB_OFFLINE / HF_DATASETS_OFFLINE "
                        "is set; pass dataset.path=<a folder holding the file>")
    from huggingface_hub import hf_hub_download

    try:
        return Path(hf_hub_download(str(hub_id), filename, repo_type="dataset"))
    except Exception as e:  # noqa: BLE001 - report the hub failure with the file named
        first = str(e).strip().splitlines()[0] if str(e).strip() else repr(e)
        raise DataError(f"{hub_id}:{filename}", f"could not be fetched ({type(e).__name__}: {first})") from None


def metaicl_file(cfg: Any, split: str) -> Path:
    """``{task}_{k}_{seed}_{split}.jsonl`` (MetaICL's own file names) from ``dataset.path`` or the hub."""
    name = cfg.file_pattern.format(
        task=cfg.task, k=cfg.k, seed=cfg.sampling_seed, split=split)
    if cfg.path:
        root = Path(str(cfg.path))
        for cand in (root / name, root / Path(name).name):
            if cand.exists():
                return cand
        raise DataError(str(root / name), f"not found (dataset.path holds MetaICL's files; {split} split of task "
                        f"{cfg.task!r}, k={cfg.k}, sampling_seed={cfg.sampling_seed})")
    return _hub_file(cfg, name)


@register("dataset", "ccm_metaicl")
def load_metaicl(cfg: Any) -> list[Sample]:
    """MetaICL in its own format (facebookresearch/MetaICL; the hub copy allenai/metaicl-data): rows
    ``{task, input, output, options}`` in ``{task}_{k}_{seed}_{train,test}.jsonl``. The k train rows
    are the demonstrations (one step each, the same for every test row, as MetaICL evaluates); each test
    row is a question whose options ``task=choice`` ranks. A task without options is scored open-ended."""
    if not cfg.task:
        raise DataError(cfg.name, "set dataset.task to a MetaICL task (e.g. superglue-cb)", field="task")
    demos = _json_file(metaicl_file(cfg, "train"), "MetaICL demonstrations")
    tests = _json_file(metaicl_file(cfg, cfg.split), "MetaICL test rows")
    limit = int(cfg.limit or 0)
    sessions = [Session(id=f"session_{j + 1}", turns=[Turn("Input", f"{d['input']}\nOutput: {d['output']}")])
                for j, d in enumerate(demos)]
    out = []
    for i, row in enumerate(tests[:limit] if limit else tests):
        for key in ("input", "output"):
            if key not in row:
                raise DataError(str(metaicl_file(cfg, cfg.split)), f"row {i} has no {key!r}",
                                field=key)
        q = Question(id=f"{cfg.task}-{i}", question=f"Input: {row['input']}\nOutput:", answer=str(row["output"]),
                     options=[str(o) for o in row["options"]] if row.get("options") else None,
                     category=str(row.get("task") or cfg.task), category_name=str(row.get("task") or cfg.task),
                     meta={"ccm_steps": "all", "ccm_target": "continuation"})
        out.append(Sample(History(id=f"icl-{cfg.task}-{i}", sessions=sessions), [q]))
    return out


LAMP_URL = "https://ciir.cs.umass.edu/downloads/LaMP/LaMP_{index}/{split}/{split}_{kind}.json"  # LaMP_2: LaMP_2/new/...


@register("dataset", "ccm_lamp")
def load_lamp(cfg: Any) -> list[Sample]:
    """LaMP in the benchmark's own files (``{split}_questions.json``: [{id, input, profile: [...]}],
    ``{split}_outputs.json``: {golds: [{id, output}]}) in ``dataset.path``, as the reference reads them;
    profile items as steps (at most ``max_profile``), the input as the question, the gold output as
    the answer. ``dataset.hub_id`` reads a hub copy with rows {input, profile, output} instead."""
    split = cfg.split
    if not cfg.path:
        if not cfg.hub_id:
            idx = cfg.task_index
            raise DataError(cfg.name, "set dataset.path to a folder with LaMP's "
                            f"{split}_questions.json and {split}_outputs.json (download them from "
                            f"{LAMP_URL.format(index=idx, split=split, kind='questions')} and ..._outputs.json), "
                            "or dataset.hub_id to a hub copy", field="path")
        rows = _rows(_load_hub(cfg, "", "validation" if split == "dev" else split), cfg)
    else:
        root = Path(str(cfg.path))
        questions = _json_file(root / f"{split}_questions.json", "LaMP questions")
        golds = {str(g["id"]): g["output"] for g in _json_file(root / f"{split}_outputs.json", "LaMP outputs")["golds"]}
        rows = [{**q, "output": golds.get(str(q["id"]))} for q in questions]
        missing = [str(r["id"]) for r in rows if r["output"] is None]
        if missing:
            raise DataError(str(root / f"{split}_outputs.json"), f"has no gold output for ids {missing[:5]}")
        limit = int(cfg.limit or 0)
        rows = rows[:limit] if limit else rows
    out = []
    for i, row in enumerate(rows):
        prof = row[cfg.profile_field][: cfg.max_profile]
        sessions = [Session(id=f"session_{j + 1}", turns=[Turn("Profile", " ".join(f"{k}: {v}" for k, v in p.items()
                                                                                   if k != "id"))])
                    for j, p in enumerate(prof)]
        q = Question(id=str(row.get("id", i)), question=str(row[cfg.input_field]),
                     answer=str(row[cfg.output_field]), meta={"ccm_steps": "all",
                                                                              "ccm_target": "continuation"})
        out.append(Sample(History(id=f"lamp-{row.get('id', i)}", sessions=sessions), [q]))
    return out
