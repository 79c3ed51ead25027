"""The dataset group: one schema per dataset loader, each inheriting :class:`DatasetSettings`.

A shipped sample in a dataset's own format (locomo_sample, dialsim_sample, pile_sample, ...) has no schema of its
own: its YAML names the dataset's schema and keeps what differs (its name and path); see ctxbench/config/setting.py."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ctxbench.config.setting import (  # noqa: F401 - the bound kit
    COSINE, COUNT, POSITIVE, REQUIRED, SEED, SHARE, between, ge, gt, configures, nested, registered, setting, tables)

SCHEMAS, BY_NAME = tables()  # filled by @configures below


@dataclass
class DatasetSettings:
    """What every dataset's config holds: its registered name and how much of it is read."""

    name: str = setting(REQUIRED, 'the registered name this config builds (ctxbench ls lists them)')
    limit: int | None = setting(None, 'rows to read', ge(0, note='0 or null = all'))


@configures('ccm_dailydialog')
@dataclass
class CcmDailydialogDataset(DatasetSettings):
    """DailyDialog from the hub (CCM's dialogue setting; needs the network): each turn but the last two is a step, the second-to-last is read raw, the last is the output. Written by ctxbench/methods/ccm_data.py."""

    name: str = registered('ccm_dailydialog')
    hub_id: str | None = setting('li2017dailydialog/daily_dialog', 'any hub copy with a list-of-utterances field')
    subset: str | None = setting(None, 'hub config name')
    split: str = setting('train', "train | dev (the benchmark's test outputs are not public)", open="the dataset's own split names (its files or hub copy)")
    field: str = setting('dialog', 'the list of utterances')
    limit: int | None = setting(1000, 'rows to read', ge(0, note='0 or null = all'))


@configures('ccm_lamp')
@dataclass
class CcmLampDataset(DatasetSettings):
    """LaMP (Salemi et al., 2023) in the benchmark's own files, as the CCM reference reads them: {split}_questions.json ([{id, input, profile: [...]}]) and {split}_outputs.json ({golds: [{id, output}]}). Download: https://ciir.cs.umass.edu/downloads/LaMP/LaMP_<i>/<split>/<split>_{questions,outputs}.json (LaMP_2 lives under LaMP_2/new/). Profile items are the steps, the input the question, the gold output the answer. Read by ctxbench/methods/ccm_data.py."""

    name: str = registered('ccm_lamp')
    path: str | None = setting(None, 'a folder with the two files (offline)')
    hub_id: str | None = setting(None, 'or a hub copy with rows {input, profile, output}')
    task_index: int = setting(2, 'LaMP task number (only names the download URL in an error)', between(1, 7))
    split: str = setting('dev', "train | dev (the benchmark's test outputs are not public)",
                         open="the file prefix: {split}_questions.json; the loader names a missing file")
    profile_field: str = setting('profile', 'field holding the user profile')
    input_field: str = setting('input', 'field holding the question')
    output_field: str = setting('output', 'field holding the answer')
    max_profile: int = setting(16, 'profile items (steps) per row', POSITIVE)
    limit: int | None = setting(1000, 'rows to read', ge(0, note='0 or null = all'))


