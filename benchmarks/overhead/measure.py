"""Timing, lane use and memory of one method on the quadratic with many vmapped seeds.

A run is one compiled program: ``lanes`` seeds start from their own Gaussian point and
step (``vmap`` of the method's step inside :func:`benchmarks.loops.while_any`) until
every lane has made ``budget`` oracle calls; a lane that reaches the budget keeps its
state while the others go on (its further steps are computed and discarded). This is
what ``jax.vmap`` of a per-seed loop (``zoaq_jax.run``, ``benchmarks.loops``' anytime
program) compiles to, written out as its own loop because it counts what those cannot
see, the evaluations the batch executes against those its unfinished lanes use:

* useful calls: the oracle calls the lanes' ledgers count (``num_queries``), the calls
  the library reports to the user;
* executed direction evaluations: under ``vmap`` the expansion ``while_loop`` runs until
  the slowest lane accepts, so each lane evaluates ``max_lanes(K)`` directions a step
  (``k_max`` with eager evaluation, ``K`` for fixed methods);
* lane use = useful / executed direction evaluations over the run, counting the steps
  of lanes that already reached the budget as executed and not useful. ``1 - lane use``
  is the wasted fraction of objective evaluations.

One seed (``lanes == 1``) runs unbatched, as a user runs one seed (:func:`over_lanes`).
Compilation is excluded from the run time and reported separately; calls/s is useful
calls (all lanes) per second of run time, the minimum over interleaved rounds of wall or
CPU time (:mod:`benchmarks.overhead.protocol`).
"""

from __future__ import annotations

import functools
import time
from typing import Any

import numpy as np

from benchmarks import loops
from benchmarks.common import progress
from benchmarks.overhead import methods as methods_mod
from benchmarks.overhead import protocol
from benchmarks.overhead import torch_loop
from benchmarks.overhead.methods import quadratic, record


def over_lanes(fn, lanes: int, in_axes: Any = 0):
    """``jax.vmap(fn, in_axes)`` over ``lanes`` seeds; for one seed, ``fn`` unbatched, with
    the lane axis taken off its batched arguments and put back on its outputs.

    XLA:CPU compiles a batch of one to other kernels than the unbatched program, some
    much slower: at d = 10^4 the estimators' sum of ``K = 10`` weighted directions, a
    reduction of shape ``(1, K, d)`` under ``vmap`` over one seed, took about 20 times
    as long as the same reduction of shape ``(K, d)`` (``docs/results/overhead_large_d.md``,
    section "d = 10^4").
    """
    import jax

    if lanes > 1:
        return jax.vmap(fn, in_axes)
    axes = in_axes if isinstance(in_axes, tuple) else None

    def one(*args):
        args = [a if (axes and axes[i] is None) else jax.tree.map(lambda x: x[0], a)
                for i, a in enumerate(args)]
        return jax.tree.map(lambda x: x[None], fn(*args))

    return one


def round_robin(calls: dict, repeats: int, clock: str = "wall") -> dict[Any, list[float]]:
    """Seconds (``clock``: ``"wall"`` or ``"cpu"``) of each of ``calls`` (name -> a
    function of no arguments, already compiled and warm), ``repeats`` interleaved rounds
    (:func:`benchmarks.overhead.protocol.interleaved`)."""
    import jax

    times = {name: [] for name in calls}

    def once(name):
        _, wall, cpu = protocol.timed(lambda: jax.block_until_ready(calls[name]()))
        times[name].append(cpu if clock == "cpu" else wall)

    protocol.interleaved(list(calls), repeats, once, desc=None)
    return times


def _initial_point(seed, d: int):
    import jax

    return jax.random.normal(jax.random.fold_in(jax.random.key(seed), 0), (d,))


def program(name: str, d: int, lanes: int, budget: int):
    """The jit-compiled run of method ``name``: ``seeds [lanes] -> results``."""
    import jax
    import jax.numpy as jnp

    method = methods_mod.timed(name)
    algo = methods_mod.algo(name, quadratic, d)
    max_steps = budget // 2 + 1  # every step makes at least 2 calls
    lanes_of = functools.partial(over_lanes, lanes=lanes)

    def run(seeds):
        keys = lanes_of(lambda s: jax.random.fold_in(jax.random.key(s), 1))(seeds)
        x0 = lanes_of(lambda s: _initial_point(s, d))(seeds)
        state = lanes_of(algo.init)(keys, x0)

        def active(carry):
            return lanes_of(algo.calls)(carry[0]) < budget

        def step(carry):
            state, useful, executed = carry
            going = active(carry)
            new = lanes_of(algo.step)(state)
            k = lanes_of(algo.last_k)(new).astype(jnp.uint32)

            def keep(n, o):
                mask = going.reshape(going.shape + (1,) * (n.ndim - 1))
                return jnp.where(mask, n, o)

            state = jax.tree.map(keep, new, state)
            per_lane = jnp.uint32(method.k_max) if method.evaluation != "loop" else jnp.max(k)
            useful = useful + jnp.sum(jnp.where(going, k, 0), dtype=jnp.uint32)
            executed = executed + jnp.uint32(lanes) * per_lane
            return state, useful, executed

        zero = jnp.zeros((), jnp.uint32)
        (state, useful, executed), steps = loops.while_any(
            step, active, (state, zero, zero), max_steps)
        gaps = jax.vmap(quadratic)(lanes_of(algo.params)(state))
        return {"calls": lanes_of(algo.calls)(state), "gap": gaps, "steps": steps,
                "useful": useful, "executed": executed}

    return jax.jit(run), algo


