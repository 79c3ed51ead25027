"""The primary configs: conf/<command>.yaml's own keys.

Generated once from the YAML defaults; now the one source of each key (see ctxbench/config/setting.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ctxbench.config.setting import (  # noqa: F401 - the generator's full kit
    COSINE, COUNT, POSITIVE, REQUIRED, SEED, SHARE, between, ge, gt, nested, setting)


@dataclass
class TrainConfigTrainer:
    """trainer"""

    max_steps: int = setting(15, 'optimizer steps', COUNT)
    batch_size: int = setting(2, 'examples per micro-batch', POSITIVE)
    grad_accum: int = setting(1, 'micro-batches per optimizer step', POSITIVE)
    lr: float = setting(0.003, 'peak learning rate', gt(0))
    weight_decay: float = setting(0.0, 'AdamW weight decay', COUNT)
    betas: list = setting([0.9, 0.999], "Adam's beta1, beta2", items=between(0, 1, high_open=True, note="Adam's beta1, beta2"), length=(2, 'two numbers'), nonempty="Adam's two betas, e.g. [0.9,0.999]")
    scheduler: str = setting('cosine', 'cosine | linear | constant', choices=('cosine', 'linear', 'constant'))
    warmup_ratio: float = setting(0.03, 'share of max_steps spent warming up', SHARE)
    warmup_steps: int | None = setting(None, 'overrides warmup_ratio when set', ge(0, note='null = from warmup_ratio'))
    max_grad_norm: float = setting(1.0, 'gradient clipping norm (0 = none)', ge(0, note='0 = no clipping'))
    precision: str = setting('fp32', 'fp32 | bf16 | fp16', choices=('fp32', 'bf16', 'fp16'))
    gradient_checkpointing: bool = setting(False, 'recompute activations in the backward pass')
    mmap_threshold_kb: int | None = setting(None, "glibc: heap blocks of at least this many KB are mapped apart and given back when freed (fixed: glibc otherwise raises it after the first step and a step's freed activations stay resident). 128: ~150 MB less peak RSS on SmolLM2's ICAE step, but every large tensor is a fresh mapping (page faults: ~+20% step time on 1 CPU thread); null = glibc's dynamic default", ge(1, note='null = glibc default'))
    log_every: int = setting(1, 'log every N steps', POSITIVE)
    eval_every: int = setting(5, '0 = only at the end', ge(0, note='0 = only at the end'))
    eval_fraction: float = setting(0.05, 'held-out share of training examples for the eval hook', between(0, 1, high_open=True))
    max_eval_batches: int = setting(4, 'batches per held-out evaluation', POSITIVE)
    save_every: int = setting(10, 'checkpoint every N steps (0 = only at the end)', ge(0, note='0 = only at the end'))
    keep_checkpoints: int = setting(2, 'checkpoints kept (0 = all)', ge(0, note='0 = keep all'))
    resume: str | None = setting(None, 'null | auto | path to a checkpoint folder', open='auto or a checkpoint path')
    stop_after: int | None = setting(None, 'stop (as if interrupted) after this step; for resume tests', ge(0, note='0 or null = never'))
    num_workers: int = setting(0, 'DataLoader workers', COUNT)
    progress: bool = setting(True, 'tqdm progress bar')


@dataclass
class TrainConfig:
    """python -m ctxbench train [method=...] [dataset=...] [model=...] [launcher=...] [logger=...]"""

    seed: int = setting(0, 'random seed', SEED)
    checkpoint: str | None = setting(None, 'a trained run folder (or its checkpoints/step_N) to start from')
    force_resume: bool = setting(False, 'true = reuse a run folder made with another config (its .ctxbench/run.json records the new one)')
    trainer: TrainConfigTrainer | None = nested(TrainConfigTrainer, "the training loop's settings")


@dataclass
class EvalConfigJudge:
    """llm_judge's runs (the Mem0 paper's J: mean ± std over 10 judge runs; metrics/judge.py)"""

    runs: int = setting(1, 'judge every answer this many times: J = mean over runs, llm_judge_std = std over runs', POSITIVE)
    temperature: float = setting(0.0, "the judge's sampling temperature (Mem0's code: 0); a greedy local judge needs > 0 for runs to differ", between(0, 2, note="0 = greedy; the OpenAI API's range"))
    seed: int = setting(0, 'with runs > 1, run i sends seed + i (its own call and cache key); runs=1 sends no seed', SEED)
    panel: list | None = setting(None, "the judges every answer is judged under (ctxbench/metrics/judges/: mem0, zep, evermemos, longmemeval, strict); llm_judge = the first; two or more also give llm_judge_<name> each and add llm_judge to metrics; null = the dataset's own judge (dataset=longmemeval: longmemeval), else [mem0]", nonempty='name at least one judge, e.g. judge.panel=[mem0,zep,strict]')
    calibration: str | None = setting(None, "a judges.json written by `report judges`: each panel judge's false-accept / false-reject rates and lenient flag go into results.json judges (when judge, prompt version and model match)")
    lenient_above: float = setting(0.2, 'a judge that accepts more than this share of the calibration set\'s wrong answers is flagged lenient', SHARE)
    parse: str = setting('ctxbench', "how a judge's reply is read: ctxbench = the judge prompt's parse (mem0's: JSON or the one label word named, any case); source = the source's own where it differs (mem0's evaluate_llm_judge: the JSON label exactly CORRECT, case-sensitive)", choices=('ctxbench', 'source'))


@dataclass
class EvalConfigPrice:
    """the price estimate=true prints (USD per million tokens; null = no price line)"""

    input_per_mtok: float | None = setting(None, 'USD per million input (prompt) tokens; null = no price', ge(0, note='null = no price'))
    output_per_mtok: float | None = setting(None, 'USD per million output tokens (counted at the calls\' caps: an upper bound); null = no price', ge(0, note='null = no price'))


@dataclass
class EvalConfig:
    """python -m ctxbench eval memory=NAME|method=NAME dataset=NAME [llm=...] [limit=N] [hydra.run.dir=DIR] python -m ctxbench eval task=perplexity|reconstruction|choice method=NAME [checkpoint=DIR] dataset=NAME A rerun with the same hydra.run.dir resumes: answered questions are skipped. The folder is bound to its config (.ctxbench/run.json; force_resume=true to change it) and to one process at a time (ctxbench/runs/guard.py). Sweeps: python -m ctxbench eval -m memory=amem memory.k=10,20,30 dataset=locomo"""

    checkpoint: str | None = setting(None, 'a trained run folder (outputs/train/<run>) loaded into method=')
    seed: int = setting(0, 'random seed', SEED)
    qa_prompt: str = setting('brief', "locomo | mem0 | mem0g | amem | brief | ruler | longmemeval   the answer prompt every system uses (ctxbench/qa/prompts/); brief: chosen on the dev split (ctxbench/qa/registry.py); paper experiments set their paper's; ruler: RULER's, with its answer prefix starting the reply (dataset=ruler); longmemeval: LongMemEval's reader prompt (history, Current Date, question). Every prompt shows a question's date (meta.question_date) when the dataset gives one; a qa_prompt plug-in's name too (docs/plugins.md)", choices=('locomo', 'mem0', 'mem0g', 'amem', 'brief', 'ruler', 'longmemeval'), plugins='qa_prompt')
    limit: int | None = setting(None, 'answer at most N questions, in dataset order (null or 0 = all; < 0 is refused)', ge(0, note='0 or null = all'))
    metrics: list = setting(['f1', 'f1_set', 'bleu1', 'rouge1', 'rouge2', 'rougeL'], "add llm_judge for the Mem0 paper's J", nonempty='name at least one metric (e.g. metrics=[f1,bleu1]); `python -m ctxbench ls` lists them')
    judge_llm: dict | None = setting(None, 'an llm config for llm_judge (null = the llm above)')
    judge: EvalConfigJudge | None = nested(EvalConfigJudge, "llm_judge's runs (the Mem0 paper's J: mean ± std over 10 judge runs; metrics/judge.py)")
    progress: bool = setting(True, 'tqdm progress bars')
    concurrency: int | str = setting('auto', 'auto | N: workers answering histories and questions at once (ctxbench/evaluation/pool.py); auto = llm.concurrency (openai) or llm.batch_size (hf, batched generation); 1 = one at a time; method= always 1', ge(1, note="or auto: the llm backend's concurrency / batch_size"), choices=('auto',))
    log_samples: bool = setting(False, "true: samples.jsonl (each answer's messages, context, reply) + construction_calls.jsonl (ctxbench/evaluation/sample_log.py); with logger=wandb also the samples table (one row per question)")
    max_failed_fraction: float = setting(0.1, 'exit non-zero when more than this share of LLM calls, structured outputs or answers failed', SHARE)
    bypass_held_share: float = setting(0.8, "health.warnings: a question whose held context is at least this share of its history's tokens bypasses memory (ctxbench/metrics/guards.py)", between(0, 1, low_open=True))
    protocol_pure: bool = setting(False, "true: systems answer without the gold category, answer, adversarial distractor or evidence (no category-chosen prompt form, hint or A-Mem k: ctxbench/qa/forms.py without_gold; docs/evaluation.md lists what false passes on); scoring still uses them")
    force_resume: bool = setting(False, 'true = reuse a run folder made with another config (its .ctxbench/run.json records the new one)')
    estimate: bool = setting(False, "true: print and write estimate.json (histories, sessions, distinct sessions, LLM calls and input/output tokens per phase, calls the call cache would serve, embeddings, price) WITHOUT calling or loading a model, then stop (ctxbench/evaluation/estimate.py, docs/estimate.md)")
    price: EvalConfigPrice | None = nested(EvalConfigPrice, 'the price estimate=true prints (USD per million tokens; null = no price line)')


@dataclass
class BenchConfigTrainStepDatasets:
    """... except methods that need a different kind of example"""

    icae_finetune: str = setting('pwc_sample', 'dataset for icae_finetune (it needs PwC examples)')


@dataclass
class BenchConfigTrainStepReference:
    """the ICAE row against getao/icae v2 (issue 41): null = no such row"""

    method: str = setting('icae_pretrain', 'conf/method option measured on the reference settings')
    model: str = setting('smollm2_135m', 'conf/model the row is measured on (the issue: the packaged SmolLM2, fp32)')
    overrides: list = setting(['method.mem_size=32', 'method.compression_rate=4', 'method.context_tokens=128', 'method.lm_tokens=0', 'method.lambda_ae=1'], "Hydra overrides giving the reference's settings (32 slots, 4x, 128 tokens, AE only; LoRA r8 q/v is the default)")
    batch_sizes: list = setting([1, 4], 'a row per batch size (the goal is read at batch 1)')
    lm_tokens: int = setting(256, 'the yardstick: a plain HF LoRA LM step (full logits, the model\'s own loss) over this many tokens, timed interleaved with the method in its process', POSITIVE)
    steps: int = setting(3, 'timed (method, yardstick) pairs; medians', POSITIVE)
    ref_tokens_per_s: float = setting(126.0, "the reference's tokens/s on these settings (measured by the issue's filer)", gt(0))
    ref_peak_rss_mb: float = setting(2158.0, "the reference's peak RSS in MB", gt(0))
    ref_step_vs_lm: float = setting(1.47, "the reference's step ÷ the plain HF LoRA LM step over lm_tokens: the in-run yardstick", gt(0))
    goal_speed: float = setting(2.0, 'goal: at least this × the reference\'s tokens/s (read through ref_step_vs_lm)', gt(0))
    goal_memory: float = setting(0.6, 'goal: at most this × the reference\'s peak RSS', gt(0))


@dataclass
class BenchConfigTrainStep:
    """train_step"""

    model: str = setting('tiny', 'tiny | smollm2_135m | any conf/model name', open='any conf/model name')
    methods: str | list = setting('auto', 'auto = every registered method that has a conf/method/<name>.yaml; or a list')
    baseline: str = setting('lm', 'the method every ratio is taken against (measured in the same run)')
    dataset: str = setting('text_sample', 'the same samples (tokens) for every method ...')
    datasets: BenchConfigTrainStepDatasets | None = nested(BenchConfigTrainStepDatasets, '... except methods that need a different kind of example')
    batch_size: int = setting(2, 'examples per step (the same first examples every step)', POSITIVE)
    warmup_steps: int = setting(1, 'untimed steps first (allocates optimizer state, warms kernels)', COUNT)
    steps: int = setting(5, 'timed steps; tokens/s is the median over them', POSITIVE)
    rounds: int = setting(1, "run every method's subprocess this many times, interleaved (noise control)", POSITIVE)
    overrides: list = setting([], "extra Hydra overrides for every method's train config")
    timeout_s: int = setting(300, 'per method subprocess', gt(0))
    reference: BenchConfigTrainStepReference | None = nested(BenchConfigTrainStepReference, 'the ICAE row against getao/icae v2 (issue 41): null = no such row')


@dataclass
class BenchConfigKvMemoryOverrides:
    """per-method Hydra overrides (method.<key>=value)"""

    icae_pretrain: list = setting(['method.max_segments=null'], "keep every segment's slots (no truncation to 8 segments)")


@dataclass
class BenchConfigKvMemory:
    """kv_memory"""

    model: str = setting('tiny', 'conf/model the methods are built on')
    lengths: list = setting([1024, 2048, 4096, 8192], 'history tokens (up to 32768 where the machine allows)')
    methods: list = setting(['full_cache', 'ccm_concat', 'ccm_merge', 'lococo', 'streamingllm', 'h2o', 'snapkv', 'pyramidkv', 'icae_pretrain'], 'methods measured')
    overrides: BenchConfigKvMemoryOverrides | None = nested(BenchConfigKvMemoryOverrides, 'per-method Hydra overrides (method.<key>=value)')
    max_new_tokens: int = setting(1, 'the answer call only reads the memory; its length does not matter here', POSITIVE)


@dataclass
class BenchConfigKvPress:
    """the presses vs the plain model, ratios in one run (ctxbench/bench/kv_press.py)"""

    checks: list = setting(['calibration', 'presses'], 'calibration and/or presses')
    model: str = setting('smollm2_135m', 'the packaged SmolLM2 (real shapes: 30 layers, 3 KV heads)')
    dataset: str = setting('shakespeare_sample', 'the text the tokens are taken from')
    segment_len: int = setting(64, 'B', POSITIVE)
    n_segments: int = setting(8, "calibration: B × n_segments tokens per step (512), the LoRA LM step's window too", POSITIVE)
    mem_size: int = setting(128, 'M', POSITIVE)
    ingest_tokens: int = setting(1024, "presses: tokens streamed through the cache (and the plain forward's input)", POSITIVE)
    new_tokens: int = setting(16, 'presses: tokens decoded from the cache (and by plain generate)', POSITIVE)
    preset_tokens: int = setting(2048, "presses: issue 39's CPU preset, this many tokens ingested in one segment (kvpress: one prefill, then compress); 0 = skip", COUNT)
    preset_ratio: float = setting(0.5, 'presses: the preset\'s compression ratio r; M = ceil((1 − r) × preset_tokens)', between(0, 1, high_open=True))
    methods: list = setting(['streamingllm', 'h2o', 'lococo', 'snapkv', 'pyramidkv'], 'presses compared with the plain model')
    repeats: int = setting(3, 'timed repeats per side (presses: round-robin rounds over the forwards and every press); medians', POSITIVE)
    rounds: int = setting(2, 'calibration: the three sides interleaved this many times', POSITIVE)


@dataclass
class BenchConfigMemorySystems:
    """memory_systems"""

    systems: list = setting(['rag', 'memorybank', 'mem0', 'mem0g', 'amem', 'full_context', 'no_context'], 'memory systems measured')
    llm: str = setting('scripted', "scripted: a deterministic zero-cost chat model (measures the system's own overhead: embedding, stores, prompts); hf: the real packaged model (conf/llm/hf.yaml)", choices=('scripted', 'hf'))
    llm_overrides: list = setting([], 'e.g. [llm.context_window=1024] with llm=hf')
    embedder: str = setting('minilm', 'the real MiniLM encoder')
    dataset: str = setting('locomo_sample', 'conversations ingested, questions answered')
    max_sessions: int | None = setting(None, 'ingest at most this many sessions per conversation (null = all)', ge(1, note='null = all'))
    questions: int | None = setting(None, 'questions per conversation (null = all)', ge(1, note='null = all'))
    count_tokens_with: str = setting('smollm2_135m', "the scripted model counts tokens with this model's tokenizer")


@dataclass
class BenchConfigRetrieval:
    """retrieval"""

    sizes: list = setting([1000, 10000, 100000], 'memories in the index (1e6 needs ~1.5 GB and many minutes to build HNSW)')
    dim: int = setting(384, "MiniLM's dimension", POSITIVE)
    data: str = setting('clustered', 'clustered: unit vectors around random centres (like topic clusters) | uniform (worst case)', choices=('clustered', 'uniform'))
    cluster_size: int = setting(100, 'memories per cluster centre (clustered)', POSITIVE)
    spread: float = setting(1.0, 'noise around a centre (clustered): cosine to the centre ≈ 0.7', COUNT)
    k: int = setting(10, 'neighbours returned per query', POSITIVE)
    queries: int = setting(200, 'searched one at a time; p50/p99 over them', POSITIVE)
    indexes: list = setting(['flat', 'hnsw', 'ivf'], 'indexes compared')
    hnsw_m: int = setting(16, 'HNSW graph degree (build time grows with it)', POSITIVE)
    ef_construction: int = setting(40, 'HNSW build beam', POSITIVE)
    ef_search: int = setting(64, 'HNSW search beam', POSITIVE)
    ivf_nlist: int | None = setting(None, 'null = sqrt(n) lists (capped so each list gets >= 39 training points)', ge(1, note='null = sqrt(n)'))
    ivf_nprobe: int = setting(8, 'IVF lists searched per query', POSITIVE)
    faiss_threads: int | None = setting(None, 'null = faiss default (OMP_NUM_THREADS)', ge(1, note="null = faiss's default"))
    seed: int = setting(0, 'seed of the random vectors and queries', SEED)


@dataclass
class BenchConfigCli:
    """cli"""

    repeats: int = setting(3, 'each command runs this many times (interleaved); the median is reported', POSITIVE)
    goal_s: float = setting(1.5, '`ls` and `eval --cfg job` should answer within this many seconds (idle 2-core machine)', gt(0))


@dataclass
class BenchConfigEvalThroughputConcurrency:
    """1 vs `slots` workers against the loopback OpenAI-compatible server"""

    dataset: str = setting('locomo_sample', 'dataset answered')
    memory: str = setting('full_context', 'memory system evaluated')
    questions: int | None = setting(None, 'null = every question of the dataset (16)', POSITIVE)
    delay_s: float = setting(0.2, "the server's fixed latency per call", COUNT)
    slots: int = setting(4, "the server's parallel slots = the workers (goal: >= 0.8 x slots speed-up)", POSITIVE)


@dataclass
class BenchConfigEvalThroughputHfBatch:
    """one by one vs batch_sizes workers batched on the packaged SmolLM2 (goal: >= 3x at the largest)"""

    dataset: str = setting('locomo_sample', 'dataset answered')
    memory: str = setting('no_context', 'memory system evaluated')
    questions: int = setting(16, 'questions answered', POSITIVE)
    batch_sizes: list = setting([4, 8, 16], 'llm.batch_size of each batched side (16 is the default): that many workers, their calls generated as batches; the goal is for the largest', items=ge(1), nonempty='at least one batch size, e.g. [4,8,16]')
    repeats: int = setting(3, 'interleaved repeats (one by one, then each batch size); medians reported', POSITIVE)
    llm_model: str = setting('smollm2_135m', 'llm.model answering')
    context_window: int = setting(1024, 'llm.context_window for the check', POSITIVE)


@dataclass
class BenchConfigEvalThroughputPrefixReuse:
    """full_context latency with vs without llm.prefix_cache on one conversation (goal: <= 0.2x)"""

    questions: int = setting(6, 'questions answered on the conversation', POSITIVE)
    context_window: int = setting(2048, 'llm.context_window for the check', POSITIVE)
    max_new_tokens: int = setting(8, 'answer length', POSITIVE)


@dataclass
class BenchConfigEvalThroughputCallCache:
    """the same calls cold and from the call cache"""

    dataset: str = setting('locomo_sample', 'dataset the calls come from')
    memory: str = setting('full_context', 'memory system evaluated')
    questions: int = setting(4, 'questions answered', POSITIVE)
    llm_model: str = setting('smollm2_135m', 'llm.model answering')
    context_window: int = setting(1024, 'llm.context_window for the check', POSITIVE)
    max_new_tokens: int = setting(8, 'answer length', POSITIVE)


@dataclass
class BenchConfigEvalThroughput:
    """ratios of the evaluator's own loop, measured in one run (ctxbench/bench/eval_throughput.py)"""

    checks: list = setting(['concurrency', 'hf_batch', 'prefix_reuse', 'call_cache'], 'which evaluator-throughput checks to run', choices=('concurrency', 'hf_batch', 'prefix_reuse', 'call_cache'))
    concurrency: BenchConfigEvalThroughputConcurrency | None = nested(BenchConfigEvalThroughputConcurrency, '1 vs `slots` workers against the loopback OpenAI-compatible server')
    hf_batch: BenchConfigEvalThroughputHfBatch | None = nested(BenchConfigEvalThroughputHfBatch, 'one by one vs batch_sizes workers batched on the packaged SmolLM2 (goal: >= 3x at the largest)')
    prefix_reuse: BenchConfigEvalThroughputPrefixReuse | None = nested(BenchConfigEvalThroughputPrefixReuse, 'full_context latency with vs without llm.prefix_cache on one conversation (goal: <= 0.2x)')
    call_cache: BenchConfigEvalThroughputCallCache | None = nested(BenchConfigEvalThroughputCallCache, 'the same calls cold and from the call cache')


