"""dataset=ruler (generator, loader, config), metric ruler_match, qa_prompt=ruler and its reply prefix.

Lengths are counted in the byte-level tiny tokenizer (one token a byte), saved to a folder and loaded
back through ``dataset.tokenizer`` as a user's would be: fast, and the fitting is exact enough to check.
"""
from __future__ import annotations

import re

import pytest
from omegaconf import OmegaConf

from ctxbench.core.errors import ConfigError
from ctxbench.core.types import Question
from ctxbench.data.ruler.loader import ruler_samples
from ctxbench.data.ruler.templates import TASKS
from ctxbench.metrics.ruler import RulerMatch, string_match_all
from ctxbench.qa import get_prompt

NEEDLE = re.compile(r"One of the special magic \w+ for (\S+) is: (\S+)\.")


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    from ctxbench.models.loading import tiny_tokenizer

    folder = tmp_path_factory.mktemp("tiny_tok")
    tiny_tokenizer().save_pretrained(folder)
    return str(folder)


def cfg(tok_dir, **kw):
    base = {"name": "ruler", "tasks": list(TASKS), "length": 2048, "n_per_task": 2, "seed": 0,
            "tokenizer": tok_dir, "limit": None, "answer_tokens": "ctxbench"}
    return OmegaConf.create({**base, **kw})


def flat(samples):
    return [(s.history.id, s.history.text, s.questions[0].question, s.questions[0].meta) for s in samples]


@pytest.fixture(scope="module")
def samples(tok_dir):
    return ruler_samples(cfg(tok_dir))


def test_same_seed_same_examples_other_seed_other_examples(tok_dir, samples):
    assert flat(ruler_samples(cfg(tok_dir))) == flat(samples)
    other = ruler_samples(cfg(tok_dir, seed=1))
    assert [s.history.id for s in other] == [s.history.id for s in samples]
    assert all(a.history.text != b.history.text for a, b in zip(other, samples))
    assert len(samples) == 2 * len(TASKS)
    assert ruler_samples(cfg(tok_dir, limit=3, tasks=["vt", "cwe"])) == ruler_samples(cfg(tok_dir, tasks=["vt", "cwe"]))[:3]


def test_every_expected_string_is_in_the_context_and_the_answer_joins_them(samples):
    for s in samples:
        q = s.questions[0]
        assert q.id == s.history.id and q.category == q.meta["task"]
        assert q.meta["outputs"] and all(o in s.history.text for o in q.meta["outputs"])
        assert q.answer == ", ".join(q.meta["outputs"])
        shots = 1 if q.meta["task"] == "cwe" else 0  # cwe's worked example asks the same question
        assert s.history.text.count(q.question) == shots  # the question is not part of the history
        assert s.history.sessions == [] and s.history.speakers == []


def test_needles_sit_at_their_depths(samples):
    """A needle at depth d has a share d of the haystack's sentences before it (RULER's sentence depths)."""
    for s in samples:
        m = s.questions[0].meta
        if TASKS[m["task"]].family != "niah":
            continue
        body = s.history.text.split("\n", 1)[1]  # the haystack after the instruction line
        sents = re.split(r"(?<=[.!?])\s+", body)
        real = {i for i, x in enumerate(sents) if (hit := NEEDLE.fullmatch(x)) and hit.group(2) in m["outputs"]}
        if len(real) != len(m["depths"]):  # multikey_1 / multiquery: the asked needles are some of the needles
            continue
        hay = len(sents) - len([x for x in sents if NEEDLE.fullmatch(x)]) if m["haystack"] != "needle" \
            else len(sents) - len(real)
        before = [sum(1 for j in range(i) if j not in real and (m["haystack"] == "needle" or not NEEDLE.fullmatch(sents[j])))
                  for i in sorted(real)]
        got = [b / hay for b in before]
        step = 1 / hay + 0.01  # a needle goes between units: depth is exact to one unit
        assert all(abs(a - d) <= step for a, d in zip(got, m["depths"])), (m["task"], got, m["depths"])


