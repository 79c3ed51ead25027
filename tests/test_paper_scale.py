"""The paper-setting (scale=paper) LoCoMo cells use the sizes of the published rows, not the CPU
demo's: MemGPT's main context is GPT-4o-mini's window (not a 700-token FIFO), ReadAgent pages and
looks up as its paper (600/280-word pages, up to 5 look-ups, not 400 tokens and 2), and the
full-context rows hold the whole conversation. Each experiment is composed with Hydra as the CLI does
(``eval experiment=<cell> scale/<table>=paper``); the CPU setting keeps the demo sizes."""
from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from ctxbench.core import registry
from ctxbench.config.schema import check_types

from memory_scripted import BowEmbedder
from scripted_llm import ScriptedLLM
from ctxbench.config.compose import option_config

CONF = Path(__file__).resolve().parents[1] / "conf"
LOCOMO = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo10.json"
TABLES = ("amem", "mem0")


def composed(*overrides: str):
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose(config_name="eval", overrides=list(overrides))
    check_types(cfg, "eval")
    return cfg


def cell(table: str, name: str, scale: str, *more: str):
    return composed(f"experiment={table}_locomo_table1_{name}", f"scale/{table}={scale}", *more)


@pytest.mark.parametrize("table", TABLES)
def test_memgpt_paper_main_context_is_the_models_window(table, tmp_path):
    cfg = cell(table, "memgpt", "paper")
    assert (cfg.llm.model, cfg.llm.context_window) == ("gpt-4o-mini", 128000)
    m = cfg.memory
    assert m.fifo_tokens == cfg.llm.context_window  # not the CPU demo's 700
    assert (m.warn_frac, m.evict_frac, m.archive_evicted) == (0.7, 0.5, False)
    assert (m.working_max_tokens, m.result_max_tokens) == (1000, 750)
    system = registry.build("memory", cfg.memory, llm=ScriptedLLM("x", context_window=cfg.llm.context_window),
                            embedder=BowEmbedder(), workdir=tmp_path)
    assert 120000 < system.fifo_tokens == system.window_fifo() < 128000  # the window less the fixed part
    cpu = cell(table, "memgpt", "cpu")
    assert (cpu.llm.name, cpu.memory.fifo_tokens, cpu.memory.working_max_tokens) == ("hf", 700, 150)
    assert cell(table, "memgpt", "paper", "memory.fifo_tokens=5000").memory.fifo_tokens == 5000  # CLI wins


@pytest.mark.parametrize("table", TABLES)
def test_readagent_paper_pages_and_lookups(table):
    m = cell(table, "readagent", "paper").memory
    assert (m.max_lookups, m.max_page_tokens, m.min_page_tokens, m.tail_tokens, m.preceding_tokens) == \
        (5, 780, 364, 455, None)
    cpu = cell(table, "readagent", "cpu").memory
    assert (cpu.max_lookups, cpu.max_page_tokens, cpu.preceding_tokens) == (2, 400, 100)


class CharTokens(ScriptedLLM):
    """Tokens counted as characters / 3: more than GPT-4o-mini's tokenizer gives English text."""

    def count_tokens(self, text: str) -> int:
        return len(text) // 3 + 1


@pytest.mark.parametrize("table", TABLES)
def test_full_context_paper_row_holds_every_whole_conversation(table, tmp_path):
    if not LOCOMO.exists():
        pytest.skip(f"no {LOCOMO}")
    cfg = cell(table, "locomo", "paper")
    assert cfg.memory.name == "full_context" and cfg.llm.context_window == 128000
    samples = registry.build("dataset", option_config("dataset", {"name": "locomo", "path": str(LOCOMO)}))
    assert len(samples) == 10

    def cut(window: int) -> list[int]:
        system = registry.build("memory", cfg.memory, llm=CharTokens("ok", context_window=window), workdir=tmp_path)
        out = []
        for s in samples:
            system.reset()
            system.ingest(s.history)
            out.append(system.answer(s.questions[0]).usage.extra["truncated_turns"])
        return out
    assert cut(cfg.llm.context_window) == [0] * 10  # the whole conversation, every conversation
    assert all(n > 0 for n in cut(cell(table, "locomo", "cpu").llm.context_window))  # the CPU window cuts


@pytest.mark.parametrize("name", ["mem0", "mem0g"])
def test_mem0_paper_searches_top_30_per_speaker_and_cpu_keeps_10(name):
    """Mem0's evaluation/Makefile: run-mem0(-plus)-search ... --top_k 30, from each speaker's store."""
    paper, cpu = cell("mem0", name, "paper"), cell("mem0", name, "cpu")
    assert paper.memory.k == 30 and paper.memory.stores == "per_speaker"
    assert cpu.memory.k == 10 and cpu.memory.stores == "per_speaker"
    assert cell("mem0", name, "paper", "memory.k=5").memory.k == 5  # the command line still wins