@dataclass
class BenchConfigStructured:
    """constrained (xgrammar) vs free generation, the same number of new tokens"""

    model: str = setting('smollm2_135m', 'conf/model generating')
    dataset: str = setting('locomo_sample', "Mem0 extraction prompts over its first conversation's first message pairs")
    prompts: int = setting(4, 'extraction prompts timed', POSITIVE)
    max_facts: int = setting(4, "facts per extraction (the schema's maxItems)", POSITIVE)
    max_new_tokens: int = setting(192, 'new tokens per call on both sides', POSITIVE)
    context_window: int = setting(2048, 'llm.context_window for the check', POSITIVE)
    rounds: int = setting(3, 'constrained and free alternate; medians over rounds', POSITIVE)


@dataclass
class BenchConfigGpuMethodsLm:
    """LoRA r16 on every linear, 4096 tokens"""

    method: str = setting('lm', 'conf/method option built for the row')
    overrides: list = setting(['method.seq_len=4096'], "Hydra overrides that size the row's example")


@dataclass
class BenchConfigGpuMethodsIcae:
    """512-token context → 128 slots, LoRA r128"""

    method: str = setting('icae_paper_pretrain', 'conf/method option built for the row')
    overrides: list = setting([], "Hydra overrides that size the row's example")


@dataclass
class BenchConfigGpuMethodsCcm:
    """4 steps × 512 tokens, 8 <COMP> each"""

    method: str = setting('ccm_concat_paper', 'conf/method option built for the row')
    overrides: list = setting(['method.train_steps=4'], "Hydra overrides that size the row's example")


