"""The README.md written into an export: what is inside, each extra weight's shape, how to load it."""
from __future__ import annotations

import re
from typing import Any

# What each method's weights mean, for someone loading them without ctxbench's code.
NOTES = {
    "lm_full": ("Full fine-tuning (`method.lora.enabled: false`): no adapter; `extras.safetensors` holds every "
                "weight of the fine-tuned model."),
    "lm": ("The adapter is the whole trained change: `PeftModel.from_pretrained(base, \"adapter\")` is the "
           "fine-tuned model (generate with it as usual)."),
    "icae": ("ICAE (arXiv 2307.06945). The adapter is the **encoder's** LoRA; the decoder is the base model with "
             "the adapter disabled (`with model.disable_adapter():`). `memory_embed` [mem_size + 3, hidden]: rows "
             "0..mem_size-1 are the memory-token embeddings appended after each segment of mem_size × "
             "compression_rate context tokens (the last-layer hidden states there are the memory slots; with "
             "`slot_norm: embed` each slot is rescaled to the base model's mean token-embedding norm); the last "
             "three rows are the learned [AE], [LM], [FT] embeddings the decoder reads after the slots."),
    "ccm": ("CCM (arXiv 2312.03414). **No `adapter/` folder**: CCM's LoRA is conditional — it fires only at the "
            "`<COMP>` token positions (ctxbench/methods/ccm_lora.py) — which a peft `LoraConfig` cannot express, "
            "so plain peft would apply it to every token. Its tensors are in `extras.safetensors` in peft's "
            "layout: `<module>.lora_A` [r, in], `<module>.lora_B` [out, r], output = base(x) + B·A·x·alpha/r at "
            "COMP positions only (r, alpha in method.json `lora`). `comp_embeddings` [n_tok, hidden] are the "
            "`<COMP>` token embeddings. Use `ctxbench.export.load_export` to get the working method."),
    "lococo": ("LoCoCo (arXiv 2406.05317). `compressors.per_layer.<i>.*` are each layer's convolutional KV "
               "compressor (and λ `normalizer`); they run inside ctxbench's fixed-size KV cache "
               "(ctxbench/methods/lococo.py, kv_cache.py). An `adapter/` folder is present only when the run "
               "trained a LoRA (`method.lora.enabled`); tuned embeddings/norms (`train_embed_norm`) are extras."),
}


def family(method: str, adapter: bool = True) -> str:
    if method == "lm" and not adapter:
        return "lm_full"
    return next((k for k in ("icae", "ccm", "lococo") if method.startswith(k)), method)


def grouped_shapes(extras: dict[str, list[int]]) -> list[tuple[str, list[int], int]]:
    """(key with layer numbers as ``*``, shape, count): one line per repeated per-layer weight."""
    groups: dict[tuple[str, tuple[int, ...]], int] = {}
    for k, shape in extras.items():
        key = (re.sub(r"\.\d+\.", ".*.", k), tuple(shape))
        groups[key] = groups.get(key, 0) + 1
    return [(k, list(s), n) for (k, s), n in groups.items()]


def readme(info: dict[str, Any], configs: dict[str, dict[str, Any]]) -> str:
    method, model = info["method"], configs.get("model", {})
    lines = [f"# ctxbench export: {method} (step {info['step']})", "",
             f"Exported from `{info['checkpoint']}`; base model: `{model.get('name')}`"
             + (f" (`{model['path']}`)" if model.get("path") else "") + ".", "", "## Files", ""]
    if info["adapter"]:
        lines.append(f"- `adapter/`: a standard peft LoRA adapter ({info['adapter_weights']} tensors), "
                     "`adapter_config.json` + `adapter_model.safetensors`.")
    if info["extras"]:
        lines.append(f"- `extras.safetensors`: {len(info['extras'])} more trained tensors (below).")
    lines += ["- `method.json`, `model.json`: the configs the run was trained with.",
              "- `export.json`: what was exported; `MANIFEST.json`: size and sha256 of every file.", "",
              "## What the weights are", "", NOTES.get(family(method, bool(info["adapter"])), ""), ""]
    if info["extras"]:
        lines += ["Extras keys are the parameter names inside the ctxbench method: `model.` (under a peft wrapper "
                  "`model.base_model.model.`) followed by a transformers name is a trained weight of the base model "
                  "itself; a `*` stands for the layer numbers.", "",
                  "| extras key | shape | count |", "|---|---|---:|"]
        lines += [f"| `{k}` | {s} | {n} |" for k, s, n in grouped_shapes(info["extras"])]
        lines.append("")
    lines += ["## Loading", "", "```python"]
    if info["adapter"]:
        lines += ["from peft import PeftModel",
                  "from transformers import AutoModelForCausalLM", "",
                  f"base = AutoModelForCausalLM.from_pretrained({info.get('base_model_name_or_path') or 'BASE'!r})",
                  "model = PeftModel.from_pretrained(base, \"EXPORT/adapter\")"]
    if info["extras"]:
        lines += ["from safetensors.torch import load_file", "",
                  "extras = load_file(\"EXPORT/extras.safetensors\")  # {name: tensor}, shapes above"]
    lines += ["", "# the ctxbench method itself (adapter + extras), ready to evaluate:",
              "from ctxbench.export import load_export",
              "method = load_export(\"EXPORT\")  # or load_export(\"EXPORT\", bundle=load_model(model_cfg))",
              "```", "",
              "With the packaged or tiny base models, `ctxbench.models.loading.load_model(model.json)` loads "
              "the base (`.model` is the transformers model, `.tokenizer` its tokenizer).", ""]
    return "\n".join(lines)
