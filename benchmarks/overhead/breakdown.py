"""Where an adaptive step's time goes: ZoAQ's estimator against the fixed K=10 one.

Times the estimators alone (no backbone) on the quadratic, ``steps`` steps inside one
jitted ``lax.scan`` (one seed, or ``vmap`` over seeds), all configurations compiled
first and then timed round-robin in one process; the median of ``--repeats`` is
reported with each configuration's cost per step and per counted call against the fixed
estimator. The configurations isolate the parts of a ZoAQ step with the public API:

* ``fixed K=10``: :func:`zoaq_jax.fixed_estimator` (R-AdaZO's estimator);
* ``ZoAQ K=10, n_hist=0`` / ``n_hist=8``: ZoAQ with one budget (``k_min = k_max = 10``),
  without and with retained records: the cost of the records at equal draws of fresh
  directions and no expansion;
* ``ZoAQ K in [1,10], n_hist=0`` / ``n_hist=8`` (the default): the accept-or-expand loop;
* ``draw N``: :func:`directions.sample_many` of ``N`` Gaussian directions from per-direction
  keys, alone, per step (what a step's draws cost on their own).

Example:
  python -m benchmarks.overhead.breakdown --d 100 --lanes 1 5 --steps 2000 --repeats 5
"""

from __future__ import annotations

import argparse
import functools

from benchmarks import pages
from benchmarks.overhead import measure as measure_lib


def _program(build, d: int, lanes: int, steps: int):
    """``seeds -> (points, num_queries)`` after ``steps`` estimator steps, jitted."""
    import jax
    import optax

    def one(seed):
        est = build(key=jax.random.key(seed))
        x = jax.random.normal(jax.random.fold_in(jax.random.key(seed), 1), (d,))

        def body(carry, _):
            x, state = carry
            g, state = est.update(None, state, x, value_fn=measure_lib.quadratic)
            return (x - 1e-3 * g, state), None

        (x, state), _ = jax.lax.scan(body, (x, est.init(x)), None, length=steps)
        return x, optax.tree.get(state, "num_queries")

    return jax.jit(measure_lib.over_lanes(one, lanes))


def _draw_program(n: int, d: int, lanes: int, steps: int):
    """``seeds -> sums`` of ``n`` directions drawn per step, ``steps`` steps, jitted."""
    import jax
    import jax.numpy as jnp

    def one(seed):
        def body(total, t):
            u = measure_lib.directions(jax.random.fold_in(jax.random.key(seed), t), n,
                                       jnp.zeros(d))
            return total + jnp.sum(u, axis=0), None

        return jax.lax.scan(body, jnp.zeros(d), jnp.arange(steps))[0], jnp.zeros((), jnp.int32)

    return jax.jit(measure_lib.over_lanes(one, lanes))


def measure(d: int, lanes: int, steps: int, repeats: int) -> list[dict]:
    """One row per configuration: median seconds, steps, counted calls, ratios."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    import zoaq_jax

    def zoaq(k_min, n_hist):
        return functools.partial(zoaq_jax.zoaq_estimator, k_min=k_min, k_max=10,
                                 retention=zoaq_jax.retention.fifo(n_hist))

    configs = {"fixed K=10": functools.partial(zoaq_jax.fixed_estimator, k=10),
               "ZoAQ K=10, n_hist=0": zoaq(10, 0), "ZoAQ K=10, n_hist=8": zoaq(10, 8),
               "ZoAQ K in [1,10], n_hist=0": zoaq(1, 0), "ZoAQ K in [1,10], n_hist=8": zoaq(1, 8)}
    seeds = jnp.arange(lanes)
    programs = {name: _program(build, d, lanes, steps) for name, build in configs.items()}
    programs.update({f"draw {n}": _draw_program(n, d, lanes, steps) for n in (1, 10, 18)})
    calls = {name: int(np.sum(jax.block_until_ready(f(seeds))[1]))  # compile, warm up
             for name, f in programs.items()}
    times = measure_lib.round_robin(
        {name: functools.partial(f, seeds) for name, f in programs.items()}, repeats)
    base = np.median(times["fixed K=10"])
    rows = []
    for name in programs:
        t = float(np.median(times[name]))
        per_call = t / calls[name] if calls[name] else float("nan")
        rows.append({"config": name, "d": d, "lanes": lanes, "us_per_step": t / steps * 1e6,
                     "step_vs_fixed": t / base,
                     "calls_per_step": calls[name] / steps / lanes,
                     "call_vs_fixed": per_call / (base / calls["fixed K=10"])})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--d", type=int, nargs="+", default=[100])
    parser.add_argument("--lanes", type=int, nargs="+", default=[1, 5])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    rows = [r for d in args.d for lanes in args.lanes
            for r in measure(d, lanes, args.steps, args.repeats)]
    print(pages.table(
        ["d", "seeds", "configuration", "µs/step", "step vs fixed", "calls/step/seed",
         "cost/call vs fixed"],
        [[f"{r['d']:,}", r["lanes"], r["config"], f"{r['us_per_step']:.1f}",
          f"{r['step_vs_fixed']:.2f}", f"{r['calls_per_step']:.1f}" if r["calls_per_step"] else "-",
          f"{r['call_vs_fixed']:.2f}" if r["calls_per_step"] else "-"] for r in rows]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
