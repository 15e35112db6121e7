"""Steps mode: ``run(protocol, method)``, every seed one vmapped, scanned program.

The objective is chosen at run time by an unbatched index (``lax.switch`` stays a real
branch under ``vmap``), so a method compiles once for every function of the protocol.
Compile time and run time are measured separately.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from benchmarks import loops
from benchmarks.objectives import OBJECTIVES
from benchmarks.synthetic.protocol import Protocol, find

TRACE_POINTS = 200  # trace samples per seed kept in the results


def cost(protocol: Protocol, spec: str) -> float:
    """Rough relative cost of :func:`run`, to start the slowest first."""
    v = find(protocol, spec)
    fixed_k = v.fixed_k
    k = fixed_k or 10
    per_step = 2 * k + (18 if fixed_k is None else 0)
    if v.method.base == "zoar":
        per_step += 9 * k  # regenerates (n_hist + 1) k directions a step
    return protocol.total_steps * protocol.dim * per_step * len(protocol.functions)


FUNCTION_IDS = {name: i for i, name in enumerate(OBJECTIVES)}


def objective(x, fid):
    """The objective with index ``fid`` (see ``FUNCTION_IDS``)."""
    import jax

    return jax.lax.switch(fid, [o.fn for o in OBJECTIVES.values()], x)


def _program(p: Protocol, variant, phases: int):
    """A jit-compiled function of (seeds, phase objective ids) running every seed."""
    import jax
    import jax.numpy as jnp

    import zoaq_jax

    def one(seed, fids):
        opt = variant.build(p.settings, jax.random.fold_in(jax.random.key(seed), 1))
        x0 = jax.random.normal(jax.random.fold_in(jax.random.key(seed), 0), (p.dim,))
        params, state, traces = x0, None, []
        for phase in range(phases):
            params, state, trace = zoaq_jax.run(
                opt, objective, params, p.steps, log_every=p.log_every, init_state=state,
                extras=("consistency",), fid=fids[phase],
                divergence=None)  # a diverging method is a result to record, not to stop
            trace = trace._replace(best_params=None)  # per-row fields only
            if traces:  # the second phase's step 0 is the first phase's last point
                trace = jax.tree.map(lambda x: x[1:], trace)
                trace = trace._replace(step=trace.step + phase * p.steps)
            traces.append(trace)
        return jax.tree.map(lambda *xs: jnp.concatenate(xs), *traces)

    return jax.jit(jax.vmap(one, in_axes=(0, None)))


def run(protocol: Protocol, spec: str) -> list[dict[str, Any]]:
    """One method on every function of ``protocol``, compiled once: per function, per-seed
    lists and traces subsampled to :data:`TRACE_POINTS`."""
    v, functions = find(protocol, spec), protocol.functions
    fids = [[FUNCTION_IDS[f] for f in function.split(">")] for function in functions]
    compile_seconds, runs = loops.compiled_runs(_program(protocol, v, len(fids[0])), protocol.seeds,
                                          fids)
    return [_result(protocol, v, function, trace, compile_seconds, seconds)
            for function, (trace, seconds) in zip(functions, runs)]


_LOGGED = ("value", "num_queries", "last_k", "last_score", "tau")  # trace fields kept


def _result(p: Protocol, v, function: str, trace, compile_seconds: float,
            run_seconds: float) -> dict[str, Any]:
    calls = trace.num_queries[:, -1].astype(np.int64)
    k = trace.last_k[:, 1:].astype(np.float64)
    steps = trace.step.shape[1]
    keep = np.unique(np.linspace(0, steps - 1, min(steps, TRACE_POINTS)).round().astype(int))
    return {
        "function": function, "method": v.name, "label": v.display, "seeds": list(p.seeds),
        "final_gap": trace.value[:, -1].tolist(), "num_queries": calls.tolist(),
        "compile_seconds": compile_seconds,  # once per method, shared by its functions
        "run_seconds": run_seconds,
        # Sampled at the log points: share of while-loop lane work that was useful.
        "lane_utilisation": float(k.sum() / max(k.max(axis=0).sum() * k.shape[0], 1.0)),
        "trace": {"step": trace.step[0, keep].tolist(),
                  **{f: getattr(trace, f)[:, keep].tolist() for f in _LOGGED},
                  "consistency": trace.extras["consistency"][:, keep].tolist()},
    }
