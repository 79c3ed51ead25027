"""The answer prompts, one module each (``locomo``, ``mem0``, ``mem0g``, ``amem``, ``brief``, ``ruler``, ``longmemeval``); each defines ``PROMPT``."""