def test_multikey_distractors_have_other_keys(tok_dir):
    for task in ("niah_multikey_2", "niah_multikey_3"):
        for s in ruler_samples(cfg(tok_dir, tasks=[task])):
            q = s.questions[0]
            found = NEEDLE.findall(s.history.text)
            real = [(k, v) for k, v in found if v in q.meta["outputs"]]
            assert len(real) == 1 and len(found) > 10, task  # one real needle among many distractors
            assert all(k != real[0][0] for k, _ in found if (k, _) != real[0]), task
            assert real[0][0] in q.question


def test_length_fits_within_two_percent(tok_dir):
    for length in (2048, 8192):
        for s in ruler_samples(cfg(tok_dir, length=length, n_per_task=1)):
            m = s.questions[0].meta
            total = len((s.history.text + "\n" + s.questions[0].question + m["answer_prefix"]).encode())
            assert 0.98 * length <= total <= length, (m["task"], length, total)
            assert m["context_tokens"] == len(s.history.text.encode()) and m["length"] == length


def test_ruler_match_is_string_match_all():
    q = Question(id="x", question="?", answer="1234567, 7654321", meta={"outputs": ["1234567", "7654321"]})
    m = RulerMatch()
    assert m.score("The numbers are 1234567 and 7654321.", q) == 1.0
    assert m.score("1234567", q) == 0.5
    assert m.score("none", q) == 0.0
    assert string_match_all("ABC-def\x00", ["abc-DEF"]) == 1.0  # case-insensitive, trailing control chars stripped
    bare = Question(id="y", question="?", answer="alpha, beta")  # a predictions file: no meta
    assert m.score("beta", bare) == 0.5


def test_ruler_and_kvpress_read_control_characters_each_their_own_way():
    """RULER's postprocess_pred replaces [\\x00-\\x1f] with a newline; kvpress's calculate_metrics removes them.
    ruler_match is RULER's (its name's source), ruler_match_kvpress kvpress's."""
    from ctxbench.core import registry
    from ctxbench.metrics.ruler import postprocess

    q = Question(id="x", question="?", answer="1234567", meta={"outputs": ["1234567"]})
    split = "The number is 1234\x00567."
    assert postprocess(split, "ruler") == "The number is 1234\n567." and postprocess(split) == postprocess(split, "ruler")
    assert postprocess(split, "kvpress") == "The number is 1234567."
    assert RulerMatch().score(split, q) == 0.0  # RULER: the control character still splits the number
    assert registry.get("metric", "ruler_match_kvpress")().score(split, q) == 1.0  # kvpress: it is gone
    assert "RULER" in RulerMatch.reference and "kvpress" in registry.get("metric", "ruler_match_kvpress").reference


def test_malformed_config_is_one_line(tok_dir):
    from ctxbench.config.bounds import problem

    with pytest.raises(ConfigError, match="unknown task 'niah_single_9'") as e:
        ruler_samples(cfg(tok_dir, tasks=["niah_single_9"]))
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="shorter than task niah_single_1"):
        ruler_samples(cfg(tok_dir, length=64, tasks=["niah_single_1"]))
    assert "must be in [64, 131072]" in problem("dataset.length", 32, cfg(tok_dir))
    msg = problem("dataset.tasks", ["vt", "nope"], cfg(tok_dir))
    assert msg.startswith("config key 'dataset.tasks' item 1 must be one of niah_single_1") and "nope" in msg
    assert "n_per_task" in problem("dataset.n_per_task", 0, cfg(tok_dir))


def ruler_question(tok_dir):
    s = ruler_samples(cfg(tok_dir, tasks=["niah_single_1"], n_per_task=1, length=512))[0]
    return s.questions[0]


def test_reply_prefix_ends_the_kv_frame(tok_dir):
    from transformers import AutoTokenizer

    from ctxbench.methods.kv_prompt import qa_frame

    tok = AutoTokenizer.from_pretrained(tok_dir)
    q = ruler_question(tok_dir)
    prompt = get_prompt("ruler")
    prefix = q.meta["answer_prefix"].strip()
    before, after = qa_frame(tok, prompt, q, [])
    assert after.endswith(prefix) and q.question in after
    assert before == qa_frame(tok, prompt, None, [])[0]  # the part before the context does not depend on it
    assert after.index(q.question) < after.index("<|im_start|>assistant\n" + prefix)
    brief_after = qa_frame(tok, get_prompt("brief"), q, [])[1]
    assert brief_after.endswith("<|im_start|>assistant\n")  # a prompt without a prefix opens a new turn
    assert prompt.instruction_text(q).endswith("\n" + prefix)
    assert prompt.postprocess(q, " 1234567\n2345678 ") == "1234567\n2345678"  # lists are kept whole


