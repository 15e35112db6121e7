"""Budget mode: ``run(protocol, method)`` until the budget, and query regret
(:mod:`benchmarks.anytime`) against the best fixed K in hindsight and, when the protocol
runs the (learning rate, K) grid (``lr_scales``), against its best point (protocols:
:func:`protocol.budget`). A method told its budget (a cosine decay over the budget,
``tuning_free:budget``) is scored at each budget by its run told that budget.
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
    return loops.anytime_program(lambda key: variant.build(p.settings, key), objective, gap,
                                 lambda key: _normal(key, p.dim), p.budget, p.log_every,
                                 p.switch_at)


def record_methods(p: Protocol) -> list[str]:
    """The ``method`` of every record a run of ``p`` writes, in the protocol's order: each
    variant, then its grid points (:func:`lanes`)."""
    return list(dict.fromkeys(
        spec for v in p.variants for spec in (v.name, *(
            loops.scaled(v, s)["method"] for s in (p.lr_scales if v.backbone == "radazo" and
                                             v.fixed_k else ())))))


def run(p: Protocol, spec: str) -> list[dict[str, Any]]:
    """One method on every function of ``p``, compiled once (once a budget for a complete
    optimizer told its budget); curves on the protocol grid. R-AdaZO's fixed K run every
    learning rate of ``p.lr_scales`` as lanes of the one program (:func:`lanes`)."""
    v = protocols.find(p, spec)
    ends = [(f.split(">")[0], f.split(">")[-1]) for f in p.functions]  # before/after a switch
    fids = [[FUNCTIONS.index(n) for n in e] for e in ends]
    scales = p.lr_scales if v.backbone == "radazo" else ()
    out = []
    for told in p.budgets if v.told_by_rebuild else (None,):  # told: int(told) calls
        build, values, fields = loops.lanes(v, p.settings, p.budgets, scales)
        if told:
            build = lambda key, _, b=int(told): v.build(p.settings, key, b)  # noqa: E731
        program = (_program(p, v) if len(fields) == 1 and not told else loops.anytime_program(
            build, objective, gap, lambda key: _normal(key, p.dim), int(told or p.budget),
            p.log_every, p.switch_at, lanes=values))
        compile_seconds, runs = loops.compiled_runs(program, p.seeds, fids)
        for function, (log, seconds) in zip(p.functions, runs):
            for lane, extra in enumerate(fields):
                lane_log = log if len(fields) == 1 and not told else [a[lane] for a in log]
                out.append({
                    "function": function, "method": v.name, "label": v.display,
                    "backbone": v.backbone, "fixed_k": v.fixed_k, "grid_k": v.grid_k,
                    "lr_scale": v.lr_scale, "told_budget": told, "seeds": list(p.seeds),
                    **extra, **loops.logged_curves(*lane_log, p.grid),
                    "compile_seconds": compile_seconds, "run_seconds": seconds})
    return out


def _normal(key, dim: int):
    import jax

    return jax.random.normal(key, (dim,))


def cost(p: Protocol, spec: str) -> float:
    """Rough relative cost of :func:`run`: small budgets take the most steps; the grid's
    lanes and the runs told each budget multiply it."""
    v = protocols.find(p, spec)
    runs = len(p.lr_scales) if v.fixed_k and v.backbone == "radazo" and p.lr_scales else (
        2.0 if v.told_budget else 1.0)
    return runs / (v.fixed_k or 2)


# --------------------------------------------------------------------------- analysis


BACKBONES = {"radazo": "R-AdaZO", "zo_adamm": "ZO-AdaMM"}  # fixed-K families, envelopes


def family(r: dict[str, Any]) -> str:
    """The fixed-K family a record is scored against: ZO-AdaMM's for a ZO-AdaMM method,
    else R-AdaZO's (a parameter-free step after the R-AdaZO estimator, a complete
    optimizer)."""
    return r["backbone"] if r["backbone"] in BACKBONES else "radazo"


def compact(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records as stored when the grid ran (:func:`benchmarks.anytime.compact`, by
    function and fixed-K family): mean curves, none for a grid point never its envelope."""
    return anytime.compact(results, lambda r: (r["function"], family(r)))


def regret_rows(p: Protocol, results) -> list[dict[str, Any]]:
    """Query regret of every scored method (neither a fixed K nor a grid point) against
    its family's fixed-K envelope (``regret``) and, where the grid ran, the (learning
    rate, K) grid's envelope (``regret_grid``); a method told its budget is scored at each
    budget by its run told that budget. The fixed-K envelope itself is scored against the
    grid's (method ``best_fixed_k``)."""
    grid = p.grid
    at = [int(np.searchsorted(grid, b)) for b in p.budgets]
    out = []
    for function in p.functions:
        for backbone in BACKBONES:
            rs = [r for r in results if r["function"] == function and family(r) == backbone]
            if not any(r["fixed_k"] for r in rs):
                continue
            envs = anytime.envelopes(rs)
            best = {kind: [labels[i] for i in at] for kind, (_, labels) in envs.items()}
            head = {"function": function, "backbone": backbone,
                    "best_fixed": [f"{BACKBONES[backbone]} {b}" for b in best["fixed"]]}
            if "grid" in best:
                head["best_grid"] = best["grid"]
            scored = {m: (e["record"]["label"], anytime.curve_at(e["curves"]))
                      for m, e in anytime.scored_curves(rs).items()}
            if "grid" in envs:
                scored = {"best_fixed_k": ("best fixed K in hindsight",
                                           lambda b: envs["fixed"][0]), **scored}
            for method, (label, curve_of) in scored.items():
                row = {**head, "method": method, "label": label}
                for kind, key in (("fixed", "regret"), ("grid", "regret_grid")):
                    if kind in envs:
                        row[key] = [anytime.regret(grid, curve_of(b), envs[kind][0], [b],
                                                   origin=p.origin)[0] for b in p.budgets]
                        row.update({(k if kind == "fixed" else f"{k}_grid"): v
                                    for k, v in anytime.summarize(row[key]).items()})
                ratio = [float(curve_of(b)[i] / envs["fixed"][0][i])
                         for b, i in zip(p.budgets, at)]
                out.append({**row, "gap_ratio": ratio,
                            "gap_ratio_median": float(np.median(ratio))})
    return out
