"""PwC (ICAE's Prompt-with-Context): JSONL rows {input, prompt, answer}.

Each row becomes ``Sample(History(text=input), [Question(prompt, answer)])``; with
``dataset.group_by_input=true`` rows sharing one context become one sample with several questions
(the context is then encoded once per evaluation). ``dataset.path`` is a local JSONL file (default
``data/downloads/pwc_test.jsonl``) or a hub id (``sggetao/PwC``, read with ``datasets`` when online).
"""
from __future__ import annotations

from typing import Any, Iterable, Iterator

from ctxbench.core.registry import register
from ctxbench.core.types import History, Question, Sample
from ctxbench.data.errors import DataError
from ctxbench.data.hub import iter_hub_rows
from ctxbench.data.invariants import check_samples, nonblank
from ctxbench.data.records import field, iter_jsonl
from ctxbench.data.samples import Samples
from ctxbench.data.sources import locate, looks_like_hub_id

FIELDS = ("input", "prompt", "answer")
CATEGORY = "pwc"


def row_sample(rec: dict[str, Any], source: object, record: str, row_id: str) -> Sample:
    vals = [nonblank(field(rec, k, str, source, record), source, record, k) for k in FIELDS]
    context, prompt, answer = vals
    q = Question(id=row_id, question=prompt, answer=answer, category=CATEGORY, category_name=CATEGORY,
                 meta={"record": record})
    return Sample(History(id=row_id, text=context), [q])


def group_by_context(samples: Iterable[Sample]) -> list[Sample]:
    """Rows with the same context → one sample holding all their questions (first-seen order)."""
    groups: dict[str, Sample] = {}
    for s in samples:
        g = groups.get(s.history.text)
        if g is None:
            groups[s.history.text] = Sample(History(id=s.history.id, text=s.history.text), list(s.questions))
        else:
            g.questions.extend(s.questions)
    return list(groups.values())


def _rows(cfg: Any, name: str) -> tuple[str, Iterator[tuple[str, str, dict[str, Any]]]]:
    """(source, iterator of (record label, row id, row))."""
    raw = cfg.path
    if raw and looks_like_hub_id(str(raw)):
        split = cfg.split
        rows = iter_hub_rows(str(raw), split, name, streaming=cfg.streaming)
        return f"{raw}:{split}", ((f"row {i}", f"pwc-{split}-{i}", r) for i, r in enumerate(rows))
    path = locate(raw, "pwc")
    return str(path), ((f"line {n}", f"{path.stem}-{n}", r) for n, r in iter_jsonl(path))


def load_pwc_rows(cfg: Any, name: str = "pwc") -> Samples:
    source, rows = _rows(cfg, name)
    limit = cfg.limit
    out: list[Sample] = []
    for record, row_id, rec in rows:
        if limit and len(out) >= int(limit):
            break
        out.append(row_sample(rec, source, record, row_id))
    if not out:
        raise DataError(source, "no rows")
    if cfg.group_by_input:
        out = group_by_context(out)
    check_samples(out, source, conversational=False, categories={CATEGORY}, questions="each")
    return Samples(out, source=source)


@register("dataset", "pwc", aliases=("pwc_sample",))
def load_pwc(cfg: Any) -> Samples:
    return load_pwc_rows(cfg)
