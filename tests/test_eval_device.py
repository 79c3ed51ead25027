"""Eval on the accelerator (issue 17): one device/dtype resolution for ``llm=hf``, ``eval method=...`` and
the embedder, recorded in results.json; histories sharded through accelerate.

This machine has no GPU. What needs one is checked through :class:`FakeState`, a stand-in for
accelerate's ``PartialState`` on a GPU node (its ``device`` is a CUDA device), and a spy on
``from_pretrained`` that records where the weights were asked to go and then loads them on the CPU.
Everything that can run here runs for real: bf16 models generate, methods ingest and answer in bf16,
and every Linear/Embedding of the base model is checked to get its inputs on its own device and dtype.
"""
from __future__ import annotations

import json

import pytest
import torch
from accelerate import PartialState
from omegaconf import OmegaConf

from ctxbench.evaluation import evaluator as E
from ctxbench.core.errors import ConfigError
from ctxbench.models import loading as L
from ctxbench.core.paths import conf_dir
from ctxbench.core.system import System
from ctxbench.core.types import History, Prediction, Question, Sample, Session, Turn
from tests.conftest import TINY_ANSWERS, run_cli
from ctxbench.config.compose import option_config

TINY = {"name": "tiny", "hidden_size": 32, "num_layers": 1, "num_heads": 2, "num_kv_heads": 1,
        "intermediate_size": 64, "max_position_embeddings": 1024, "seed": 0, "dtype": "float32",
        "attn_implementation": "eager"}


class FakeState:
    """accelerate's PartialState as a rank of a GPU node sees it; splits with accelerate's own code."""

    split_between_processes = PartialState.split_between_processes

    def __init__(self, device: str = "cuda:1", process_index: int = 0, num_processes: int = 1):
        self.device = torch.device(device)
        self.process_index, self.num_processes = process_index, num_processes

    @property
    def is_main_process(self) -> bool:
        return self.process_index == 0


@pytest.fixture
def gpu_node(monkeypatch):
    """``auto`` resolves to cuda:1; from_pretrained records its kwargs and loads on the CPU."""
    from transformers import AutoModelForCausalLM

    monkeypatch.setattr(L, "process_state", lambda: FakeState("cuda:1"))
    calls: list[dict] = []
    real = AutoModelForCausalLM.from_pretrained

    def spy(path, **kwargs):
        calls.append(dict(kwargs))
        if "device_map" in kwargs:
            kwargs["device_map"] = {"": torch.device("cpu")}
        return real(path, **kwargs)

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", spy)
    return calls


# ---- the resolver ------------------------------------------------------------------------------

def test_auto_is_accelerates_device_and_bf16_only_on_cuda(monkeypatch):
    monkeypatch.setattr(L, "process_state", lambda: FakeState("cuda:3"))
    assert L.resolve_device("auto") == L.resolve_device(None) == torch.device("cuda", 3)
    assert L.torch_dtype("auto", torch.device("cuda", 3)) is torch.bfloat16
    assert L.torch_dtype(None, torch.device("cuda", 0)) is torch.bfloat16
    assert L.torch_dtype("auto", torch.device("cpu")) is torch.float32
    assert L.torch_dtype("auto") is torch.float32  # training: no device given, as before
    assert L.torch_dtype("float16", torch.device("cuda", 0)) is torch.float16  # the config wins
    assert L.torch_dtype("float32", torch.device("cuda", 0)) is torch.float32
    monkeypatch.setattr(L, "process_state", lambda: FakeState("cuda"))  # one process: accelerate says "cuda"
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert L.resolve_device("auto") == torch.device("cuda", 0)
    monkeypatch.setattr(L, "process_state", lambda: FakeState("cpu"))
    assert L.resolve_device("auto") == torch.device("cpu")
    with pytest.raises(L.ModelLoadError, match=r"model.dtype='float64' is not one of \['auto', 'bf16'"):
        L.torch_dtype("float64", torch.device("cpu"))


def test_auto_on_this_machine_is_accelerates_real_device():
    want = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    assert L.resolve_device("auto") == want == torch.device(PartialState().device)
    assert L.torch_dtype("auto", want) is (torch.bfloat16 if want.type == "cuda" else torch.float32)