@configures('ccm_metaicl')
@dataclass
class CcmMetaiclDataset(DatasetSettings):
    """MetaICL (Min et al., NAACL 2022) in its own format, as CCM evaluates it: rows {task, input, output, options} in {task}_{k}_{seed}_{train,test}.jsonl — the k train rows are the demonstrations (one CCM step each), every test row a question whose options eval task=choice ranks. Read by ctxbench/methods/ccm_data.py. offline: dataset.path=<folder with MetaICL's data/ files, as facebookresearch/MetaICL's _build_gym.py writes them> online:  the hub copy allenai/metaicl-data (files fetched with huggingface_hub; the file layout is file_pattern below — set it if the repo's layout differs)"""

    name: str = registered('ccm_metaicl')
    path: str | None = setting(None, 'a folder with the two files (offline)')
    hub_id: str | None = setting('allenai/metaicl-data', 'any hub copy with a list-of-utterances field')
    file_pattern: str = setting('{task}/{task}_{k}_{seed}_{split}.jsonl', 'file names under path, formatted with task, k, seed and split')
    task: str = setting('superglue-cb', "a MetaICL test task (CCM's Table 23 averages its test tasks; pick one per run)")
    k: int = setting(16, 'demonstrations (CCM: time step 16)', POSITIVE)
    sampling_seed: int = setting(100, "MetaICL's sampling seeds (the {seed} in its file names): 100, 13, 21, 42, 87", COUNT)
    split: str = setting('test', "train | dev (the benchmark's test outputs are not public)", open="the dataset's own split names (its files or hub copy)")
    limit: int | None = setting(1000, 'rows to read', ge(0, note='0 or null = all'))


@configures('dialsim', 'dialsim', 'dialsim_sample')
@dataclass
class DialsimDataset(DatasetSettings):
    """DialSim v1.1 pickle ({friends,bigbang,theoffice}_dialsim.pickle), read with a restricted unpickler."""

    name: str = registered('dialsim')
    path: str | None = setting(None, 'null = data/downloads/dialsim/<show>_dialsim.pickle')
    show: str = setting('friends', 'friends | bigbang | theoffice (when path is null)', open='names the default file when dataset.path is null; a label otherwise (sample)')
    answer_format: str = setting('multi_choice', 'multi_choice (options A-E) | open_ended (option-E answers become "I don\'t know.")', choices=('multi_choice', 'open_ended'))
    per_episode: bool = setting(False, 'false = the show is one continuous history; true = one sample per episode')
    episodes: list | None = setting(None, 'keep these episodes (keys of the pickle)')
    max_episodes: int | None = setting(3, 'else the first N episodes (null = all; a full show is ~hundreds of thousands of tokens)', ge(0, note='0 or null = all'))
    levels: list | None = setting(None, '[hard] (temporal-KG questions) and/or [easy] (fan-quiz questions); null = both')
    question_types: list | None = setting(None, 'e.g. [past, cur, ans_w_time, dont_know_unans]')
    sessions: int | None = setting(None, 'first N sessions (of the show, or of each episode), and the questions asked in them', ge(1, note='null = all'))
    limit: int | None = setting(None, 'first N questions per sample', ge(0, note='0 or null = all'))
    question_time: str = setting('session', 'session = each question sees the sessions up to its own (the simulator; paper) | none = the whole show for every question', choices=('session', 'none'))


@configures('locomo', 'locomo', 'locomo_sample')
@dataclass
class LocomoDataset(DatasetSettings):
    """LoCoMo (official locomo10.json): 10 conversations, 272 sessions, 5,882 turns, 1,986 QA."""

    name: str = registered('locomo')
    path: str | None = setting(None, 'null = data/downloads/locomo10.json (python -m ctxbench data download locomo)')
    conversations: list | None = setting(None, 'subset by sample_id, e.g. [conv-26]')
    sessions: int | None = setting(None, 'first N sessions per conversation, and only the questions with evidence in them (null = all)', ge(1, note='null = all'))
    categories: list | None = setting(None, 'subset by category id or name, e.g. [1,4] or [multi-hop,single-hop]; 5 = adversarial')
    limit: int | None = setting(None, 'first N questions per conversation (after the sessions and category filters)', ge(0, note='0 or null = all'))
    errata: str | None = setting(None, "a published errata file of gold answers (dial481/locomo-audit's errors.json shape): every run is also scored under the corrected gold, results.md states the ceiling (ctxbench/data/errata.py)")


