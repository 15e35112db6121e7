"""The run loops of the harness: the anytime program (one method until a call budget,
its log rows every few steps) and the compile-once, run-per-objective driver.

A benchmark that compares methods at equal calls builds its program with
:func:`anytime_program` (the synthetic budget mode, generalization), runs it with
:func:`compiled_runs` and turns the log rows into a record's fields with
:func:`logged_curves`; a run of fixed length uses ``zoaq_jax.run`` (the synthetic steps
mode). A run is one ``lax.while_loop`` over log periods that stops when the lane's calls
reach the budget (under ``vmap`` the loop runs until the last seed stops; finished lanes
keep their state and are not counted).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from benchmarks import anytime, common
from benchmarks.methods import Hyper, Variant, variant


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
