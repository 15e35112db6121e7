"""Step cost of ZoAQ against fixed-K R-AdaZO at the same number of oracle calls.

ZoAQ with ``k_min = k_max = K`` and ``n_hist`` retained records makes exactly the ``2K``
calls of an R-AdaZO step with ``K`` directions; the difference in time is the price of
the controller, the ring buffer and the regeneration of ``n_hist`` directions a step.
The price is measured on a cheap objective (a quadratic, where drawing Gaussian
directions dominates) and on a least-squares objective whose evaluation costs
``rows * d`` multiply-adds, across dimensions.

Example:
  python -m benchmarks overhead --out docs/results
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from benchmarks import common
from benchmarks import flags
from benchmarks import pool
from benchmarks import record as run_record

ROWS = 64  # rows of the least-squares objective


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dims", type=flags.positive_int, nargs="+",
                        default=[100, 10_000, 1_000_000])
    parser.add_argument("--ks", type=flags.positive_int, nargs="+", default=[1, 4])
    parser.add_argument("--n-hist", type=flags.positive_int, default=8)
    parser.add_argument("--steps", type=flags.positive_int, default=200,
                        help="steps per timing (a tenth, at least 10, for d > 10,000)")
    parser.add_argument("--repeats", type=flags.positive_int, default=5)
    parser.add_argument("--out", type=Path, default=Path("out"))


def _objectives(d: int):
    import jax
    import jax.numpy as jnp

    a = jax.random.normal(jax.random.key(1), (ROWS, d)) / np.sqrt(d)
    b = jax.random.normal(jax.random.key(2), (ROWS,))
    return {
        "quadratic": lambda x: 0.5 * jnp.sum(x**2),
        f"least squares ({ROWS} rows)": lambda x: jnp.mean((a @ x - b) ** 2),
    }


def _time_steps(opt, f, d: int, steps: int, repeats: int) -> float:
    """Median seconds per step of ``steps`` scanned updates (compilation excluded)."""
    import jax
    import jax.numpy as jnp
    import optax

    def go(params, state):
        def body(carry, _):
            p, s = carry
            u, s = opt.update(None, s, p, value_fn=f)
            return (optax.apply_updates(p, u), s), None

        return jax.lax.scan(body, (params, state), None, length=steps)[0]

    params = jnp.zeros(d)
    state = opt.init(params)
    compiled = jax.jit(go).lower(params, state).compile()
    jax.block_until_ready(compiled(params, state))  # warm up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(compiled(params, state))
        times.append((time.perf_counter() - start) / steps)
    return float(np.median(times))


def main(args: argparse.Namespace) -> int:
    machine = run_record.machine_info()  # before pinning: the cores of the machine
    pool.pin_to_cores(run_record.available_cores()[:1])
    import zoaq_jax

    rows, records = [], []
    cases = [(d, name, f, k) for d in args.dims for name, f in _objectives(d).items()
             for k in args.ks]
    for d, name, f, k in common.progress(cases, total=len(cases), desc="overhead"):
        steps = max(10, args.steps if d <= 10_000 else args.steps // 10)
        fixed = zoaq_jax.radazo(1e-3, k=k, key=0)
        zoaq = zoaq_jax.zoaq(1e-3, k_min=k, k_max=k, n_hist=args.n_hist, key=0)
        t_fixed = _time_steps(fixed, f, d, steps, args.repeats)
        t_zoaq = _time_steps(zoaq, f, d, steps, args.repeats)
        records.append({"d": d, "objective": name, "k": k, "calls_per_step": 2 * k,
                        "steps": steps,
                        "radazo_us": 1e6 * t_fixed, "zoaq_us": 1e6 * t_zoaq,
                        "ratio": t_zoaq / t_fixed})
        rows.append([f"{d:,}", name, k, 2 * k, f"{1e6 * t_fixed:,.1f}", f"{1e6 * t_zoaq:,.1f}",
                     f"{t_zoaq / t_fixed:.2f}"])
    command = flags.command_line("overhead", args)
    common.write_json(args.out / "overhead.json", {"command": command, "machine": machine,
                                                   "n_hist": args.n_hist, "records": records})
    table = common.markdown_table(
        ["d", "objective", "K", "calls/step", "R-AdaZO µs/step", "ZoAQ µs/step",
         "ZoAQ / R-AdaZO"], rows)
    text = "\n\n".join([
        f"Command: `{command}`",
        f"Machine: {machine['cpu']}, one pinned core of {machine['cores']}; JAX "
        f"{machine['jax']} on {machine['backend']}. Median of {args.repeats} timings of a "
        f"scanned run of {max(10, args.steps)} steps ({max(10, args.steps // 10)} for d > "
        "10,000), "
        "compilation excluded.",
        f"ZoAQ runs with `k_min = k_max = K` and `n_hist = {args.n_hist}`, so both methods "
        "make exactly `2K` oracle calls a step; the ratio is the price of the controller, "
        f"the ring buffer and regenerating {args.n_hist} retained directions a step.",
        table,
    ])
    common.write_markdown(args.out / "overhead.md",
                          "Step cost: ZoAQ against R-AdaZO at equal oracle calls", text, "overhead")
    print(table)
    return 0
