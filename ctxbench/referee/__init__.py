"""Published results as data: another framework's per-question artifact read as it was published
(``formats/``), each row matched to its LoCoMo question (``match.py``), its category labels checked
against LoCoMo's (``categories.py``), its stored judge labels kept as ``llm_judge`` (``labels.py``),
and the import summarised for results.json / results.md (``importer.py``).
``python -m ctxbench score predictions=FILE format=NAME dataset=locomo dataset.path=LOCOMO.json``.
"""
