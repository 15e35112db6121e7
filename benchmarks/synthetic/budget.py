"""Budget mode: ``run(protocol, method)`` until the budget, and query regret
(:mod:`benchmarks.anytime`) against the best fixed K in hindsight and, when the protocol
runs the (learning rate, K) grid (``lr_scales``), against its best point (protocols:
:func:`protocol.budget`). A method told its budget (a cosine decay over the budget,
``tuning_free:budget``) is scored at each budget by its run told that budget.

A run is one ``lax.while_loop`` over log periods that stops when the lane's calls reach
the budget (under ``vmap`` the loop runs until the last seed stops; finished lanes keep
their state and are not counted).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from benchmarks import anytime
from benchmarks.synthetic import protocol as protocols
from benchmarks.synthetic import runner
from benchmarks.methods import Hyper
from benchmarks.synthetic.methods import Variant, variant
from benchmarks.synthetic.objectives import NOISY, OBJECTIVES
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
    return anytime_program(lambda key: variant.build(p.settings, key), objective, gap,
                           lambda key: _normal(key, p.dim), p.budget, p.log_every,
                           p.switch_at)


def anytime_program(build, objective, gap, start, budget: int, log_every: int,
                    switch_at: int | None = None, lanes=None):
    """A jit-compiled run until ``budget`` calls, logged every ``log_every`` steps.

    Args:
      build: key -> the optimizer; with ``lanes``, ``(key, lane) -> the optimizer``.
      objective: ``(x, batch, fid) -> f``, the objective ``fid`` on the data key ``batch``.
      gap: ``(x, fid) -> gap``.
      start: key -> ``x0``.
      switch_at: calls after which the objective id changes (``None``: never).
      lanes: values (e.g. learning-rate multipliers) of a setting ``build`` takes, all run
        in the one program (vmapped, one compilation); ``None``: no such setting.

    Returns:
      ``(seeds, fids) -> (calls, gaps, ks)`` log rows (``int32`` max where unused), vmapped
      over the seeds (and first over the lanes, if any: ``[lane, seed, row]``); ``fids``
      are the objective ids before and after the switch.
    """
    import jax
    import jax.numpy as jnp
    import optax

    rows = budget // (2 * log_every) + 2  # every method spends >= 2 calls a step
    switch_at = budget + 1 if switch_at is None else switch_at

    def one(seed, fids, *lane):
        opt = build(jax.random.fold_in(jax.random.key(seed), 1), *lane)
        x0 = start(jax.random.fold_in(jax.random.key(seed), 0))
        data_key = jax.random.fold_in(jax.random.key(seed), 2)

        def calls(state):
            return optax.tree.get(state, "num_queries")

        def fid(state):
            return jnp.where(calls(state) >= switch_at, fids[1], fids[0])

        def step(carry, _):
            x, state, t = carry
            updates, state2 = opt.update(None, state, x, value_fn=objective,
                                         batch=jax.random.fold_in(data_key, t), fid=fid(state))
            return (optax.apply_updates(x, updates), state2, t + 1), None

        def period(carry):
            x, state, t, row, log = carry
            (x, state, t), _ = jax.lax.scan(step, (x, state, t), None, length=log_every)
            entry = (calls(state), gap(x, fid(state)),
                     optax.tree.get(state, "last_k", 0))  # 0: a method without K
            log = tuple(a.at[row].set(v) for a, v in zip(log, entry))
            return x, state, t, row + 1, log

        state = opt.init(x0)
        log = (jnp.zeros(rows, jnp.int32).at[1:].set(jnp.iinfo(jnp.int32).max),
               jnp.full(rows, gap(x0, fids[0]), jnp.float32), jnp.zeros(rows, jnp.int32))
        carry = (x0, state, jnp.int32(0), jnp.int32(1), log)
        *_, log = jax.lax.while_loop(
            lambda c: (calls(c[1]) < budget) & (c[3] < rows), period, carry)
        return log

    if lanes is None:
        return jax.jit(jax.vmap(one, in_axes=(0, None)))
    per_lane = jax.vmap(one, in_axes=(0, None, None))
    values = jnp.asarray(lanes)
    return jax.jit(lambda seeds, fids: jax.vmap(per_lane, in_axes=(None, None, 0))(
        seeds, fids, values))


def logged_curves(calls, gaps, ks, grid) -> dict[str, Any]:
    """The log rows of :func:`anytime_program` as a record's per-seed fields: the calls
    and gap of the last row, the gap and K curves sampled on ``grid``."""
    rows = [np.flatnonzero(c < np.iinfo(np.int32).max) for c in calls]
    return {
        "num_queries": [int(c[r[-1]]) for c, r in zip(calls, rows)],
        "final_gap": [float(g[r[-1]]) for g, r in zip(gaps, rows)],
        "curves": [anytime.sample_curve(c[r], g[r], grid).tolist()
                   for c, g, r in zip(calls, gaps, rows)],
        "k_curves": [anytime.sample_curve(c[r], k[r], grid).tolist()
                     for c, k, r in zip(calls, ks, rows)],
    }


def lanes(v: Variant, settings: Hyper, budgets, lr_scales=()) -> tuple[Any, Any, list[dict]]:
    """What one program runs in its vmapped lanes: ``(build(key, lane), lane values, each
    lane's record fields)``. A fixed K runs every learning rate of the grid (the
    ``settings``' lr times ``lr_scales``); a cosine decay every budget (its steps traced;
    lanes past their budget take zero steps); any other method one lane."""
    if v.fixed_k and lr_scales:
        return (lambda key, s: v.build(replace(settings, lr=settings.lr * s), key),
                lr_scales, [scaled(v, s) for s in lr_scales])
    if v.told_budget and not v.told_by_rebuild:
        return (lambda key, b: v.build(settings, key, b), budgets,
                [{"told_budget": b} for b in budgets])
    return (lambda key, _: v.build(settings, key), (0.0,), [{}])


def scaled(v: Variant, scale: float) -> dict[str, Any]:
    """The record fields of the fixed-K method ``v`` at ``scale`` x the rule's lr."""
    spec = v.name if scale == 1.0 else v.name + (
        "," if ":" in v.name else ":") + f"lr_scale={scale}"
    w = variant(spec)
    return {"method": w.name, "label": w.display, "fixed_k": w.fixed_k, "grid_k": w.grid_k,
            "lr_scale": scale}


