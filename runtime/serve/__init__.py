"""``kvplan serve``: an OpenAI-compatible HTTP server over ``LLMEngine``.

A request's path, in tree order: ``app`` (HTTP: auth, limits, SSE, drain) -> ``protocol``
(the JSON body, strictly validated) -> ``serving`` (prompt -> token ids and SamplingParams;
deltas -> text, responses, chunks) -> ``engine_loop`` (the engine's own thread: continuous
batching, per-request queues) -> ``LLMEngine``. ``detokenizer`` turns streamed token ids into
text, ``metrics`` renders ``/metrics``, ``server`` runs uvicorn with a drain on SIGTERM.

Needs the ``serve`` extra (starlette, uvicorn, pydantic); nothing is imported here so that
``import runtime`` never pulls them in.
"""