@dataclass
class BenchConfigGpuMethodsLococo:
    """4 segments × 512, M=512 cache"""

    method: str = setting('lococo_paper', 'conf/method option built for the row')
    overrides: list = setting(['method.n_segments=4'], "Hydra overrides that size the row's example")


@dataclass
class BenchConfigGpuMethods:
    """row name → the conf/method it builds and the overrides that size its example"""

    lm: BenchConfigGpuMethodsLm | None = nested(BenchConfigGpuMethodsLm, 'LoRA r16 on every linear, 4096 tokens')
    icae: BenchConfigGpuMethodsIcae | None = nested(BenchConfigGpuMethodsIcae, '512-token context → 128 slots, LoRA r128')
    ccm: BenchConfigGpuMethodsCcm | None = nested(BenchConfigGpuMethodsCcm, '4 steps × 512 tokens, 8 <COMP> each')
    lococo: BenchConfigGpuMethodsLococo | None = nested(BenchConfigGpuMethodsLococo, '4 segments × 512, M=512 cache')


@dataclass
class BenchConfigGpuSmokeMethodsIcae:
    """ICAE pretraining on the tiny model: 32-token context, 8 slots"""

    method: str = setting('icae_pretrain', 'conf/method option built for the row')
    overrides: list = setting(['method.mem_size=8', 'method.context_tokens=32', 'method.lm_tokens=16'], "Hydra overrides that size the row's example")


