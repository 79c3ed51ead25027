"""``dataset=ruler``: RULER-style examples generated offline, seeded and deterministic.

Each example is one :class:`~ctxbench.core.types.Sample`: a history whose text is the context
(instruction + haystack with its needles: everything before the question) and one question whose
answer is the expected strings joined by ", ", with ``meta`` = {outputs, answer_prefix, task, length,
haystack, context_tokens, depths}. ``qa_prompt=ruler`` asks it as RULER does (context, question, and
the answer prefix starting the reply); ``metrics=[ruler_match]`` scores it (RULER's string_match_all).

Length: ``dataset.length`` tokens of the tokenizer (``dataset.tokenizer``: a tokenizer folder or hub id,
or ``smollm2_135m`` for the packaged SmolLM2's; null = the evaluated model's, bound by ``eval`` with
:func:`model_tokenizer` — RULER counts its length in the evaluated model's tokenizer) for RULER's whole input (context + "\\n" + question + answer prefix); the
haystack grows or shrinks (:func:`.haystack.fit`) to the largest that fits. RULER also reserves the
answer's tokens inside its length (``tokens_to_generate``); ctxbench does not, so a ``length`` here is
the input the model reads. Example ``i`` of a task draws from ``random.Random("ruler:<seed>:<task>:
<length>:<i>")``: the same config gives the same examples on any machine; tasks and lengths are
independent of one another. ``dataset.limit`` keeps the first N examples (tasks in the order given).
"""
from __future__ import annotations

import random
from functools import lru_cache
from typing import Any

from ctxbench.core.errors import ConfigError
from ctxbench.core.registry import register
from ctxbench.core.types import History, Question, Sample
from ctxbench.data.errors import DataError
from ctxbench.data.ruler.haystack import fit
from ctxbench.data.ruler.tasks import Example, renderer
from ctxbench.data.ruler.templates import TASKS, TOKENS_TO_GENERATE


def check_tasks(tasks: Any) -> list[str]:
    """``dataset.tasks`` as a list of known task names, or one line naming the unknown one."""
    names = [str(t) for t in (tasks or [])]
    if not names:
        raise ConfigError(f"config key 'dataset.tasks' is an empty list: name RULER tasks, e.g. "
                          f"dataset.tasks=[niah_single_1,vt]; tasks are {', '.join(TASKS)}")
    for t in names:
        if t not in TASKS:
            raise ConfigError(f"config key 'dataset.tasks' has unknown task {t!r}; tasks are {', '.join(TASKS)}")
    return names


PACKAGED = "smollm2_135m"  # dataset.tokenizer naming the packaged model's tokenizer


def model_tokenizer(cfg: Any) -> tuple[str | None, str]:
    """(the evaluated model's tokenizer as ``dataset.tokenizer`` names it, where it came from) for an eval
    config: ``method=`` systems read ``model`` (``model=hf``: its ``model.path``; the packaged
    ``smollm2_135m``), ``memory=`` systems ``llm`` (``llm=hf``: ``llm.model`` when it is a hub id, a folder or
    ``smollm2_135m``; a served model: ``llm.tokenizer``). None when the config does not say (``model=tiny``, a
    served model without ``llm.tokenizer``): the caller keeps the packaged SmolLM2's and says so."""
    def node(key: str) -> Any:
        return cfg.get(key) if hasattr(cfg, "get") else None

    method, memory = node("method"), node("memory")
    if method and method.get("name"):
        model = node("model") or {}
        name = str(model.get("name") or "")
        if name == "hf" and model.get("path"):
            return str(model.get("path")), "model.path"
        return (PACKAGED, "model=smollm2_135m") if name == PACKAGED else (None, f"model={name}")
    if memory and memory.get("name"):
        llm = node("llm") or {}
        if str(llm.get("name")) == "hf":
            got = str(llm.get("model") or "")
            if got == PACKAGED or "/" in got:
                return got, "llm.model"
            return None, f"llm.model={got}"
        if llm.get("tokenizer"):
            return str(llm.get("tokenizer")), "llm.tokenizer"
        return None, f"llm={llm.get('name')} without llm.tokenizer"
    return None, "no system chosen"


