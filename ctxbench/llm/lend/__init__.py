"""ctxbench's own backend lent to a system that only speaks OpenAI, for the length of a run.

:class:`~ctxbench.llm.lend.server.LendServer` serves the run's shared LLM backend
(:class:`ctxbench.llm.shared.SharedLLM`) and embedder on ``127.0.0.1`` as an OpenAI-compatible API
(``POST /v1/chat/completions``, ``POST /v1/embeddings``, ``GET /v1/models``); the request and reply
shapes are :mod:`.wire`'s. The server knows nothing of systems or tasks: each request's bearer token
names an *account* (the evaluator's, :mod:`ctxbench.evaluation.lend`) that runs the backend call as the
borrowing system's own call in the task it is running now — its phase, its call scopes, its hold on
the workers' lock. The user's guide: docs/plugins.md, "The lent backend".
"""