@dataclass
class BenchConfigGpuSmokeMethodsCcm:
    """CCM concat on the tiny model: 2 steps of 16 tokens"""

    method: str = setting('ccm_concat', 'conf/method option built for the row')
    overrides: list = setting(['method.step_tokens=16', 'method.train_steps=2'], "Hydra overrides that size the row's example")


@dataclass
class BenchConfigGpuSmokeMethods:
    """row name → the conf/method it builds and the overrides that size its example"""

    icae: BenchConfigGpuSmokeMethodsIcae | None = nested(BenchConfigGpuSmokeMethodsIcae, 'ICAE pretraining on the tiny model: 32-token context, 8 slots')
    ccm: BenchConfigGpuSmokeMethodsCcm | None = nested(BenchConfigGpuSmokeMethodsCcm, 'CCM concat on the tiny model: 2 steps of 16 tokens')


@dataclass
class BenchConfigGpuSmoke:
    """one ICAE and one CCM step on the device vs the CPU in fp32, and fp32 trainables under a bf16 base (ctxbench/bench/gpu_smoke.py)"""

    methods: BenchConfigGpuSmokeMethods | None = nested(BenchConfigGpuSmokeMethods, 'row name → the conf/method it builds and the overrides that size its example')
    dataset: str = setting('text_sample', 'the texts the examples are cut from')
    tol: float = setting(0.0001, 'largest |loss on the device − loss on the CPU| in fp32 (the step and after it)', gt(0))
    budget_s: int = setting(30, 'no new row of this part starts past this many seconds', gt(0))


