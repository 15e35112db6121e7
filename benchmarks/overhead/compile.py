"""Compile latency: what a user waits for before the first step, with XLA's default flags.

For every alias of the library (:data:`ALIASES`) the measured program is its jitted step
``(x, state) -> (x + update, state)`` on the quadratic, at each dimension of the preset;
``run`` is :func:`zoaq_jax.run` of ``zoaq`` for 10 steps (its first call less its second,
cached, call); the references are ``optax.adam``'s step on the exact gradient and evosax's
``Open_ES`` ask-evaluate-tell step (:mod:`benchmarks.overhead.methods`), built in the same
process.

Protocol (the same for every program, so that ratios in one process repeat):

* caches cleared before every measurement (``jax.clear_caches()``; the persistent
  compilation cache is off unless the user configured one, and the record says so);
* ``rounds`` interleaved rounds, each measuring every program once, the order rotated
  from round to round; the reported time is the minimum over rounds (the run least
  disturbed by other processes), of wall time and of the process's CPU time; ratios and
  targets use CPU time, which on a shared machine leaves out the waits for a core (on an
  idle pinned core the two agree);
* the process pinned to one core (the preset's ``pin``), the 1-minute load recorded
  before every round.

A program's time is tracing and lowering (``jit(f).lower``) plus XLA's compilation
(``.compile()``); the first execution is timed apart. Kernel counts of the compiled
program (fusions, while loops) show what the compiler was given.
"""

from __future__ import annotations

import os
import re
import time
from typing import Any

from benchmarks import record as run_record
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


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _since(start: tuple[float, float]) -> tuple[float, float]:
    now = _clock()
    return now[0] - start[0], now[1] - start[1]


def once(name: str, d: int) -> dict[str, Any]:
    """One measurement of ``name`` at ``d``, caches cleared first."""
    import jax
    import jax.numpy as jnp

    import zoaq_jax

    jax.clear_caches()
    if name == RUN:
        x, opt = jnp.ones(d), zoaq_jax.zoaq(1e-2)  # one optimizer: run caches by identity
        start = _clock()
        jax.block_until_ready(zoaq_jax.run(opt, quadratic, x, RUN_STEPS)[0])
        first = _since(start)
        start = _clock()
        jax.block_until_ready(zoaq_jax.run(opt, quadratic, x, RUN_STEPS)[0])
        second = _since(start)
        return {"seconds": first[0] - second[0], "cpu_seconds": first[1] - second[1],
                "lower_seconds": None, "execute_seconds": second[0]}
    fn, args = _step(name, d)
    start = _clock()
    lowered = jax.jit(fn).lower(*args)
    lower = _since(start)
    start = _clock()
    compiled = lowered.compile()
    build = _since(start)
    start = _clock()
    jax.block_until_ready(compiled(*args))
    execute = _since(start)
    return {"seconds": lower[0] + build[0], "cpu_seconds": lower[1] + build[1],
            "lower_seconds": lower[0], "execute_seconds": execute[0],
            **_kernels(compiled.as_text())}


def measure(methods: tuple[str, ...], dims: tuple[int, ...], rounds: int) -> dict[str, Any]:
    """Every ``(method, d)`` measured once per round, rounds interleaved (order rotated)."""
    from benchmarks.common import progress
    import jax

    cases = [(m, d) for d in dims for m in methods]
    runs: dict[tuple[str, int], list[dict]] = {c: [] for c in cases}
    loads = []
    for r in progress(range(rounds), desc="compile: rounds"):
        loads.append(run_record.load_average())
        shift = r % len(cases)
        for case in cases[shift:] + cases[:shift]:
            runs[case].append(once(*case))
    rows = []
    for (m, d), measured in runs.items():
        best = min(measured, key=lambda x: x["seconds"])
        rows.append({"method": m, "d": d, **best,
                     "cpu_seconds": min(x["cpu_seconds"] for x in measured),
                     "seconds_all": [x["seconds"] for x in measured]})
    return {"rows": rows, "rounds": rounds, "loads": loads,
            "xla_flags": os.environ.get("XLA_FLAGS", ""),
            "persistent_cache": jax.config.jax_compilation_cache_dir}


def ratios(section: dict[str, Any]) -> dict[tuple[str, int], dict[str, float]]:
    """``(method, d) -> {reference: min CPU seconds / the reference's min CPU seconds}``
    (CPU time: on a shared machine, wall time also counts the waits for a core)."""
    rows = {(r["method"], r["d"]): r for r in section["rows"]}
    out = {}
    for (m, d), r in rows.items():
        out[m, d] = {ref: r["cpu_seconds"] / rows[ref, d]["cpu_seconds"]
                     for ref in REFERENCES if (ref, d) in rows}
    return out