def test_cuda_names_are_checked_against_the_machine(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError) as e:
        L.resolve_device("cuda:0", key="llm.device")
    assert str(e.value) == ("llm.device='cuda:0' but torch sees no CUDA GPU on this machine; "
                            "use llm.device=auto or cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert L.resolve_device("cuda:1") == torch.device("cuda", 1)
    with pytest.raises(ConfigError, match=r"^model.device='cuda:2' but this machine has 2 CUDA device\(s\) "
                                          r"\(cuda:0 to cuda:1\)$"):
        L.resolve_device("cuda:2")
    monkeypatch.setattr(L, "process_state", lambda: FakeState("cuda:1"))
    assert L.resolve_device("cuda") == torch.device("cuda", 1)  # this rank's GPU under accelerate launch
    monkeypatch.setattr(L, "process_state", lambda: FakeState("cpu"))
    assert L.resolve_device("cuda") == torch.device("cuda", 0)
    assert L.resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(ConfigError, match=r"^model.device='gpu0' is not a device; use auto, cpu, cuda or cuda:N$"):
        L.resolve_device("gpu0")


# ---- where the weights go ------------------------------------------------------------------------

def test_eval_loads_straight_onto_the_resolved_device_in_bf16(gpu_node):
    bundle = L.load_for_eval(option_config("model", {**TINY, "dtype": "auto"}))
    assert gpu_node[-1]["device_map"] == {"": torch.device("cuda", 1)}
    assert gpu_node[-1]["dtype"] is torch.bfloat16
    assert {p.dtype for p in bundle.model.parameters()} == {torch.bfloat16}
    L.load_for_eval(option_config("model", {**TINY, "dtype": "float16", "device": "cpu"}))
    assert gpu_node[-1]["device_map"] == {"": torch.device("cpu")} and gpu_node[-1]["dtype"] is torch.float16
    L.load_model(option_config("model", {**TINY, "dtype": "auto"}))  # training: accelerate places the model
    assert "device_map" not in gpu_node[-1] and gpu_node[-1]["dtype"] is torch.float32


def test_llm_hf_on_a_gpu_node_loads_bf16_on_the_ranks_device(gpu_node):
    from ctxbench.core.registry import build

    llm = build("llm", option_config("llm", {"name": "hf", "model": {**TINY, "dtype": "auto"}, "cache": False}))
    assert gpu_node[-1]["device_map"] == {"": torch.device("cuda", 1)} and gpu_node[-1]["dtype"] is torch.bfloat16
    assert "dtype=bfloat16" in llm.cache_id
    assert llm.placement() == {"device": "cpu", "dtype": "bfloat16"}  # where it really is (the spy's CPU)
    build("llm", option_config("llm", {"name": "hf", "model": TINY, "dtype": "bfloat16", "device": "cpu",
                                   "cache": False}))
    assert gpu_node[-1]["device_map"] == {"": torch.device("cpu")} and gpu_node[-1]["dtype"] is torch.bfloat16


def test_llm_device_names_a_missing_gpu(monkeypatch):
    from ctxbench.core.registry import build

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match=r"^llm.device='cuda:3' but torch sees no CUDA GPU on this machine"):
        build("llm", option_config("llm", {"name": "hf", "model": TINY, "device": "cuda:3", "cache": False}))


def guard_inputs(model: torch.nn.Module) -> list[str]:
    """Every Linear/Embedding of ``model`` asserts its tensor inputs are on its weight's device (and a
    Linear's in its weight's dtype); returns the names of the modules that ran."""
    ran: list[str] = []

    def hook(name):
        def check(mod, args, kwargs):
            w = mod.weight
            for t in [*args, *kwargs.values()]:
                if isinstance(t, torch.Tensor):
                    assert t.device == w.device, f"{name}: input on {t.device}, weight on {w.device}"
                    if isinstance(mod, torch.nn.Linear) and t.is_floating_point():
                        assert t.dtype == w.dtype, f"{name}: {t.dtype} input into a {w.dtype} Linear"
            ran.append(name)
        return check

    for name, mod in model.named_modules():
        if isinstance(mod, (torch.nn.Linear, torch.nn.Embedding)):
            mod.register_forward_pre_hook(hook(name), with_kwargs=True)
    return ran