@dataclass
class BenchConfigGpuDrift:
    """StreamingLLM's bf16 key drift, before and after the fp32 re-rotation (ctxbench/bench/press_drift.py)"""

    segments: int = setting(400, 'segments streamed (gpu.size=tiny: 60)', POSITIVE)
    segment_len: int = setting(4, 'tokens per segment', POSITIVE)
    mem_size: int = setting(16, 'M, the cache slots', POSITIVE)
    n_sink: int = setting(4, 'attention sinks', POSITIVE)
    head_dim: int = setting(128, "the one head's width (the 7B models')", POSITIVE)
    budget_s: int = setting(30, 'no new row of this part starts past this many seconds', gt(0))


@dataclass
class BenchConfigGpuGenerate:
    """llm=hf chat_batch at several batch sizes on a random 7B shape (ctxbench/bench/gpu_generate.py)"""

    model: str = setting('llama2_7b', 'published shapes generating (ctxbench/bench/gpu_models.py SHAPES)')
    batches: list = setting([1, 8, 32], 'llm.batch_size values, each answering that many prompts in one chat_batch')
    prompt_tokens: int = setting(256, 'tokens per prompt (gpu.size=tiny: 64)', POSITIVE)
    new_tokens: int = setting(64, 'tokens generated per reply, every reply (stop tokens made unreachable; tiny: 8)', POSITIVE)
    repeats: int = setting(2, 'timed rounds over the batch sizes after one warm-up round; medians (tiny: 1)', POSITIVE)
    goal: float = setting(10.0, "the largest batch's tokens/s ÷ batch 1's (issue 42: ≥ 10× at 32)", gt(0))
    budget_s: int = setting(60, 'no new row of this part starts past this many seconds', gt(0))


@dataclass
class BenchConfigGpuPresses:
    """each press's ingest and decode vs the plain model, by kv_press.presses (ctxbench/bench/gpu_presses.py)"""

    model: str = setting('llama2_7b', 'published shapes (ctxbench/bench/gpu_models.py SHAPES)')
    methods: list = setting(['streamingllm', 'h2o', 'lococo', 'snapkv', 'pyramidkv'], 'presses compared with the plain model (as bench kv_press.methods)')
    dataset: str = setting('shakespeare_sample', 'the text the tokens are taken from')
    segment_len: int = setting(512, 'B (gpu.size=tiny: 64)', POSITIVE)
    mem_size: int = setting(1024, 'M (tiny: 128; LoCoCo keeps local_len=32 of them)', POSITIVE)
    ingest_tokens: int = setting(4096, 'tokens streamed through the cache and the plain forward (tiny: 256)', POSITIVE)
    new_tokens: int = setting(32, 'tokens decoded from the cache and by plain generate (tiny: 4)', POSITIVE)
    repeats: int = setting(3, 'timed repeats per side; medians (tiny: 1)', POSITIVE)
    budget_s: int = setting(90, 'no new row of this part starts past this many seconds', gt(0))


