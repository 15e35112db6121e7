"""Many attacks of one method as one vmapped program, with finished lanes compacted away.

Each lane is one attack (an image, its attacked class, a seed). One iteration of a lane:

1. query the centre :math:`F(x_t)` (1 call, counted here);
2. if :math:`F(x_t) < 0` the attack has succeeded: the lane stops, and its count stops
   with this call;
3. else call the estimator with ``value=F(x_t)`` (it adds only its own perturbed calls,
   counted in its ``num_queries``) and take the optimizer step.

A lane also stops after ``max_steps`` iterations (failure). Queries of an attack are
its centre calls plus the estimator's ``num_queries``.

Lane waste. Under ``jax.vmap`` a ``lax.while_loop`` runs until its slowest lane is done,
still computing finished lanes (counts stay exact, the work is wasted). So the attacks
of a method share one compiled loop over ``width`` lanes, run in chunks of ``chunk``
iterations; after each chunk finished lanes are recorded and refilled with attacks not
yet started, and once none are left the unfinished lanes are gathered into narrower
power-of-two batches (one compile per width). :class:`Outcome` reports the waste as
``lane_steps_executed`` vs ``lane_steps_useful``.

Why its own loop. ``zoaq_jax.run`` and the harness's anytime program
(:func:`benchmarks.loops.anytime_program`) run one lane to a step count or a call
budget; an attack stops on its own result (the centre call that finds ``F < 0`` is its
last, and its estimator calls of that iteration are never made), and its lanes are
refilled between chunks, which a ``vmap`` of a per-lane loop cannot do. The chunk is
:func:`benchmarks.loops.while_any` (shared with the overhead sweep) over :func:`program`'s
masked step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from benchmarks import loops

BuildOptimizer = Callable[[jax.Array], optax.GradientTransformationExtraArgs]
Loss = Callable[[jax.Array, jax.Array, jax.Array], jax.Array]


class AttackConfig(NamedTuple):
    """Loop settings shared by all lanes."""

    max_steps: int = 20_000  # iteration cap (each iteration queries the centre once)
    width: int = 32  # lanes computed together (one vmapped batch)
    chunk: int = 50  # iterations between host checks (refill and compaction points)
    trace_len: int = 0  # per-iteration F and consistency kept for the first trace_len
    min_width: int = 4  # narrowest batch compaction produces


class Tasks(NamedTuple):
    """One row per attack."""

    image0: np.ndarray  # [N, H, W, C] clean images
    cls: np.ndarray  # [N] int32 attacked class (target, or true label)
    seed: np.ndarray  # [N] int32: x_0 and the directions come from it


class Lane(NamedTuple):
    x: jax.Array  # [d] the attack variable
    opt_state: Any
    loss: jax.Array  # F at the last queried centre
    steps: jax.Array  # int32 iterations started = centre calls
    success: jax.Array  # bool
    trace_loss: jax.Array  # [trace_len] F(x_t)
    trace_cos: jax.Array  # [trace_len] momentum consistency of the estimate at step t


class Outcome(NamedTuple):
    """Per-attack results (numpy, attack order) and the batch's execution counts."""

    success: np.ndarray  # [N] bool
    num_queries: np.ndarray  # [N] int, until success (or the cap)
    steps: np.ndarray  # [N] int, iterations run
    loss: np.ndarray  # [N] float, F at the last queried point
    x: np.ndarray  # [N, d] final attack variable (at success: the successful point)
    trace_loss: np.ndarray  # [N, trace_len], NaN after the attack stopped
    trace_cos: np.ndarray  # [N, trace_len]
    lane_steps_executed: int  # lane-iterations computed (including finished lanes)
    lane_steps_useful: int  # lane-iterations of unfinished lanes (= steps.sum())
    widths: tuple[int, ...]  # batch widths used (one compile each)


def _where(cond: jax.Array, new: Any, old: Any) -> Any:
    return jax.tree.map(lambda a, b: jnp.where(cond, a, b), new, old)


def initial_point(seed: jax.Array, dim: int) -> jax.Array:
    """:math:`x_0 \\sim N(0, I_d)` drawn from the attack's seed."""
    return jax.random.normal(jax.random.fold_in(jax.random.key(seed), 0), (dim,))


def direction_key(seed: jax.Array) -> jax.Array:
    """The estimator's key, a stream of the seed separate from :func:`initial_point`."""
    return jax.random.fold_in(jax.random.key(seed), 1)


class Program(NamedTuple):
    """The compiled pieces of one method's lanes (functions of lanes and their tasks)."""

    init: Callable[[Tasks], Lane]  # a lane of each task (vmapped, jitted)
    advance: Callable[..., tuple[Lane, jax.Array]]  # up to `budget` iterations
    summary: Callable[[Lane], dict[str, jax.Array]]  # what the host records
    refill: Callable[[Lane, Tasks, jax.Array], Lane]  # fresh lanes where asked


