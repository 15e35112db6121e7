"""Runs (function, method) units: all seeds of a unit as one vmapped, scanned program.

Units are spread over worker processes pinned to one core each: on small problems XLA's
CPU runtime is several times faster single-threaded, and two pinned workers use both
cores of a CI machine. Compile time and run time are measured separately.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import common, pool
from benchmarks import record as run_record
from benchmarks.synthetic import protocol as protocols
from benchmarks.synthetic.methods import Variant
from benchmarks.synthetic.objectives import OBJECTIVES
from benchmarks.synthetic.protocol import Protocol

TRACE_POINTS = 200  # trace samples per seed kept in the JSON file


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


def _program(unit: Unit, phases: int):
    """A jit-compiled function of (seeds, phase objective ids) running every seed."""
    import jax
    import jax.numpy as jnp

    import zoaq_jax

    p = unit.protocol

    def one(seed, fids):
        opt = unit.variant.build(p.settings, jax.random.fold_in(jax.random.key(seed), 1))
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


def run_unit(unit: Unit) -> list[dict[str, Any]]:
    """Compiles a method once and runs it on each function; per-seed results as lists."""
    functions = unit.protocol.functions
    fids = [[FUNCTION_IDS[f] for f in function.split(">")] for function in functions]
    compile_seconds, runs = compiled_runs(_program(unit, len(fids[0])), unit.protocol.seeds, fids)
    return [_result(unit, function, trace, compile_seconds, seconds)
            for function, (trace, seconds) in zip(functions, runs)]


def compiled_runs(program, seeds, fids) -> tuple[float, list[tuple[Any, float]]]:
    """Compiles ``program(seeds, fids)`` once and runs it on each objective-id vector of
    ``fids``: the compile seconds and, per vector, its outputs (NumPy) and run seconds."""
    import jax
    import jax.numpy as jnp

    seeds = jnp.asarray(seeds, jnp.int32)
    fids = [jnp.asarray(f, jnp.int32) for f in fids]
    with common.Stopwatch() as compile_time:
        compiled = program.lower(seeds, fids[0]).compile()
    runs = []
    for f in fids:
        with common.Stopwatch() as run_time:
            out = jax.block_until_ready(compiled(seeds, f))
        runs.append((jax.tree.map(np.asarray, out), run_time.seconds))
    return compile_time.seconds, runs


_LOGGED = ("value", "num_queries", "last_k", "last_score", "tau")  # trace fields kept


def _result(unit: Unit, function: str, trace, compile_seconds: float, run_seconds: float):
    calls = trace.num_queries[:, -1].astype(np.int64)
    k = trace.last_k[:, 1:].astype(np.float64)
    return {
        "function": function, "method": unit.variant.name, "label": unit.variant.display,
        "seeds": list(unit.protocol.seeds), "final_gap": trace.value[:, -1].tolist(),
        "num_queries": calls.tolist(),
        "compile_seconds": compile_seconds,  # once per method, shared by its functions
        "run_seconds": run_seconds,
        # Sampled at the log points: share of while-loop lane work that was useful.
        "lane_utilisation": float(k.sum() / max(k.max(axis=0).sum() * k.shape[0], 1.0)),
        "trace": {"step": trace.step[0].tolist(),
                  **{f: getattr(trace, f).tolist() for f in _LOGGED},
                  "consistency": trace.extras["consistency"].tolist()},
    }


def execute(protocol: Protocol, workers: int, desc: str) -> list[dict[str, Any]]:
    """Runs every unit of ``protocol`` on ``workers`` pinned processes (1: in-process)."""
    return pool.ordered(pool.pinned_map(run_unit, units(protocol), workers, desc), "function",
                        protocol.functions, [v.name for v in protocol.variants])


def records(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per function x method x seed, traces subsampled."""
    out = []
    for r in results:
        steps = len(r["trace"]["step"])
        keep = np.unique(np.linspace(0, steps - 1, min(steps, TRACE_POINTS)).round().astype(int))
        for i, seed in enumerate(r["seeds"]):
            trace = {k: (np.asarray(v)[keep] if k == "step" else np.asarray(v)[i][keep]).tolist()
                     for k, v in r["trace"].items()}
            out.append({"function": r["function"], "method": r["method"], "label": r["label"],
                        "seed": seed, "final_gap": r["final_gap"][i],
                        "num_queries": r["num_queries"][i], "trace": trace})
    return out


def summary(r: dict[str, Any]) -> dict[str, Any]:
    gaps, calls = np.asarray(r["final_gap"]), np.asarray(r["num_queries"], np.float64)
    return {
        "gap_mean": float(gaps.mean()), "gap_std": float(gaps.std()),
        "calls_mean": float(calls.mean()), "calls_std": float(calls.std()),
        "calls_per_second": float(calls.sum() / r["run_seconds"]),
        "us_per_call": float(1e6 * r["run_seconds"] / calls.sum()),
    }


_PER_SEED = ("trace", "final_gap", "num_queries")
_SUMMARY = ("gap_mean", "gap_std", "calls_mean", "calls_std", "calls_per_second", "us_per_call")


def write_json(path: Path, protocol: Protocol, results, record: run_record.RunRecord) -> Path:
    units = [{k: v for k, v in r.items() if k not in _PER_SEED} | summary(r) for r in results]
    return common.write_json(path, {
        "record": record.as_dict(), "protocol": protocols.as_dict(protocol), "units": units,
        "records": records(results),
    })


def read_json(data: dict[str, Any]) -> tuple[Protocol, list[dict[str, Any]], run_record.RunRecord]:
    """The protocol, per-unit results and run record of a steps-mode JSON (the inverse of
    :func:`write_json`; traces are the subsampled ones the JSON keeps)."""
    results = []
    for unit in data["units"]:
        recs = [r for r in data["records"]
                if (r["function"], r["method"]) == (unit["function"], unit["method"])]
        recs.sort(key=lambda r: unit["seeds"].index(r["seed"]))
        trace = {k: [r["trace"][k] for r in recs] for k in recs[0]["trace"] if k != "step"}
        results.append({
            **{k: v for k, v in unit.items() if k not in _SUMMARY},
            "final_gap": [r["final_gap"] for r in recs],
            "num_queries": [r["num_queries"] for r in recs],
            "trace": {"step": recs[0]["trace"]["step"], **trace}})
    return (protocols.from_dict(data["protocol"]), results,
            run_record.RunRecord.from_dict(data["record"]))