def test_llm_hf_bf16_generates_with_inputs_on_the_models_device():
    from ctxbench.core.registry import build

    llm = build("llm", option_config("llm", {"name": "hf", "model": TINY, "dtype": "bfloat16", "device": "cpu",
                                         "cache": False, "context_window": 256}))
    fp32 = build("llm", option_config("llm", {"name": "hf", "model": TINY, "cache": False}))
    assert {p.dtype for p in llm.model.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in fp32.model.parameters()} == {torch.float32}
    assert llm.cache_id != fp32.cache_id and "dtype=bfloat16" in llm.cache_id and "dtype=float32" in fp32.cache_id
    ran = guard_inputs(llm.model)
    r = llm.chat([{"role": "user", "content": "hello there"}], max_new_tokens=3)
    assert r.completion_tokens >= 1 and "lm_head" in ran and "model.embed_tokens" in ran
    assert llm.placement() == {"device": "cpu", "dtype": "bfloat16"}


# ---- eval method=...: the method's model and every input on the resolved device ---------------------

METHODS = {
    "lm": [],
    "icae_finetune": ["method.mem_size=4", "method.encode_batch_size=2"],
    "ccm_concat": ["method.n_tok=2", "method.step_tokens=16"],
    "lococo": ["method.segment_len=16", "method.mem_size=32", "method.local_len=4"],
    "h2o": ["method.segment_len=16", "method.mem_size=32"],
}


def compose_eval(overrides: list[str]):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        return compose("eval", overrides=overrides)


def tiny_overrides() -> list[str]:
    return ["model=tiny"] + [f"model.{k}={v}" for k, v in TINY.items() if k not in ("name", "dtype")]


def one_sample() -> list[Sample]:
    turns = [Turn("Ann" if i % 2 == 0 else "Bob", f"I moved to city number {i} last spring.", f"D1:{i}")
             for i in range(6)]
    hist = History(id="h1", sessions=[Session("1", turns, date="1 May 2023")], speakers=["Ann", "Bob"])
    return [Sample(hist, [Question(id="q1", question="Where did Ann move?", answer="city 0", category=4)])]


@pytest.mark.parametrize("method", sorted(METHODS))
def test_eval_method_runs_on_its_models_device_in_bf16(method, tmp_path):
    cfg = compose_eval([f"method={method}", *tiny_overrides(), "model.dtype=bfloat16", "model.device=cpu",
                        "method.max_new_tokens=2", *METHODS[method]])
    system, llm, name = E.build_system(cfg, tmp_path)
    model = system.bundle.model
    assert llm is None and name == f"method={method}"
    base = [p for n, p in model.named_parameters() if "lora_" not in n]  # added trainables may be fp32
    assert base and {p.dtype for p in base} == {torch.bfloat16}
    assert {p.device for p in system.parameters()} == {torch.device("cpu")}
    ran = guard_inputs(model)
    recs = E.run_system(system, one_sample(), tmp_path, progress=False)
    assert len(recs) == 1 and not recs[0].get("failed") and ran
    assert system.placement() == {"device": "cpu", "dtype": "bfloat16"}


def test_eval_method_loads_on_the_ranks_gpu(gpu_node, tmp_path):
    cfg = compose_eval(["method=lm", *tiny_overrides(), "model.dtype=auto"])
    E.build_system(cfg, tmp_path)
    assert gpu_node[-1]["device_map"] == {"": torch.device("cuda", 1)} and gpu_node[-1]["dtype"] is torch.bfloat16


def test_eval_method_on_a_missing_gpu_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cfg = compose_eval(["method=lm", *tiny_overrides(), "model.device=cuda:1"])
    with pytest.raises(ConfigError, match=r"^model.device='cuda:1' but torch sees no CUDA GPU on this machine"):
        E.build_system(cfg, tmp_path)


# ---- results.json records the resolved device and dtype ------------------------------------------

ENV = {"OMP_NUM_THREADS": "1"}


