"""The judge panel: pinned, versioned judge prompts (one file each) and the panel built from ``judge.panel``.

- :mod:`.prompt`: :class:`~.prompt.JudgePrompt`, one judge's prompt, call and label parse;
- :mod:`.mem0`, :mod:`.zep`, :mod:`.evermemos`, :mod:`.longmemeval`, :mod:`.strict`: the judges, each
  registered as ``register("judge", name)`` with its source;
- :mod:`.panel`: ``judge.panel=[mem0,zep,...]`` → the ``llm_judge`` metrics (:func:`.panel.panel_metrics`);
- :mod:`.calibration_set`: the deterministic calibration set built from a dataset's gold (no LLM);
- :mod:`.leniency`: false-accept / false-reject rates with Wilson intervals, the ``lenient`` flag,
  judges.json / judges.md, and the ``judges`` block of results.json.
"""
