"""The evaluator's tasks (lm-eval's sense): ``eval task=qa|perplexity|reconstruction|choice``.

``qa`` (the default) is :func:`ctxbench.evaluation.evaluator.main`: systems answer a dataset's questions. The
others score what the compression papers score, through the same run folders (resume, config
binding, provenance) and the same results.json / results.md:

- ``perplexity`` (:mod:`.perplexity`): NLL of a continuation given the context compressed the
  method's way, beside the base model with the full context and with none, at several lengths
  (ICAE Table 6, LoCoCo, CCM's DailyDialog);
- ``reconstruction`` (:mod:`.reconstruction`): the context decoded back from its compression
  (ICAE's autoencoding): BLEU-4, exact match, token accuracy, against memory size;
- ``choice`` (:mod:`.choice`): option ranking by NLL (CCM's MetaICL accuracy, DialSim options).

What a method must offer each task is :mod:`.protocol`. Each task is registered as
``@register("task", NAME)``: ``run(cfg, method, samples, out_dir) -> results``.
"""
