"""Compile latency: what a user waits for before the first step, with XLA's default flags.

For every alias of the library (:data:`ALIASES`) the measured program is its jitted step
``(x, state) -> (x + update, state)`` on the quadratic, at each dimension of the preset;
``run`` is :func:`zoaq_jax.run` of ``zoaq`` for 10 steps (its first call less its second,
cached, call); the references are ``optax.adam``'s step on the exact gradient and evosax's
``Open_ES`` ask-evaluate-tell step (:mod:`benchmarks.overhead.methods`), built in the same
process.

Protocol: the speed benchmark's (:mod:`benchmarks.overhead.protocol`: interleaved rounds,
order rotated, the load before each round), with caches cleared before every measurement
(``jax.clear_caches()``; the persistent compilation cache is off unless the user
configured one, and the record says so), the process's CPU time of every round recorded
(compilation is host work, on any backend). Ratios are paired within a round, the median
over rounds (:func:`ratios`): a slow phase of the machine slows every program of a round
alike, so the ratio of two minima compares different phases; the targets apply to the
median over rounds of a program's CPU time (:func:`median_cpu`: what a user typically
meets, where the minimum is one lucky round).

A program's time is tracing and lowering (``jit(f).lower``) plus XLA's compilation
(``.compile()``); the first execution is timed apart. Kernel counts of the compiled
program (fusions, while loops) show what the compiler was given.
"""

from __future__ import annotations

import os
import re
import statistics
from typing import Any

from benchmarks.overhead import protocol
from benchmarks.overhead.measure import quadratic

ALIASES = ("zoaq", "zoar", "auto_k", "radazo", "zo_adamm", "zo_sgd", "mezo", "statzo")
RUN = "run"  # zoaq_jax.run of zoaq
REFERENCES = ("adam", "open_es")
METHODS = (*ALIASES, RUN, *REFERENCES)
TARGETS = {"zoaq": 2.0}  # seconds on an idle core (issue 36); the other aliases:
TARGET = 1.5
RUN_STEPS = 10


def _step(name: str, d: int):
    """The jitted program of ``name`` and its arguments, built anew."""
    import jax
    import jax.numpy as jnp
    import optax

    import zoaq_jax

    x = jnp.ones(d)
    if name == "open_es":
        from benchmarks.overhead import methods

        algo = methods.algo("open_es", quadratic, d)
        return algo.step, (algo.init(jax.random.key(0), x),)
    if name == "adam":
        opt = optax.adam(1e-2)

        def adam_step(x, state):
            u, state = opt.update(jax.grad(quadratic)(x), state, x)
            return optax.apply_updates(x, u), state

        return adam_step, (x, opt.init(x))
    opt = getattr(zoaq_jax, name)(1e-2)

    def step(x, state):
        u, state = opt.update(None, state, x, value_fn=quadratic)
        return optax.apply_updates(x, u), state

    return step, (x, opt.init(x))


def _kernels(text: str) -> dict[str, int]:
    return {"fusions": len(re.findall(r"\sfusion\(", text)),
            "whiles": len(re.findall(r"\swhile\(", text)),
            "instructions": len(re.findall(r"^\s+\S+ = ", text, re.M))}


def once(name: str, d: int) -> dict[str, Any]:
    """One measurement of ``name`` at ``d``, caches cleared first."""
    import jax
    import jax.numpy as jnp

    import zoaq_jax

    jax.clear_caches()
    if name == RUN:
        x, opt = jnp.ones(d), zoaq_jax.zoaq(1e-2)  # one optimizer: run caches by identity

        def run():
            return jax.block_until_ready(zoaq_jax.run(opt, quadratic, x, RUN_STEPS)[0])

        _, *first = protocol.timed(run)  # compiles, then runs
        _, *second = protocol.timed(run)  # the cached program only
        return {"seconds": first[0] - second[0], "cpu_seconds": first[1] - second[1],
                "lower_seconds": None, "execute_seconds": second[0]}
    fn, args = _step(name, d)
    lowered, *lower = protocol.timed(lambda: jax.jit(fn).lower(*args))
    compiled, *build = protocol.timed(lowered.compile)
    _, execute, _ = protocol.timed(lambda: jax.block_until_ready(compiled(*args)))
    return {"seconds": lower[0] + build[0], "cpu_seconds": lower[1] + build[1],
            "lower_seconds": lower[0], "execute_seconds": execute,
            **_kernels(compiled.as_text())}


def measure(methods: tuple[str, ...], dims: tuple[int, ...], rounds: int) -> dict[str, Any]:
    """Every ``(method, d)`` measured once per round, rounds interleaved (order rotated:
    :mod:`benchmarks.overhead.protocol`)."""
    import jax

    cases = [(m, d) for d in dims for m in methods]
    runs: dict[tuple[str, int], list[dict]] = {c: [] for c in cases}
    loads: list = []
    protocol.interleaved(cases, rounds, lambda case: runs[case].append(once(*case)), loads,
                         "compile: rounds")
    rows = []
    for (m, d), measured in runs.items():
        best = min(measured, key=lambda x: x["seconds"])
        rows.append({"method": m, "d": d, **best,
                     "cpu_seconds": min(x["cpu_seconds"] for x in measured),
                     "seconds_all": [x["seconds"] for x in measured],
                     "cpu_seconds_all": [x["cpu_seconds"] for x in measured]})
    return {"rows": rows, "rounds": rounds, "loads": loads,
            "xla_flags": os.environ.get("XLA_FLAGS", ""),
            "persistent_cache": jax.config.jax_compilation_cache_dir}


ROUND = "round"  # the third "reference" of the ratios: the round's total


def cpu_rounds(row: dict[str, Any]) -> list[float]:
    """The CPU seconds of every round of ``row`` (a record made before they were kept: the
    wall seconds of every round, the same clock on a pinned core up to waits for it)."""
    return row.get("cpu_seconds_all", row["seconds_all"])


def median_cpu(row: dict[str, Any]) -> float:
    """The median over rounds of ``row``'s CPU seconds: the statistic of the targets."""
    return float(statistics.median(cpu_rounds(row)))


def ratios(section: dict[str, Any]) -> dict[tuple[str, int, str], float]:
    """``(method, d, reference) -> ratio``, each paired within a round, the median over
    rounds (:func:`benchmarks.overhead.protocol.round_ratio`) of CPU seconds: over each
    reference's (a reference against itself left out) and, for ``reference`` =
    :data:`ROUND`, over the round's total of every program at that ``d`` (a share, steadier
    than a ratio to one short program)."""
    rows = {(r["method"], r["d"]): cpu_rounds(r) for r in section["rows"]}
    totals = {d: [sum(x) for x in zip(*(t for (_, e), t in rows.items() if e == d))]
              for _, d in rows}
    out = {(m, d, ref): protocol.round_ratio(t, rows[ref, d])
           for (m, d), t in rows.items() for ref in REFERENCES if (ref, d) in rows and ref != m}
    return out | {(m, d, ROUND): protocol.round_ratio(t, totals[d]) for (m, d), t in rows.items()}