@dataclass
class BenchConfigGpu:
    """the GPU check at random init: smoke, drift, generate, presses, bf16 training steps on the 7B shapes (one H200: under 8 minutes)"""

    size: str = setting('7b', '7b: Llama-2-7B / Mistral-7B shapes, needs CUDA | tiny: small models of both families (CPU)', choices=('7b', 'tiny'))
    device: str = setting('auto', 'auto = cuda when there is one; or cuda:1, cpu (tiny only)')
    models: list = setting(['llama2_7b', 'mistral_7b'], 'conf/model names with published shapes in ctxbench/bench/gpu.py SHAPES')
    attention: list = setting(['sdpa', 'flash_attention_2'], 'flash_attention_2 rows are skipped where flash_attn does not import')
    methods: BenchConfigGpuMethods | None = nested(BenchConfigGpuMethods, 'row name → the conf/method it builds and the overrides that size its example')
    dataset: str = setting('text_sample', 'the texts the examples are cut from (byte-level tokens: 1 per byte)')
    batch_size: int = setting(1, 'examples per step (the same first examples every step)', POSITIVE)
    warmup_steps: int = setting(2, 'untimed steps (kernels, allocator, optimizer state)', COUNT)
    steps: int = setting(3, 'timed steps; step time is their median', POSITIVE)
    gradient_checkpointing: str = setting('auto', "auto = the model config's (on for the 7B configs, off for tiny)", choices=('auto', True, False))
    peak_flops: float = setting(989000000000000.0, 'bf16 dense peak of the GPU for MFU: H200 SXM 989 TFLOPS (NVIDIA datasheet)', gt(0))
    parts: list = setting(['smoke', 'drift', 'generate', 'presses', 'train'], 'the parts run, in this order', choices=('smoke', 'drift', 'generate', 'presses', 'train'))
    smoke: BenchConfigGpuSmoke | None = nested(BenchConfigGpuSmoke, 'one ICAE and one CCM step on the device vs the CPU in fp32, and fp32 trainables under a bf16 base (ctxbench/bench/gpu_smoke.py)')
    drift: BenchConfigGpuDrift | None = nested(BenchConfigGpuDrift, "StreamingLLM's bf16 key drift, before and after the fp32 re-rotation (ctxbench/bench/press_drift.py)")
    generate: BenchConfigGpuGenerate | None = nested(BenchConfigGpuGenerate, 'llm=hf chat_batch at several batch sizes on a random 7B shape (ctxbench/bench/gpu_generate.py)')
    presses: BenchConfigGpuPresses | None = nested(BenchConfigGpuPresses, "each press's ingest and decode vs the plain model, by kv_press.presses (ctxbench/bench/gpu_presses.py)")
    train_budget_s: int = setting(230, 'no new training cell starts past this many seconds of the train part', gt(0))
    budget_s: int = setting(420, 'no new row of any part starts past this many seconds (the whole check stays under 8 minutes)', gt(0))
    seed: int = setting(0, 'random init of the models', SEED)


@dataclass
class BenchConfig:
    """python -m ctxbench bench [suite=all|train_step|kv_memory|kv_press|memory_systems|retrieval|eval_throughput|structured|cli] [<suite>.<knob>=...] python -m ctxbench bench suite=gpu     # the GPU check (not in `all`): scripts/gpu_check.sh; gpu.size=tiny on CPU Writes bench.json (machine, command, config, per-suite results) and bench.md (one table per suite) into the run folder. Defaults are sized so `suite=all` takes about 10 minutes on 2 shared CPU cores."""

    suite: str = setting('all', 'which benchmark suite to run (all = every suite but gpu)', choices=('all', 'train_step', 'kv_memory', 'kv_press', 'memory_systems', 'retrieval', 'eval_throughput', 'structured', 'cli', 'gpu'))
    seed: int = setting(0, 'random seed', SEED)
    train_step: BenchConfigTrainStep | None = nested(BenchConfigTrainStep, 'training step throughput per method against the plain LM')
    kv_memory: BenchConfigKvMemory | None = nested(BenchConfigKvMemory, 'KV-cache memory per method against history length')
    kv_press: BenchConfigKvPress | None = nested(BenchConfigKvPress, 'the presses vs the plain model, ratios in one run (ctxbench/bench/kv_press.py)')
    memory_systems: BenchConfigMemorySystems | None = nested(BenchConfigMemorySystems, "every memory system's ingest and answer time on one dataset")
    retrieval: BenchConfigRetrieval | None = nested(BenchConfigRetrieval, 'vector index build and search time against index size')
    eval_throughput: BenchConfigEvalThroughput | None = nested(BenchConfigEvalThroughput, "ratios of the evaluator's own loop, measured in one run (ctxbench/bench/eval_throughput.py)")
    structured: BenchConfigStructured | None = nested(BenchConfigStructured, 'constrained (xgrammar) vs free generation, the same number of new tokens')
    cli: BenchConfigCli | None = nested(BenchConfigCli, 'how fast the command line answers when it runs no job (ls, --help, --cfg job)')
    gpu: BenchConfigGpu | None = nested(BenchConfigGpu, 'the GPU check at random init: smoke, drift, generate, presses, bf16 training steps on the 7B shapes (one H200: under 8 minutes)')


@dataclass
class ScoreConfig:
    """python -m ctxbench score predictions=FILE.jsonl [metrics=[f1,bleu1]] [hydra.run.dir=DIR] Each line: {"id", "prediction", "answer", "category"} (+ optional "category_name", "adversarial_answer", "question"). Category ids 1-5 are LoCoMo's (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial); other categories are reported under their own name."""

    predictions: str | None = setting(None, 'required: the JSONL file to score (with format=NAME: a published artifact)')
    format: str = setting('ctxbench', "ctxbench | mem0 | zep | evermemos | longmemeval   how predictions= is read: ctxbench = an eval run's predictions.jsonl; the others a published artifact as published, matched to the LoCoMo questions of dataset=locomo dataset.path=... (ctxbench/referee/); longmemeval: LongMemEval hypotheses / evaluate_qa.py logs, matched by question_id to dataset=longmemeval dataset.path=...", choices=('ctxbench', 'mem0', 'zep', 'evermemos', 'longmemeval'))
    metrics: list = setting(['f1', 'f1_set', 'bleu1', 'rouge1', 'rouge2', 'rougeL'], 'add llm_judge for J (the llm above judges)', nonempty='name at least one metric (e.g. metrics=[f1,bleu1]); `python -m ctxbench ls` lists them')
    judge_llm: dict | None = setting(None, 'an llm config for llm_judge (null = the llm above)')
    judge: EvalConfigJudge | None = nested(EvalConfigJudge, "llm_judge's runs (the Mem0 paper's J: mean ± std over 10 judge runs; metrics/judge.py)")
    seed: int = setting(0, 'random seed', SEED)
    progress: bool = setting(True, 'tqdm progress bars')
    log_samples: bool = setting(False, 'true: with logger=wandb, the samples table (one row per question) beside the per-category table')