@configures('locomo_pwc')
@dataclass
class LocomoPwcDataset(DatasetSettings):
    """LoCoMo sessions as PwC rows (rendered session → question → answer) for ICAE fine-tuning, split by conversation."""

    name: str = registered('locomo_pwc')
    path: str | None = setting(None, 'LoCoMo file; null = data/downloads/locomo10.json')
    split: str = setting('train', 'train | test | all', choices=('train', 'test', 'all'))
    test_conversations: list = setting(['conv-26', 'conv-30'], 'held out as split=test; the others are split=train')
    categories: list | None = setting(None, 'keep only these categories (ids or names); null = all five')
    with_dates: bool = setting(True, 'start each rendered session with "DATE: ..."')
    per_question: bool = setting(False, 'true = one sample per question (exact PwC row shape)')
    limit: int | None = setting(None, 'at most N samples', ge(0, note='0 or null = all'))


@configures('longmemeval')
@dataclass
class LongmemevalDataset(DatasetSettings):
    """LongMemEval (Wu et al., ICLR 2025): 500 questions, each over its own haystack of chat sessions, in six types plus abstention (ids ending _abs); releases s (~50 sessions a question), m (~500) and oracle (the evidence sessions). Read by ctxbench/data/longmemeval.py."""

    name: str = registered('longmemeval')
    path: str | None = setting(None, 'a released file, or a folder holding longmemeval_{s,m}_cleaned.json / longmemeval_oracle.json; null = data/downloads/ (python -m ctxbench data download longmemeval)')
    release: str = setting('s', 'which released file to read from a folder: s | m | oracle (also written to each question as meta.release)', choices=('s', 'm', 'oracle'))
    questions: list | None = setting(None, 'keep these question ids, e.g. [e47becba, gpt4_2655b836]')
    question_types: list | None = setting(None, 'keep these question types, e.g. [temporal-reasoning, knowledge-update]; abstention = the _abs questions')
    limit: int | None = setting(None, 'the first N questions (after the other filters)', ge(0, note='0 or null = all'))
    after_question: str = setting('drop', "sessions dated after their question (not evidence): drop = ctxbench's (no history reaches past its question) | keep = LongMemEval's own (every haystack session read); report table=longmemeval counts drops as a departure", choices=('drop', 'keep'))


@configures('longmemeval_sample')
@dataclass
class LongmemevalSampleDataset(LongmemevalDataset):
    """A short made-up LongMemEval-format file written for this project (13 questions, all 6 types, 2 abstention; haystacks of 3 sessions from a shared pool of 19)."""

    name: str = registered('longmemeval_sample')
    path: str | None = setting('data/samples/longmemeval_sample.json', 'a LongMemEval-format file')
    release: str = setting('sample', 'written to each question as meta.release', choices=('sample', 's', 'm', 'oracle'))
    questions: list | None = setting(None, 'keep these question ids')
    question_types: list | None = setting(None, 'keep these question types; abstention = the _abs questions')
    limit: int | None = setting(None, 'the first N questions', ge(0, note='0 or null = all'))
    after_question: str = setting('drop', "sessions dated after their question (not evidence): drop = ctxbench's (no history reaches past its question) | keep = LongMemEval's own (every haystack session read); report table=longmemeval counts drops as a departure", choices=('drop', 'keep'))


@configures('pile', 'pile', 'pile_sample')
@dataclass
class PileDataset(DatasetSettings):
    """The Pile: JSONL {text, meta: {pile_set_name}} shards (.jsonl, or .jsonl.zst with `pip install zstandard`)."""

    name: str = registered('pile')
    path: str | None = setting(None, 'file or folder of shards; null = data/downloads/pile_validation.jsonl; or a hub id (streamed)')
    split: str = setting('validation', 'hub split when path is a hub id (monology/pile-uncopyrighted: train | validation | test)',
                         open="any split of the hub dataset named by path")
    subsets: list | None = setting(None, 'keep these pile_set_name values, e.g. [Pile-CC, ArXiv]')
    limit: int | None = setting(1000, 'at most N documents', ge(0, note='0 or null = all'))
    min_chars: int = setting(0, 'skip shorter documents (counted)', COUNT)
    max_chars: int | None = setting(None, 'cut each document to this many characters', ge(0, note='0 or null = no cut'))