def test_results_json_records_where_the_llm_ran(tmp_path):
    out = tmp_path / "run"
    r = run_cli("eval", "memory=no_context", "dataset=locomo_sample", "llm.model=tiny", "llm.cache=false", TINY_ANSWERS,
                "llm.dtype=bfloat16", "limit=1", "memory.max_new_tokens=2", "progress=false",
                f"hydra.run.dir={out}", env=ENV, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads((out / "results.json").read_text())
    assert res["provenance"]["placement"] == {"device": "cpu", "dtype": "bfloat16", "processes": 1}
    assert "· model on cpu bfloat16 ·" in (out / "results.md").read_text()


def test_results_json_records_where_the_method_ran(tmp_path):
    out = tmp_path / "run"
    r = run_cli("eval", "method=lm", "model=tiny", "model.dtype=bf16", "method.max_new_tokens=2",
                "dataset=locomo_sample", "limit=1", "progress=false", f"hydra.run.dir={out}", env=ENV, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads((out / "results.json").read_text())
    assert res["provenance"]["placement"] == {"device": "cpu", "dtype": "bfloat16", "processes": 1}


# ---- sharding through accelerate -------------------------------------------------------------------

class Counting(System):
    """Answers ``<question id>`` and counts what it was asked (a test double)."""

    def __init__(self):
        self.ingested: list[str] = []
        self.answered: list[str] = []

    def ingest(self, history):
        self.ingested.append(history.id)

    def answer(self, question):
        self.answered.append(question.id)
        return Prediction(text=f"answer {question.id}")


def five_histories() -> list[Sample]:
    out = []
    for h in range(5):
        turn = Turn("Ann", f"history {h}", f"D1:{h}")
        hist = History(id=f"h{h}", sessions=[Session("1", [turn], date="d")], speakers=["Ann", "Bob"])
        out.append(Sample(hist, [Question(id=f"h{h}-q{i}", question="?", answer="x", category=1)
                                 for i in range(2)]))
    return out


def test_sharded_eval_splits_with_accelerate_and_rank0_gathers_in_dataset_order(monkeypatch, tmp_path):
    import accelerate.utils

    rank1 = Counting()
    got1 = E.run_sharded(rank1, five_histories(), tmp_path, FakeState("cpu", 1, 2), progress=False)
    assert got1 is None and rank1.ingested == ["h3", "h4"]  # accelerate's contiguous split: 3 + 2 histories
    shard1 = [json.loads(x) for x in (tmp_path / "predictions.rank1.jsonl").read_text().splitlines()]
    assert [r["id"] for r in shard1] == ["h3-q0", "h3-q1", "h4-q0", "h4-q1"]
    # rank 0's gather receives rank 0's records then rank 1's (what all_gather_object hands back)
    monkeypatch.setattr(accelerate.utils, "gather_object", lambda recs: list(recs) + shard1)
    rank0 = Counting()
    got0 = E.run_sharded(rank0, five_histories(), tmp_path, FakeState("cpu", 0, 2), progress=False)
    assert rank0.ingested == ["h0", "h1", "h2"]
    ids = [f"h{h}-q{i}" for h in range(5) for i in range(2)]
    assert [r["id"] for r in got0] == ids
    assert [json.loads(x)["id"] for x in (tmp_path / "predictions.jsonl").read_text().splitlines()] == ids
    assert not list(tmp_path.glob("predictions.rank*.jsonl"))


def test_sharded_limit_applies_to_the_dataset_before_splitting(tmp_path):
    rank1 = Counting()
    E.run_sharded(rank1, five_histories(), tmp_path, FakeState("cpu", 1, 2), limit=5, progress=False)
    assert rank1.answered == ["h2-q0"]  # the first 5 questions are h0..h2-q0; rank 1 gets history h2


def test_a_killed_sharded_run_resumes_in_one_process(monkeypatch, tmp_path):
    """Rank 1 finished its part and the job died before the gather: one process answers only the rest."""
    import accelerate.utils

    def killed(recs):
        raise KeyboardInterrupt

    monkeypatch.setattr(accelerate.utils, "gather_object", killed)
    with pytest.raises(KeyboardInterrupt):
        E.run_sharded(Counting(), five_histories(), tmp_path, FakeState("cpu", 1, 2), progress=False)
    again = Counting()
    results = E.evaluate_samples(again, five_histories(), tmp_path, metrics=["f1"])
    assert again.ingested == ["h0", "h1", "h2"]  # h3, h4 come from rank 1's shard file
    assert results["overall"]["n"] == 10
    rows = [json.loads(x) for x in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == [f"h{h}-q{i}" for h in range(5) for i in range(2)]


def test_world_size_without_an_accelerate_launch_is_refused(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(L, "process_state", lambda: FakeState("cpu", 0, 1))
    with pytest.raises(E.CtxbenchError, match=r"^WORLD_SIZE=2 but accelerate sees 1 process\(es\)"):
        E.process_state()