@dataclass
class ReportConfigCalibrationSet:
    """report judges: the calibration set built from dataset='s gold (ctxbench/metrics/judges/calibration_set.py)"""

    questions: int = setting(40, 'questions sampled (categories 1-4; each gives up to 5 items: a paraphrase, a wrong date, a swapped entity, a vague answer, a hedge)', POSITIVE)
    seed: int = setting(0, 'the sample and the variants are drawn from this seed (same seed, same items)', SEED)


@dataclass
class ReportConfig:
    """python -m ctxbench report sweep=DIR                  (a Hydra multirun folder → DIR/sweep.md, DIR/sweep.png) python -m ctxbench report table=NAME [runs=DIR]      (ours beside a paper's numbers; NAME = ctxbench/report/papers/NAME.yaml) python -m ctxbench report board=NAME|FILE [runs=DIR,DIR] (systems side by side, rows filled by system, dataset, settings) python -m ctxbench report compare=RUN_A,RUN_B        (B - A: paired bootstrap, 95% CI, p) python -m ctxbench report reruns=RUN1,RUN2,...       (the variance of the system and of the judge) python -m ctxbench report decay=RUN1,RUN2,...        (accuracy by evidence age, runs side by side) python -m ctxbench report judges [judge.panel=[mem0,zep,strict]] [llm=...] dataset=locomo [dataset.path=...] (each judge's false-accept / false-reject rates → judges.json, judges.md)"""

    sweep_dir: str | None = setting(None, '`report sweep=DIR` arrives here (conf/sweep/ is a config group): a multirun folder')
    metric: str | None = setting(None, 'sweep: the metric to plot (null = f1 for eval sweeps, eval_loss for train sweeps)')
    plot: bool = setting(True, 'sweep: also write sweep.png')
    table: str | None = setting(None, 'a paper table: amem_locomo_table1, mem0_locomo_table1, icae_..., ccm_..., lococo_...')
    board: str | None = setting(None, 'a board (systems side by side, filled from runs= by system, dataset and settings): a stored one (locomo_all) or a board file anywhere (~/my_board.yaml); format in docs/paper-tables.md')
    add_unmatched: bool | None = setting(None, "board: runs of a system no row names get rows of their own (a plug-in's); null = the board's add_unmatched (locomo_all: true; a board file: false)")
    runs: str | list | None = setting(None, 'table / board: run folders (or parents) to search, DIR, DIR1,DIR2 or [DIR1,DIR2]; null = outputs/ and multirun/')
    out: str | None = setting(None, 'table / board / compare / reruns / decay: markdown output path (null = outputs/report/<name>.md, with a .json beside it); never a file of a run folder')
    compare: str | list | None = setting(None, 'RUN_A,RUN_B: paired bootstrap of B - A per metric, judge and category over every question, a failed answer scoring 0 (answered-only beside it; ctxbench/report/compare.py)')
    judge_mismatch: str = setting('refuse', "compare: two runs whose J was judged by different models: refuse (one line) | mark (compare them, marked in compare.md)", choices=('refuse', 'mark'))
    reruns: str | list | None = setting(None, 'RUN1,RUN2,...: reruns of one config, the variance of the system beside the judge reruns (ctxbench/report/reruns.py)')
    decay: str | list | None = setting(None, 'RUN1,RUN2,... (run folders or folders holding runs): accuracy by evidence age (results.json by_evidence_age) side by side (ctxbench/report/decay.py)')
    judges: bool = setting(False, '`report judges`: judge the calibration set under every judge.panel judge (llm= or judge_llm=) → judges.json / judges.md in hydra.run.dir')
    calibration_set: ReportConfigCalibrationSet | None = nested(ReportConfigCalibrationSet, "report judges: the calibration set built from dataset='s gold (ctxbench/metrics/judges/calibration_set.py)")
    judge_llm: dict | None = setting(None, 'report judges: an llm config for the judges (null = the llm above)')
    judge: EvalConfigJudge | None = nested(EvalConfigJudge, 'report judges: the panel and its runs (as in eval / score)')


@dataclass
class DataConfig:
    """python -m ctxbench data {stats,download,list} NAME [key=value ...] python -m ctxbench data stats locomo path=../shared/data/locomo10.json python -m ctxbench data stats locomo_sample +dataset.conversations=[demo-1] python -m ctxbench data download locomo [dest=DIR_OR_FILE] [url=MIRROR] (`data ACTION NAME` is the same as `data action=ACTION name=NAME`.)"""

    action: str = setting('stats', 'stats | download | list', choices=('stats', 'download', 'list'))
    name: str | None = setting(None, 'stats: a config in conf/dataset/ (locomo, locomo_sample, pwc_sample, ...); download: locomo | pwc | pile | dialsim')
    path: str | None = setting(None, "stats: read this file instead of the config's dataset.path")
    dataset: dict | None = setting({}, 'stats: extra dataset keys, added with +dataset.KEY=VALUE (e.g. +dataset.limit=5)')
    format: str = setting('md', 'stats: md | json', choices=('md', 'json'))
    out: str | None = setting(None, 'stats: also write the stats as JSON to this file')
    dest: str | None = setting(None, 'download: target file or folder (default data/downloads/)')
    url: str | None = setting(None, 'download: another URL (mirror) or hub id; required for dialsim (Google Drive has no direct link)')
    force: bool = setting(False, 'download: refetch even when the file is present')
    limit: int | None = setting(None, 'download: at most this many rows from a hub dataset (useful for the Pile)', ge(0, note='0 or null = all'))


@dataclass
class ExportConfig:
    """python -m ctxbench export checkpoint=RUN_DIR [out=DIR] A trained run (or its checkpoints/step_N) as a peft adapter folder + extras.safetensors + README.md."""

    checkpoint: str | None = setting(None, 'required: a train run folder or a checkpoints/step_N folder')
    out: str | None = setting(None, 'default: <run>/export/step_N')


