"""``llm_judge``: the J score of the Mem0 paper (an LLM labels each answer CORRECT or WRONG).

The judge prompt comes from the judge registry (:mod:`ctxbench.metrics.judges`): ``mem0`` (Mem0's
ACCURACY_PROMPT, the default and today's J), ``zep``, ``evermemos``, ``longmemeval``, ``strict``. One
:class:`LLMJudge` judges with one of them; ``judge.panel=[...]`` builds one per judge
(:mod:`ctxbench.metrics.judges.panel`). Like Mem0's code, adversarial questions (LoCoMo category 5) are
not judged (score ``None``, excluded from the mean). Each judge gets the question's category name as its
type (the ``longmemeval`` judge picks its template by it); an abstention question (LongMemEval: id ending
``_abs`` or ``meta["abstention"]``) gets the type ``abstention`` instead, and is judged. Off by default: add ``llm_judge`` to ``metrics`` (or name two
or more judges in ``judge.panel``) and pick the judge model with ``llm=...`` / ``judge_llm=...``.

Repeated judging (``judge.runs``, ``judge.temperature``, ``judge.seed`` in eval.yaml / score.yaml):
the Mem0 paper reports J as the mean ± std over 10 judge runs (its code judges with gpt-4o-mini at
temperature 0, where the API itself varies). With ``runs=N>1`` every answer is judged N times, run
``i`` sending ``seed + i`` as the call's sampling seed, so each run is its own call with its own call
cache key (a rerun with the same seeds replays the cache; other seeds ask again). ``runs=1`` sends no
seed: the call, and its cache key, are what they were before repeated judging existed. A question is
judged in every run. A failed or unlabelled judge call counts as WRONG (0 in that run), as EverMemOS
counts it (LongMemEval retries until it gets a label; ctxbench's call layer retries what it retries,
then counts the rest wrong): a judge outage cannot lift J by dropping the questions it failed on. The
record gets ``<metric>_judge_failed: true``; results.json ``judge_failures`` gives, per judge, how many
and J over the labelled questions alone, and ``health`` counts them. So every run judges the same
questions and the mean over questions of the per-question run average is exactly the mean of the
per-run J values; :mod:`.aggregate` reports their spread (``llm_judge_std``).
A judge that decodes greedily (a local ``llm=hf`` model at ``temperature=0``) gives N identical runs
(std 0; results.json ``judge.identical_runs``): sample with ``judge.temperature > 0`` for a spread.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

from ctxbench.core.errors import ConfigError
from ctxbench.core.registry import register
from ctxbench.core.types import Question
from ctxbench.data.categories import is_abstention
from ctxbench.metrics.base import answer_text, category_name
from ctxbench.metrics.judges.mem0 import ACCURACY_PROMPT as JUDGE_PROMPT  # noqa: F401 - the mem0 judge's text
from ctxbench.metrics.judges.mem0 import LABEL_SCHEMA  # noqa: F401
from ctxbench.metrics.judges.prompt import JudgePrompt
from ctxbench.metrics.judges.prompt import label_word_or_json as parse_label  # noqa: F401

DEFAULT_JUDGE = "mem0"
PARSES = ("ctxbench", "source")  # judge.parse


def get_judge(name: str) -> JudgePrompt:
    """The registered judge called ``name``; one line naming ``judge.panel`` and the judges otherwise."""
    from ctxbench.core import registry

    known = registry.names("judge")
    if str(name) not in known:
        raise ConfigError(f"judge.panel: unknown judge {str(name)!r}.{registry.suggest(str(name), known)}")
    return registry.get("judge", str(name))


def judged_type(question: Question) -> str | None:
    """The question type a judge prompt is rendered for: its category name, ``abstention`` for a LongMemEval
    ``_abs`` question (its own template); None for a LoCoMo adversarial question (never judged)."""
    cat = category_name(question)
    if cat == "adversarial":
        return None
    return "abstention" if is_abstention(question) else cat


@register("metric", "llm_judge")
class LLMJudge:
    name = "llm_judge"
    version = "mem0-judge-2"  # the judge prompt's version (mem0's by default)
    reference = "mem0ai/mem0 evaluation/metrics/llm_judge.py ACCURACY_PROMPT"
    needs_llm = True

    def __init__(self, llm: Any, max_new_tokens: int | None = None, runs: int = 1, temperature: float = 0.0,
                 seed: int = 0, judge: str = DEFAULT_JUDGE, name: str | None = None,
                 memo: dict[Any, float | None] | None = None, parse: str = "ctxbench"):
        if int(runs) < 1:
            raise ConfigError(f"judge.runs={runs}: need >= 1 (the number of judge runs per answer)")
        if float(temperature) < 0:
            raise ConfigError(f"judge.temperature={temperature}: need >= 0")
        if parse not in PARSES:
            raise ConfigError(f"judge.parse={parse!r}: use one of {', '.join(PARSES)}")
        self.prompt = get_judge(judge)
        self.parse = parse  # ctxbench: the prompt's parse; source: the source's own where it differs (mem0)
        self._parse = (self.prompt.source_parse if parse == "source" and self.prompt.source_parse is not None
                       else self.prompt.parse)
        self.judge = self.prompt.name
        self.name = name or "llm_judge"
        self.version = self.prompt.version
        self.reference = self.prompt.source
        self.llm = llm
        self.max_new_tokens = int(max_new_tokens or self.prompt.max_new_tokens)
        self.runs = int(runs)
        self.temperature = float(temperature)
        self.seed = int(seed)
        self.memo = {} if memo is None else memo  # shared by two metrics of one judge: one call per answer
        self.failed_ids: set[str] = set()  # questions whose last scoring had a failed / unlabelled judge call

    @property
    def std_ddof(self) -> int:
        """The ddof of the std over judge runs in the judge's source (:attr:`JudgePrompt.std_ddof`)."""
        return self.prompt.std_ddof

    @property
    def std_source(self) -> str:
        return self.prompt.std_source

    def seeds(self) -> list[int | None]:
        """The sampling seed of each run: none for a single run (today's call), ``seed + i`` for run i."""
        return [None] if self.runs == 1 else [self.seed + i for i in range(self.runs)]

    def model(self) -> str | None:
        """The judge model's name as its backend gives it."""
        name = getattr(self.llm, "model_name", None)
        return None if name is None else str(name)

    def settings(self) -> dict[str, Any]:
        """What results.json records about how J was judged."""
        return {"runs": self.runs, "temperature": self.temperature, "seeds": self.seeds(), "judge": self.judge,
                "model": self.model(), "max_new_tokens": self.max_new_tokens, "parse": self.parse}

    def score_runs(self, prediction: str, question: Question) -> list[float | None]:
        """One label per run (1.0 CORRECT, 0.0 WRONG or a failed / unlabelled call; None: adversarial, not
        judged). A failed call puts the question in :attr:`failed_ids`."""
        qtype = judged_type(question)
        if qtype is None:
            return [None] * self.runs
        messages = self.prompt.messages(question.question, answer_text(question.answer), prediction, qtype)
        labels = [self._judge(question.id, messages, seed) for seed in self.seeds()]
        if any(v is None for v in labels):
            self.failed_ids.add(str(question.id))
        else:
            self.failed_ids.discard(str(question.id))
        return [0.0 if v is None else v for v in labels]

    def score(self, prediction: str, question: Question) -> float | None:
        """The mean label over the runs (a failed call counted WRONG); None for a question not judged."""
        labels = self.score_runs(prediction, question)
        if any(v is None for v in labels):
            return None
        return sum(labels) / len(labels)

    def _judge(self, qid: str, messages: list[dict[str, str]], seed: int | None) -> float | None:
        key = hashlib.sha256(json.dumps([qid, messages, seed]).encode("utf-8")).hexdigest()
        if self.memo.get(key) is None:  # a failed or unlabelled call is asked again, as before
            self.memo[key] = self._call(messages, seed)
        return self.memo[key]

    def _call(self, messages: list[dict[str, str]], seed: int | None) -> float | None:
        seeded = {} if seed is None else {"seed": seed}  # backends without seeds still serve runs=1
        structured = {"schema": self.prompt.schema} if self.prompt.schema is not None else {}
        r = self.llm.chat(messages, max_new_tokens=self.max_new_tokens, temperature=self.temperature, phase="judge",
                          json_mode=self.prompt.json_mode, **structured, **seeded)
        if r.failed:
            return None
        label = self._parse(r.text)
        return None if label is None else float(label)