def test_reply_prefix_reaches_the_hf_backend_render(tok_dir):
    from ctxbench.config.compose import option_config
    from ctxbench.llm.hf import HFChatLLM

    llm = HFChatLLM(option_config("llm", {"name": "hf", "model": "tiny", "context_window": 2048}))
    q = ruler_question(tok_dir)
    prefix = q.meta["answer_prefix"].strip()
    msgs = get_prompt("ruler").messages(q, "CONTEXT", [])
    assert msgs[-1] == {"role": "assistant", "content": prefix} and "CONTEXT\n" + q.question == msgs[-2]["content"]
    text = llm.tokenizer.decode(llm.encode_chat(msgs))
    assert text.endswith("<|im_start|>assistant\n" + prefix)  # continued, no new turn after it
    r = llm.chat(msgs, max_new_tokens=3)
    assert r.prompt_tokens == len(llm.encode_chat(msgs)) and not r.failed


def test_protocol_pure_hides_the_expected_strings_but_keeps_the_prefix(tok_dir):
    from ctxbench.qa.forms import without_gold

    q = ruler_question(tok_dir)
    told = without_gold(q)
    assert "outputs" not in told.meta and told.answer == ""
    assert get_prompt("ruler").messages(told, "C") == get_prompt("ruler").messages(q, "C")


def test_default_metrics_gain_the_datasets_own(tok_dir):
    from ctxbench.evaluation.score import default_metrics, metric_names

    c = OmegaConf.create({"metrics": default_metrics(), "dataset": cfg(tok_dir)})
    assert metric_names(c) == default_metrics() + ["ruler_match"]
    c.metrics = ["f1"]  # a list the user chose is kept as it is
    assert metric_names(c) == ["f1"]
    c.metrics, c.dataset.name = default_metrics(), "locomo_sample"
    assert metric_names(c) == default_metrics()


def test_noise_and_needle_haystacks_use_ruler_uniform_slots_and_never_end_with_the_needle(tok_dir):
    """niah.py / variable_tracking.py: noise and needle haystacks put each item before a line drawn with
    random.sample(range(lines), k) — never after the last line. Only essay haystacks use the 40-point
    depth grid (whose 100% point put the needle last in ~1 of 40 niah_single_1 examples before issue 54)."""
    from ctxbench.data.ruler.haystack import DEPTHS, uniform_slots

    assert all(sorted(uniform_slots(10, 3, s)) == uniform_slots(10, 3, s) for s in range(50))
    seen = {x for s in range(400) for x in uniform_slots(10, 1, s)}
    assert seen == set(range(10))  # uniform over the lines, the last line included, never past it
    samples = ruler_samples(cfg(tok_dir, tasks=["niah_single_1", "niah_multikey_2", "vt", "niah_single_2"],
                                length=2048, n_per_task=20))
    last_is_item = 0
    off_grid = 0
    for s in samples:
        m = s.questions[0].meta
        lines = s.history.text.rstrip().split("\n")
        if m["haystack"] == "essay":
            assert all(d in DEPTHS for d in m["depths"])  # essay: RULER's grid
            continue
        off_grid += any(d not in DEPTHS for d in m["depths"])
        tail = lines[-1]
        last_is_item += any(o in tail for o in m["outputs"]) or ("VAR" in tail and m["task"] == "vt")
        assert all(0 <= d < 1 for d in m["depths"])
    assert last_is_item == 0 and off_grid > 0