def record_methods(p: Protocol) -> list[str]:
    """The ``method`` of every record a run of ``p`` writes, in the protocol's order: each
    variant, then its grid points (:func:`lanes`)."""
    return list(dict.fromkeys(
        spec for v in p.variants for spec in (v.name, *(
            scaled(v, s)["method"] for s in (p.lr_scales if v.backbone == "radazo" and
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
        build, values, fields = lanes(v, p.settings, p.budgets, scales)
        if told:
            build = lambda key, _, b=int(told): v.build(p.settings, key, b)  # noqa: E731
        program = (_program(p, v) if len(fields) == 1 and not told else anytime_program(
            build, objective, gap, lambda key: _normal(key, p.dim), int(told or p.budget),
            p.log_every, p.switch_at, lanes=values))
        compile_seconds, runs = runner.compiled_runs(program, p.seeds, fids)
        for function, (log, seconds) in zip(p.functions, runs):
            for lane, extra in enumerate(fields):
                lane_log = log if len(fields) == 1 and not told else [a[lane] for a in log]
                out.append({
                    "function": function, "method": v.name, "label": v.display,
                    "backbone": v.backbone, "fixed_k": v.fixed_k, "grid_k": v.grid_k,
                    "lr_scale": v.lr_scale, "told_budget": told, "seeds": list(p.seeds),
                    **extra, **logged_curves(*lane_log, p.grid),
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