def program(loss: Loss, build: BuildOptimizer, dim: int, config: AttackConfig) -> Program:
    """The lane program of one method: iteration, recording and refill (see the module
    docstring)."""
    trace_len = config.trace_len

    def init(task: Tasks) -> Lane:
        x = initial_point(task.seed, dim)
        return Lane(x=x, opt_state=build(direction_key(task.seed)).init(x),
                    loss=jnp.asarray(jnp.inf, jnp.float32), steps=jnp.zeros((), jnp.int32),
                    success=jnp.zeros((), bool),
                    trace_loss=jnp.full((trace_len,), jnp.nan, jnp.float32),
                    trace_cos=jnp.full((trace_len,), jnp.nan, jnp.float32))

    def active(lane: Lane) -> jax.Array:
        return ~lane.success & (lane.steps < config.max_steps)

    def step(lane: Lane, task: Tasks) -> Lane:
        opt = build(direction_key(task.seed))
        value = loss(lane.x, task.image0, task.cls).astype(jnp.float32)
        success = value < 0
        updates, opt_state = opt.update(None, lane.opt_state, lane.x, value_fn=loss,
                                        value=value, image0=task.image0, cls=task.cls)
        # At success the iterate and the optimizer state stay (the estimator's calls of
        # this iteration are never made by a real attacker, so they are not counted).
        moved = lane._replace(
            x=jnp.where(success, lane.x, optax.apply_updates(lane.x, updates)),
            opt_state=_where(success, lane.opt_state, opt_state),
            loss=value, steps=lane.steps + 1, success=success)
        if trace_len:
            cos = jnp.where(success, jnp.nan, optax.tree.get(opt_state, "consistency", jnp.nan))
            moved = moved._replace(
                trace_loss=lane.trace_loss.at[lane.steps].set(value, mode="drop"),
                trace_cos=lane.trace_cos.at[lane.steps].set(cos, mode="drop"))
        return _where(active(lane), moved, lane)

    @jax.jit
    def advance(lanes: Lane, tasks: Tasks, budget: jax.Array) -> tuple[Lane, jax.Array]:
        return loops.while_any(lambda lanes: jax.vmap(step)(lanes, tasks), jax.vmap(active),
                               lanes, budget)

    @jax.jit
    def summary(lanes: Lane) -> dict[str, jax.Array]:
        estimator_calls = jax.vmap(lambda s: optax.tree.get(s, "num_queries"))(lanes.opt_state)
        return {"active": jax.vmap(active)(lanes), "success": lanes.success,
                "num_queries": lanes.steps + estimator_calls, "steps": lanes.steps,
                "loss": lanes.loss, "x": lanes.x, "trace_loss": lanes.trace_loss,
                "trace_cos": lanes.trace_cos}

    @jax.jit
    def refill(lanes: Lane, slot_tasks: Tasks, fresh: jax.Array) -> Lane:
        return jax.vmap(_where)(fresh, jax.vmap(init)(slot_tasks), lanes)

    return Program(jax.jit(jax.vmap(init)), advance, summary, refill)


def run_attacks(loss: Loss, build: BuildOptimizer, tasks: Tasks, config: AttackConfig) -> Outcome:
    """Runs every attack of ``tasks`` with the optimizer ``build(key)`` (of one lane, called
    inside ``vmap``) on ``loss(x, image0, cls)`` until success (``loss < 0``) or the cap."""
    n = len(tasks.seed)
    if not (len(tasks.image0) == len(tasks.cls) == n):
        raise ValueError("tasks.image0, tasks.cls and tasks.seed must have the same length.")
    if n == 0:
        raise ValueError("No attacks to run.")
    prog = program(loss, build, int(np.prod(tasks.image0.shape[1:])), config)
    all_tasks = Tasks(jnp.asarray(tasks.image0, jnp.float32),
                      jnp.asarray(tasks.cls, jnp.int32), jnp.asarray(tasks.seed, jnp.int32))
    width = min(config.width, n)
    ids = np.arange(width)  # attack held by each slot; -1 for an idle slot
    queued = width  # attacks [queued, n) have not started
    slot_tasks = jax.tree.map(lambda a: a[:width], all_tasks)
    lanes = prog.init(slot_tasks)
    results: dict[str, np.ndarray] = {}  # per attack, filled as lanes finish
    recorded = np.zeros(n, bool)
    executed, widths = 0, [width]
    while True:
        lanes, ran = prog.advance(lanes, slot_tasks, jnp.int32(config.chunk))
        executed += len(ids) * int(ran)
        state = jax.tree.map(np.asarray, prog.summary(lanes))
        done = np.flatnonzero(~state["active"] & (ids >= 0))
        done = done[~recorded[ids[done]]]  # lanes that finished in this chunk
        for name, value in state.items():
            if name not in results:
                results[name] = np.zeros((n, *value.shape[1:]), value.dtype)
            results[name][ids[done]] = value[done]
        recorded[ids[done]] = True
        idle = np.flatnonzero(~state["active"])
        if queued < n and len(idle):  # refill idle slots with attacks not yet started
            slots = idle[: n - queued]
            ids[slots] = np.arange(queued, queued + len(slots))
            queued += len(slots)
            slot_tasks = jax.tree.map(lambda a: a[np.maximum(ids, 0)], all_tasks)
            lanes = prog.refill(lanes, slot_tasks, jnp.asarray(np.isin(np.arange(len(ids)), slots)))
            continue
        live = np.flatnonzero(state["active"])
        if not len(live):
            break
        narrow = max(config.min_width, 1 << int(np.ceil(np.log2(len(live)))))
        if narrow < len(ids):  # the tail: gather the unfinished lanes into a narrower batch
            slots = np.concatenate([live, idle[: narrow - len(live)]])
            lanes = jax.tree.map(lambda a: a[slots], lanes)
            slot_tasks = jax.tree.map(lambda a: a[slots], slot_tasks)
            ids = np.concatenate([ids[live], np.full(len(slots) - len(live), -1)])
            widths.append(narrow)

    return Outcome(
        success=results["success"], num_queries=results["num_queries"].astype(np.int64),
        steps=results["steps"].astype(np.int64), loss=results["loss"], x=results["x"],
        trace_loss=results["trace_loss"], trace_cos=results["trace_cos"],
        lane_steps_executed=executed, lane_steps_useful=int(results["steps"].sum()),
        widths=tuple(widths))
