"""Runs (function, method) units: all seeds of a unit as one vmapped, scanned program.

Units are spread over worker processes pinned to one core each: on small problems XLA's
CPU runtime is several times faster single-threaded, and two pinned workers use both
cores of a CI machine. Compile time and run time are measured separately.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks import common
from benchmarks import pool
from benchmarks.synthetic.methods import Variant
from benchmarks.synthetic.objectives import OBJECTIVES
from benchmarks.synthetic.protocol import Protocol


@dataclass(frozen=True)
class Unit:
    """One method on every function of a protocol: one compiled program, run per function.

    The objective is chosen at run time by an unbatched index (``lax.switch`` stays a
    real branch under ``vmap``), so a method compiles once for all functions.
    """

    protocol: Protocol
    variant: Variant

    @property
    def cost(self) -> float:
        """Rough relative cost, to start the slowest units first."""
        method = self.variant.method
        fixed_k = method.fixed_k if method.base != "zoar" else None
        k = fixed_k or 10
        per_step = 2 * k + (18 if fixed_k is None else 0)
        if method.base == "zoar":
            per_step += 9 * k  # regenerates (n_hist + 1) k directions a step
        return self.protocol.total_steps * self.protocol.dim * per_step * len(
            self.protocol.functions)


def units(protocol: Protocol) -> list[Unit]:
    return sorted((Unit(protocol, v) for v in protocol.variants), key=lambda u: -u.cost)


FUNCTION_IDS = {name: i for i, name in enumerate(OBJECTIVES)}


def objective(x, fid):
    """The objective with index ``fid`` (see ``FUNCTION_IDS``)."""
    import jax

    return jax.lax.switch(fid, [o.fn for o in OBJECTIVES.values()], x)


def _initial_point(seed: int, dim: int):
    import jax

    return jax.random.normal(jax.random.fold_in(jax.random.key(seed), 0), (dim,))


def _program(unit: Unit, phases: int):
    """A jit-compiled function of (seeds, phase objective ids) running every seed."""
    import jax
    import jax.numpy as jnp

    import zoaq_jax

    p = unit.protocol

    def one(seed, fids):
        opt = unit.variant.build(p.settings, jax.random.fold_in(jax.random.key(seed), 1))
        params, state, traces = _initial_point(seed, p.dim), None, []
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


def run_unit(unit: Unit) -> list[dict[str, Any]]:
    """Compiles a method once and runs it on each function; per-seed results as lists."""
    import jax
    import jax.numpy as jnp

    seeds = jnp.asarray(unit.protocol.seeds, jnp.int32)
    phases = len(unit.protocol.functions[0].split(">"))
    fids = jnp.zeros(phases, jnp.int32)
    with common.Stopwatch() as compile_time:
        compiled = _program(unit, phases).lower(seeds, fids).compile()
    out = []
    for function in unit.protocol.functions:
        fids = jnp.asarray([FUNCTION_IDS[f] for f in function.split(">")], jnp.int32)
        with common.Stopwatch() as run_time:
            trace = jax.block_until_ready(compiled(seeds, fids))
        out.append(_result(unit, function, jax.tree.map(np.asarray, trace),
                           compile_time.seconds, run_time.seconds))
    return out


def _result(unit: Unit, function: str, trace, compile_seconds: float, run_seconds: float):
    calls = trace.num_queries[:, -1].astype(np.int64)
    k = trace.last_k[:, 1:].astype(np.float64)
    return {
        "function": function,
        "method": unit.variant.name,
        "label": unit.variant.display,
        "seeds": list(unit.protocol.seeds),
        "final_gap": trace.value[:, -1].tolist(),
        "num_queries": calls.tolist(),
        "compile_seconds": compile_seconds,  # once per method, shared by its functions
        "run_seconds": run_seconds,
        # Sampled at the log points: share of while-loop lane work that was useful.
        "lane_utilisation": float(k.sum() / max(k.max(axis=0).sum() * k.shape[0], 1.0)),
        "trace": {
            "step": trace.step[0].tolist(),
            "value": trace.value.tolist(),
            "num_queries": trace.num_queries.tolist(),
            "last_k": trace.last_k.tolist(),
            "last_score": trace.last_score.tolist(),
            "tau": trace.tau.tolist(),
            "consistency": trace.extras["consistency"].tolist(),
        },
    }


def execute(protocol: Protocol, workers: int, desc: str) -> list[dict[str, Any]]:
    """Runs every unit of ``protocol`` on ``workers`` pinned processes (1: in-process)."""
    return _ordered(pool.pinned_map(run_unit, units(protocol), workers, desc), protocol)


def _ordered(results, protocol: Protocol):
    """Results in the protocol's function and method order."""
    order = {(f, v.name): i for i, (f, v) in enumerate(
        (f, v) for f in protocol.functions for v in protocol.variants)}
    return sorted(results, key=lambda r: order[(r["function"], r["method"])])