def test_ruler_length_is_counted_in_the_evaluated_models_tokenizer(capsys):
    """RULER counts dataset.length in the evaluated model's tokenizer: eval binds dataset.tokenizer=null to it
    (before issue 54 it stayed SmolLM2's, so a Llama run's 4k was 4k SmolLM2 tokens)."""
    from ctxbench.evaluation.evaluator import bind_ruler_tokenizer

    def bound(**cfg):
        c = OmegaConf.create({"dataset": {"name": "ruler", "tokenizer": None}, **cfg})
        bind_ruler_tokenizer(c)
        return c.dataset.tokenizer

    hub = "meta-llama/Meta-Llama-3.1-8B-Instruct"
    assert bound(method={"name": "snapkv"}, model={"name": "hf", "path": hub}) == hub
    assert bound(method={"name": "snapkv"}, model={"name": "smollm2_135m"}) == "smollm2_135m"
    assert bound(memory={"name": "rag"}, llm={"name": "hf", "model": hub}) == hub
    assert bound(memory={"name": "rag"}, llm={"name": "openai", "model": "m", "tokenizer": "/tok"}) == "/tok"
    assert capsys.readouterr().err == ""
    assert bound(memory={"name": "rag"}, llm={"name": "openai", "model": "gpt-4o-mini", "tokenizer": None}) == "smollm2_135m"
    assert "names no tokenizer" in capsys.readouterr().err  # said, not silent
    c = OmegaConf.create({"dataset": {"name": "ruler", "tokenizer": "/mine"}, "method": {"name": "snapkv"},
                          "model": {"name": "hf", "path": hub}})
    bind_ruler_tokenizer(c)
    assert c.dataset.tokenizer == "/mine"  # an explicit tokenizer stands


def test_fwe_gold_is_the_three_most_frequent_coded_words(tok_dir):
    """freq_words_extraction.py: counts int(n · k^-2 / ζ(2)) for the k-th vocabulary word, '...' first (noise the
    question says to ignore), gold = vocab[1:4]: the three most frequent words after it, most frequent first."""
    from collections import Counter

    for s in ruler_samples(cfg(tok_dir, tasks=["fwe"], n_per_task=3)):
        out = s.questions[0].meta["outputs"]
        words = s.history.text.split(". ", 1)[1].split() if ". " in s.history.text else s.history.text.split()
        counts = Counter(w for w in words if w.isalpha() and len(w) == 6 and w.islower())
        ranked = [w for w, _ in counts.most_common()]
        assert counts["..."] == 0 and s.history.text.count(" ... ") > counts[out[0]]  # '...' is the most frequent
        assert ranked[:3] == out and counts[out[0]] > counts[out[1]] > counts[out[2]] > counts[ranked[3]]


def test_ruler_answer_tokens_restores_rulers_caps_and_reservation(tok_dir):
    """dataset.answer_tokens=ruler: RULER's tokens_to_generate per task (niah 128, vt 30, cwe 120, fwe 50) is the
    answer cap and is reserved inside the length (input + cap <= length); ctxbench's default keeps one cap (the
    prompt's 64) and the whole length for the input."""
    from ctxbench.core.system import System

    def count(text):  # the byte-level tokenizer: one token a byte
        return len(text.encode())

    ours = {s.questions[0].meta["task"]: s for s in ruler_samples(cfg(tok_dir, n_per_task=1, tasks=["niah_single_1", "vt", "cwe", "fwe"]))}
    theirs = {s.questions[0].meta["task"]: s for s in ruler_samples(cfg(tok_dir, n_per_task=1, answer_tokens="ruler",
                                                                        tasks=["niah_single_1", "vt", "cwe", "fwe"]))}
    for task, cap in (("niah_single_1", 128), ("vt", 30), ("cwe", 120), ("fwe", 50)):
        q = theirs[task].questions[0]
        assert q.meta["max_new_tokens"] == cap and "max_new_tokens" not in ours[task].questions[0].meta
        whole = f"{theirs[task].history.text}\n{q.question}{q.meta['answer_prefix']}"
        assert count(whole) + cap <= 2048 < count(whole) + cap + 60  # reserved, and still fitted closely
        assert len(theirs[task].history.text) < len(ours[task].history.text)

    class Bare(System):
        def ingest(self, history):
            pass

        def answer(self, question):
            pass

    s = Bare()
    s.use_prompt(get_prompt("ruler"))
    assert s.answer_max_tokens(theirs["vt"].questions[0]) == 30 and s.answer_max_tokens(ours["vt"].questions[0]) == 64
    assert s.answer_max_tokens() == 64
