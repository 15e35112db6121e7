"""Budget mode: ``run(protocol, method)`` until the budget, and query regret
(:mod:`benchmarks.anytime`) against the best fixed K in hindsight (protocols:
:func:`protocol.budget`).
The run is the harness's anytime program (:func:`benchmarks.loops.anytime_program`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from benchmarks import anytime, loops
from benchmarks.synthetic import protocol as protocols
from benchmarks.methods import Variant
from benchmarks.objectives import NOISY, OBJECTIVES
from benchmarks.synthetic.protocol import FUNCTIONS, Protocol


def objective(x, batch, fid):
    """The objective with id ``fid`` (its index in :data:`FUNCTIONS`); deterministic ones
    ignore the data key ``batch``."""
    import jax

    fns = [lambda x, b, o=o: o.fn(x) for o in OBJECTIVES.values()]
    fns += [lambda x, b, o=o: o.fn(x, b) for o in NOISY.values()]
    return jax.lax.switch(fid, fns, x, batch)


def gap(x, fid):
    """The optimality gap of objective ``fid`` at ``x`` (full data for noisy ones)."""
    import jax

    fns = [o.fn for o in OBJECTIVES.values()] + [o.gap for o in NOISY.values()]
    return jax.lax.switch(fid, fns, x)


def _program(p: Protocol, variant: Variant):
    """A jit-compiled function of (seeds, objective ids before/after the switch)."""
    import jax

    return loops.anytime_program(lambda key: variant.build(p.settings, key), objective, gap,
                           lambda key: jax.random.normal(key, (p.dim,)), p.budget,
                           p.log_every, p.switch_at)


def run(p: Protocol, spec: str) -> list[dict[str, Any]]:
    """One method on every function of ``p``, compiled once; curves on the protocol grid."""
    v = protocols.find(p, spec)
    ends = [(f.split(">")[0], f.split(">")[-1]) for f in p.functions]  # before/after a switch
    compile_seconds, runs = loops.compiled_runs(
        _program(p, v), p.seeds, [[FUNCTIONS.index(n) for n in e] for e in ends])
    return [{
        "function": function, "method": v.name, "label": v.display,
        "backbone": v.backbone, "fixed_k": v.fixed_k, "seeds": list(p.seeds),
        **loops.logged_curves(*log, p.grid),
        "compile_seconds": compile_seconds, "run_seconds": seconds,
    } for function, (log, seconds) in zip(p.functions, runs)]


def cost(p: Protocol, spec: str) -> float:
    """Rough relative cost of :func:`run`: small budgets take the most steps."""
    return 1.0 / (protocols.find(p, spec).fixed_k or 2)


# --------------------------------------------------------------------------- analysis


def regret_rows(p: Protocol, results) -> list[dict[str, Any]]:
    """Query regret of every non-fixed method against its backbone's fixed-K envelope."""
    grid = p.grid
    out = []
    for function in p.functions:
        rs = [r for r in results if r["function"] == function]
        for backbone in ("radazo", "zo_adamm"):
            fixed = {r["label"]: np.mean(r["curves"], axis=0) for r in rs
                     if r["fixed_k"] and r["backbone"] == backbone}
            if not fixed:
                continue
            env, best = anytime.envelope(fixed)
            for r in rs:
                if r["fixed_k"] or r["backbone"] != backbone:
                    continue
                curve = np.mean(r["curves"], axis=0)
                regrets = anytime.regret(grid, curve, env, p.budgets, origin=p.origin)
                at = [int(np.searchsorted(grid, b)) for b in p.budgets]
                ratio = [float(curve[i] / env[i]) for i in at]
                out.append({"function": function, "backbone": backbone, "method": r["method"],
                            "label": r["label"], "regret": regrets, "gap_ratio": ratio,
                            "gap_ratio_median": float(np.median(ratio)),
                            "best_fixed": [best[i] for i in at],
                            **anytime.summarize(regrets)})
    return out