@configures('pwc', 'pwc', 'pwc_sample')
@dataclass
class PwcDataset(DatasetSettings):
    """PwC (ICAE's Prompt-with-Context): JSONL {input, prompt, answer}; 240k train / 18k test rows on the hub."""

    name: str = registered('pwc')
    path: str | None = setting(None, 'null = data/downloads/pwc_test.jsonl; a file, or the hub id sggetao/PwC (online only)')
    split: str = setting('test', 'hub split when path is a hub id')
    streaming: bool = setting(True, 'hub: stream rows instead of downloading the whole split')
    group_by_input: bool = setting(False, 'true = rows sharing one context become one sample (context encoded once)')
    limit: int | None = setting(None, 'at most N rows', ge(0, note='0 or null = all'))


@configures('ruler')
@dataclass
class RulerDataset(DatasetSettings):
    """RULER-style synthetic long-context tasks, generated offline (seeded, deterministic): needle in a haystack (single / multikey / multivalue / multiquery), variable tracking, common and frequent words extraction over noise, real prose (the shipped Shakespeare sample) or distractor needles. Ask with qa_prompt=ruler, score with metrics=[ruler_match] (docs/ruler.md)."""

    name: str = registered('ruler')
    tasks: list = setting(['niah_single_1', 'niah_single_2', 'niah_single_3', 'niah_multikey_1', 'niah_multikey_2', 'niah_multikey_3', 'niah_multivalue', 'niah_multiquery', 'vt', 'cwe', 'fwe'], "RULER's task names (ctxbench/data/ruler/templates.py TASKS)", choices=('niah_single_1', 'niah_single_2', 'niah_single_3', 'niah_multikey_1', 'niah_multikey_2', 'niah_multikey_3', 'niah_multivalue', 'niah_multiquery', 'vt', 'cwe', 'fwe'), nonempty='name at least one task, e.g. dataset.tasks=[niah_single_1,vt]')
    length: int = setting(4096, "tokens of RULER's input (context + question + answer prefix) in dataset.tokenizer; the haystack grows or shrinks to fit", between(64, 131072))
    n_per_task: int = setting(10, 'examples per task', POSITIVE)
    seed: int = setting(0, 'examples are drawn from random.Random("ruler:<seed>:<task>:<length>:<i>")', SEED)
    tokenizer: str | None = setting(None, "the tokenizer lengths are counted in: a folder, a hub id, or smollm2_135m (the packaged SmolLM2's); null = the evaluated model's (eval binds model.path / llm.model / llm.tokenizer; SmolLM2's, with a warning, when the config names none)")
    limit: int | None = setting(None, 'the first N examples (tasks in the order given)', ge(0, note='0 or null = all'))
    answer_tokens: str = setting('ctxbench', "ctxbench = one answer cap for every task (qa_prompt=ruler's 64) and dataset.length all input; ruler = RULER's per-task cap (niah 128, vt 30, cwe 120, fwe 50) and the length reserving it (the input is length - that cap)", choices=('ctxbench', 'ruler'))


@configures('text', 'shakespeare_sample', 'text', 'text_sample')
@dataclass
class TextDataset(DatasetSettings):
    """Any text corpus: a .txt file (one document), a .jsonl file ({"text": ...} per line) or a folder."""

    name: str = registered('text')
    path: str | None = setting(REQUIRED, 'a .txt file (one document), a .jsonl file ({"text": ...} per line) or a folder')
    text_field: str = setting('text', 'field holding the text')
    max_chars: int | None = setting(None, 'cut each document to this many characters', ge(0, note='0 or null = no cut'))
