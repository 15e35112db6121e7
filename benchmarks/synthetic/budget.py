"""Budget mode: ``run(protocol, method)`` until the budget, and query regret
(:mod:`benchmarks.anytime`) against the best fixed K in hindsight (protocols:
:func:`protocol.budget`).

A run is one ``lax.while_loop`` over log periods that stops when the lane's calls reach
the budget (under ``vmap`` the loop runs until the last seed stops; finished lanes keep
their state and are not counted).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from benchmarks import anytime
from benchmarks.synthetic import protocol as protocols
from benchmarks.synthetic import runner
from benchmarks.synthetic.methods import Variant
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
    import jax

    return anytime_program(lambda key: variant.build(p.settings, key), objective, gap,
                           lambda key: jax.random.normal(key, (p.dim,)), p.budget,
                           p.log_every, p.switch_at)


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


def run(p: Protocol, spec: str) -> list[dict[str, Any]]:
    """One method on every function of ``p``, compiled once; curves on the protocol grid."""
    v = protocols.find(p, spec)
    ends = [(f.split(">")[0], f.split(">")[-1]) for f in p.functions]  # before/after a switch
    compile_seconds, runs = runner.compiled_runs(
        _program(p, v), p.seeds, [[FUNCTIONS.index(n) for n in e] for e in ends])
    return [{
        "function": function, "method": v.name, "label": v.display,
        "backbone": v.backbone, "fixed_k": v.fixed_k, "seeds": list(p.seeds),
        **logged_curves(*log, p.grid),
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
