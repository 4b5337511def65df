"""kvplan simulator: a discrete-event model of LLM serving (schedulers, paged KV cache, batching).

The request path, in tree order: ``sim.workload`` (who arrives when, with what lengths) ->
``sim.policies.router`` -> ``sim.policies.schedulers`` (+ ``sim.policies.kv`` allocators and
prefix cache) -> ``sim.simulation`` (simpy executor, timed by a ``sim.pricing`` step pricer) -> ``sim.metrics``.
"""

__version__ = "0.1.0"

from sim import native as _native

_native.activate()  # before any compiled module loads: a stale build must not run