@lru_cache(maxsize=4)
def load_tokenizer(path: str | None) -> Any:
    """The tokenizer lengths are counted in: the folder or hub id ``path``, or the packaged SmolLM2's
    (``smollm2_135m``, or None).

    The packaged model's folder comes from its model factory (``tokenizer_dir``, looked up by registry
    name: data/ sits beside models/ in the layers and does not import it)."""
    from transformers import AutoTokenizer

    from ctxbench.core.registry import get

    if path in (None, "", "null", PACKAGED):
        folder = str(get("model", PACKAGED).tokenizer_dir())
    else:
        from ctxbench.data.paths import resolve

        try:
            folder = str(resolve(path, what="dataset.tokenizer"))
        except DataError:
            if str(path).startswith((".", "/", "~")) or str(path).count("/") != 1:
                raise
            folder = str(path)  # a hub id (org/name): transformers finds it in the HF cache or downloads it
    try:
        return AutoTokenizer.from_pretrained(folder)
    except (OSError, ValueError) as e:
        raise DataError(folder, f"dataset.tokenizer: not a tokenizer folder ({str(e).splitlines()[0]})") from e


def generate(task: str, length: int, index: int, seed: int, tokenizer: Any, answer_tokens: str = "ctxbench") -> Sample:
    """Example ``index`` of ``task`` at ``length`` tokens (see the module docstring). ``answer_tokens=ruler``:
    RULER's per-task answer cap (``TOKENS_TO_GENERATE``) goes into ``meta["max_new_tokens"]`` and is reserved
    inside the length (the input fits ``length`` − cap, as RULER's generators fit input + tokens_to_generate)."""
    def count(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    cap = TOKENS_TO_GENERATE[TASKS[task].family] if answer_tokens == "ruler" else None
    budget = length - (cap or 0)
    render, most = renderer(task, random.Random(f"ruler:{seed}:{task}:{length}:{index}"), length)
    n = fit(lambda k: count(render(k).input_text()), budget, most=most)
    if n < 0:
        empty = count(render(0).input_text())
        raise ConfigError(f"dataset.length={length} is shorter than task {task}'s text without a haystack "
                          f"({empty} tokens)")
    ex: Example = render(n)
    missing = [o for o in ex.outputs if o not in ex.context]
    if missing:
        raise ConfigError(f"dataset.length={length} is too short for task {task}: the haystack that fits "
                          f"leaves out expected answers {missing}")
    sid = f"ruler-{task}-{length}-{index}"
    spec = TASKS[task]
    meta = {"outputs": list(ex.outputs), "answer_prefix": ex.answer_prefix, "task": task, "length": int(length),
            "haystack": spec.haystack, "context_tokens": count(ex.context), "depths": list(ex.depths)}
    if cap is not None:
        meta["max_new_tokens"] = cap  # RULER's tokens_to_generate: the answer cap (core/system.py answer_max_tokens)
    q = Question(id=sid, question=ex.question, answer=", ".join(ex.outputs), category=task, category_name=task,
                 meta=meta)
    return Sample(History(id=sid, text=ex.context, sessions=[], speakers=[]), [q])


def ruler_samples(cfg: Any) -> list[Sample]:
    tasks = check_tasks(cfg.tasks)
    length, per_task, seed = int(cfg.length), int(cfg.n_per_task), int(cfg.seed)
    limit = int(cfg.limit) if cfg.limit else None
    tokenizer = load_tokenizer(cfg.tokenizer)
    out: list[Sample] = []
    for task in tasks:
        for i in range(per_task):
            if limit is not None and len(out) >= limit:
                return out
            out.append(generate(task, length, i, seed, tokenizer, str(cfg.answer_tokens)))
    return out


@register("dataset", "ruler")
def load_ruler(cfg: Any) -> list[Sample]:
    """RULER-style tasks (see the module docstring; docs/ruler.md)."""
    return ruler_samples(cfg)


# added to metrics= when it is left at its default (ctxbench/evaluation/score.py metric_names)
load_ruler.metrics = ("ruler_match",)  # type: ignore[attr-defined]