@dataclass
class LsConfig:
    """python -m ctxbench ls [kind=method]"""

    kind: str | None = setting(None, 'list only this kind (method, memory, dataset, ...); null = everything')


@dataclass
class ViewConfig:
    """python -m ctxbench view RUN [RUN_B] [out=FILE] One self-contained HTML page of a run (or two runs side by side, B - A paired): header, per-category table, every question (ctxbench/report/view/, docs/viewer.md)."""

    run: str | None = setting(None, 'required: a run folder (eval, score, or an imported artifact\'s), or its predictions.jsonl; `view RUN` arrives here')
    run_b: str | None = setting(None, 'a second run on the same questions: side by side, the paired difference, the questions where they disagree; `view RUN RUN_B` arrives here')
    out: str | None = setting(None, 'the HTML file; null = <run>/view.html (two runs: <run>/view_vs_<run_b name>.html)')
    contexts: bool = setting(False, 'true: every row keeps its whole logged context (the file grows); false: the first max_context_chars, with a note')
    max_context_chars: int = setting(600, 'characters of context a row keeps when contexts=false', COUNT)
    threshold: float = setting(0.3, 'two runs: a non-judge metric (F1 ...) differing by more than this is a disagreement (judges: the label differs)', ge(0))
    page_size: int = setting(100, 'rows per page in the browser', POSITIVE)


@dataclass
class ReproduceConfig:
    """python -m ctxbench reproduce table=NAME [scale=cpu|paper] [jobs=N] [dry_run=true] Every cell of a stored table, trainings first, then its report."""

    table: str | None = setting(None, 'required: a stored table (python -m ctxbench report lists them)')
    table_scale: str = setting('cpu', '`scale=` on the command line: cpu (SmolLM2 on the shipped samples) or paper (each cell\'s paper / full scale); checked by reproduce itself, with the nearest name')
    out: str | None = setting(None, 'output root; null = outputs/reproduce/<table>_<scale>')
    cells: list | None = setting(None, 'only these cells (board rows), e.g. [amem,mem0]; null = every cell with an experiment')
    jobs: int = setting(1, 'cells run side by side (longest first), each with cores/jobs threads', POSITIVE)
    dry_run: bool = setting(False, 'print the commands (finished ones marked) and run nothing')
    train_steps: int | None = setting(None, "trainer.max_steps of every training; null = cpu_train_steps at scale=cpu, the scale file's at paper", POSITIVE)
    cpu_train_steps: dict = setting({'default': 20, 'locomo_all': 30}, 'per table at scale=cpu (locomo_all\'s board was measured at 30)')
    launch: str | None = setting(None, "the training command's prefix; null = python -m ctxbench")
    overrides: list = setting([], 'more overrides for every eval cell, each quoted')
    train_overrides: list = setting([], 'more overrides for every training')
    checkpoints: dict = setting({}, 'train experiment (or, in CCM\'s tables, the method) -> a trained run folder used instead of training it')
    logs: str | None = setting(None, "each job's output; null = <out>/logs (one <job>.log each)")
    progress: bool = setting(True, 'a progress bar over the cells')
    first: list = setting(['amem', 'memgpt', 'mem0g', 'mem0', 'icae', 'ccm_concat', 'ccm_merge', 'lococo'], 'cells started first, in this order (the longest on the CPU slice), so parallel lanes end together')


@dataclass
class CheckConfig:
    """python -m ctxbench check memory=NAME | method=NAME | dataset=NAME | metric=NAME [checks=[...]] The conformance checks every built-in passes, on the scripted chat model and a shipped sample (ctxbench/check/, docs/plugins.md); exit 2 when one fails."""

    metric: str | None = setting(None, 'a metric to check (its registered name); memory= / method= / dataset= are config groups')
    checks: list | None = setting(None, 'the checks to run, in this order: contract, eval, resume, kill, concurrency, protocol_pure, usage, estimate (a dataset or metric: contract, eval); null = all')
    limit: int | None = setting(None, 'answer at most N questions of dataset= per run (null or 0 = all)', ge(0, note='0 or null = all'))
    concurrency: int = setting(4, 'the workers whose records must equal one worker\'s (the concurrency check)', gt(1))
    kill: bool = setting(True, 'the kill check: a real process killed with kill -9 midway (about 3 s of process start)')
    qa_prompt: str = setting('brief', "the answer prompt the system answers with (eval's default)", choices=('locomo', 'mem0', 'mem0g', 'amem', 'brief', 'ruler', 'longmemeval'))
    estimate_tolerance: float = setting(0.1, "estimate check: input tokens (and calls estimated by a rule) within this share of the run's; a class's own estimate_tolerance wins", SHARE)
    timeout_s: int = setting(300, 'the kill check: seconds the process may run before it is killed', POSITIVE)


@dataclass
class NewConfig:
    """python -m ctxbench new memory|method|dataset|metric NAME [out=DIR] A ready plug-in package: pyproject.toml with its entry point, the class and its Settings, its prompts (memory), a README and a test calling the conformance checks (ctxbench/scaffold/, docs/plugins.md)."""

    kind: str | None = setting(None, 'required: memory | method | dataset | metric (`new memory NAME` arrives here)', choices=('memory', 'method', 'dataset', 'metric'))
    name: str | None = setting(None, 'required: the plug-in name (a Python identifier: what memory=NAME selects; `new memory NAME` arrives here)')
    out: str | None = setting(None, 'the folder the package is written to; null = ./ctxbench-NAME')
    force: bool = setting(False, 'true = write into a folder that is not empty (files of the same name are replaced)')


SCHEMAS = {
    'train': TrainConfig,
    'eval': EvalConfig,
    'bench': BenchConfig,
    'score': ScoreConfig,
    'report': ReportConfig,
    'data': DataConfig,
    'export': ExportConfig,
    'ls': LsConfig,
    'reproduce': ReproduceConfig,
    'view': ViewConfig,
    'check': CheckConfig,
    'new': NewConfig,
}