def _memory(compiled) -> dict[str, Any]:
    try:
        m = compiled.memory_analysis()  # None or raising on some backends
    except (NotImplementedError, RuntimeError, ValueError):
        m = None
    return {name: int(getattr(m, name)) for name in (
        "argument_size_in_bytes", "output_size_in_bytes", "temp_size_in_bytes",
        "generated_code_size_in_bytes") if hasattr(m, name)}


class Case:
    """One compiled (method, d, seeds, budget) configuration; ``seeds`` a count ``n`` (the
    seeds ``0 .. n-1``) or the seeds, one vmapped lane each."""

    def __init__(self, name: str, d: int, seeds: int | tuple[int, ...], budget: int):
        import jax
        import jax.numpy as jnp

        self.seeds = jnp.asarray(tuple(range(seeds)) if isinstance(seeds, int) else seeds,
                                 jnp.int32)
        self.name, self.d, self.lanes, self.budget = name, d, len(self.seeds), budget
        fn, algo = program(name, d, self.lanes, budget)
        start = time.perf_counter()
        self.compiled = fn.lower(self.seeds).compile()
        self.compile_seconds = time.perf_counter() - start
        self.memory = _memory(self.compiled)
        state = algo.init(jax.random.key(0), _initial_point(0, d))  # typed keys as key data
        self.state_bytes = sum(int(np.asarray(
            jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x
        ).nbytes) for x in jax.tree.leaves(state))
        self.times: list[float] = []  # wall seconds of every round
        self.cpu_times: list[float] = []  # the process's CPU seconds of every round
        self.out = None

    def time_once(self) -> None:
        import jax

        out = protocol.timed_round(
            self, lambda: jax.block_until_ready(self.compiled(self.seeds)))
        self.out = jax.tree.map(np.asarray, out)

    def record(self, clock: str = "wall") -> dict[str, Any]:
        out = self.out
        return record(self, int(out["steps"]), int(out["calls"].astype(np.int64).sum()),
                      float(out["useful"]) / max(float(out["executed"]), 1.0),
                      out["gap"].tolist(), clock)


def measure(configs: list[tuple], repeats: int, section: str,
            loads: list | None = None, clock: str = "wall") -> list[dict]:
    """Compiles every ``(method, d, seeds, budget)``, then times them in ``repeats``
    interleaved rounds (:mod:`benchmarks.overhead.protocol`), appending the 1-minute load
    before each round to ``loads``; rates and costs from the minimum of ``clock``'s
    seconds."""
    cases = [(torch_loop.Case if c[0] == torch_loop.NAME else Case)(*c)
             for c in progress(configs, desc=f"{section}: compile")]
    protocol.interleaved(cases, repeats, lambda case: case.time_once(), loads,
                         f"{section}: timing rounds")
    return [case.record(clock) for case in cases]


IMPLS = ("threefry2x32", "philox4x32", "rbg")  # key implementations timed drawing alone


def directions(key, n: int, x):
    """A step's ``n`` Gaussian directions of ``x``'s shape, from the per-direction keys of
    ``key`` (as the estimators draw them)."""
    from zoaq_jax._src import directions as dirs
    from zoaq_jax._src import ledger

    return dirs.sample_many(dirs.family("gaussian"), ledger.direction_keys(key, 0, n), x)


def parts(d: int, lanes: int, steps: int, k: int = 10, clock: str = "wall") -> dict[str, float]:
    """µs per step of the parts of a K-direction step, ``lanes`` seeds (:func:`over_lanes`),
    in scans of ``steps``: drawing ``k`` Gaussian directions in one batch, ``2k`` objective calls on
    drawn directions, an empty step (the loop's own cost) and, for each key
    implementation of :data:`IMPLS`, drawing one direction alone (``alone_IMPL``); the
    minimum of ``clock``'s seconds over 3 rounds."""
    import jax
    import jax.numpy as jnp

    from zoaq_jax._src import directions as dirs

    u_fixed = jax.random.normal(jax.random.key(3), (k, d))

    def draw(x, lane, t):
        key = jax.random.fold_in(jax.random.fold_in(jax.random.key(0), lane), t)
        return x + 1e-9 * jnp.sum(directions(key, k, x), axis=0)

    def evaluate(x, lane, t):
        pts = jnp.concatenate([x + 1e-3 * u_fixed, x - 1e-3 * u_fixed])
        return x + 1e-9 * jnp.sum(jax.vmap(quadratic)(pts))

    def empty(x, lane, t):
        return x + 1e-9 * t.astype(x.dtype)

    def alone(impl):
        def draw_one(x, lane, t):
            key = jax.random.fold_in(jax.random.fold_in(jax.random.key(0, impl=impl), lane), t)
            return x + 1e-9 * dirs.sample(dirs.family("gaussian"), key, x)
        return draw_one

    out = {}
    for label, fn in (("draw", draw), ("evaluate", evaluate), ("empty", empty),
                      *((f"alone_{impl}", alone(impl)) for impl in IMPLS)):
        def run(x, fn=fn):
            lane = jnp.arange(lanes)
            step = over_lanes(fn, lanes, (0, 0, None))
            return jax.lax.scan(lambda c, t: (step(c, lane, t), None),
                                x, jnp.arange(steps))[0]

        x = jnp.zeros((lanes, d))
        compiled = jax.jit(run).lower(x).compile()
        jax.block_until_ready(compiled(x))
        times = round_robin({label: lambda: compiled(x)}, 3, clock)[label]
        out[label] = 1e6 * float(np.min(times)) / steps
    return out
