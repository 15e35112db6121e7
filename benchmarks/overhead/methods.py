"""The timed methods: zoaq_jax's optimizers and evosax's ``Open_ES`` as the outside reference
(the PyTorch loop, the other outside method, is :mod:`benchmarks.overhead.torch_loop`), each
an :class:`Algo` of pure functions over one seed's state, which the measurement vmaps.

Methods are specs of the one registry with the synthetic benchmark's defaults and
hyperparameters (:data:`benchmarks.methods.SYNTHETIC`, ``SYNTHETIC_HYPER``: ``radazo`` is
R-AdaZO K=10, ``zoaq`` ZoAQ K in [1, 10], ``radazo:k=4``), built without the consistency
monitor, as the library's aliases build them; ``SPEC+eager`` and ``SPEC+vectorized`` time
the same method with the estimator's ``evaluation="unrolled"`` and ``"vectorized"`` (every
predrawn candidate evaluated at once, no ``while_loop``; ``zoaq_jax._src.expansion.EVALUATIONS``).

``open_es`` (:data:`benchmarks.methods.EXTERNAL`) is evosax 0.3.2's ``Open_ES`` with
antithetic sampling, population 20, ``std`` = ``mu``, raw fitness
(``identity_fitness_shaping_fn``) and ZO-AdaMM's moments as its optax optimizer: its gradient
``fitness @ z / (20 std)`` is exactly ZO-AdaMM K=10's ``mean_i r_i u_i`` with central
responses ``r_i = (f(x + mu u_i) - f(x - mu u_i)) / (2 mu)``, so the two run the same
algorithm (different random numbers) and differ only in framework overhead. (``optax.adam``
instead would add bias correction; the cost is the same.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from benchmarks.methods import BASES, EXTERNAL, SYNTHETIC_HYPER
from benchmarks.methods import SYNTHETIC as REGISTRY


def quadratic(x):
    import jax.numpy as jnp

    return 0.5 * jnp.sum(x**2)


class Algo(NamedTuple):
    """One seed's run as pure functions (the measurement vmaps them)."""

    init: Callable[[Any, Any], Any]  # (key, x0) -> state
    step: Callable[[Any], Any]  # state -> state
    params: Callable[[Any], Any]  # state -> x
    calls: Callable[[Any], Any]  # state -> int32 oracle calls so far
    last_k: Callable[[Any], Any]  # state -> int32 directions bought at the last step


@dataclass(frozen=True)
class Timed:
    """A timed method: its name in the results, label, kind and evaluation."""

    name: str
    label: str
    kind: str  # "fixed", "adaptive" or "outside"
    k_max: int  # directions of a fixed step; the largest budget of an adaptive one
    # The estimator's ``evaluation``: "loop", "unrolled", "vectorized". It acts only where
    # the step predraws its candidates (auto_k never does; ZoAQ not at d = 10^6, where
    # k_max + n_hist directions exceed the batch limit): lane use assumes it acts.
    evaluation: str = "loop"
    spec: str = ""  # the registry spec built (with its evaluation); "" for outside methods


_SUFFIXES = {"eager": "unrolled", "vectorized": "vectorized"}  # names in the results


def timed(name: str) -> Timed:
    """The timed method ``name``: ``open_es``, ``torch_loop``, a spec, or ``SPEC+eager`` /
    ``SPEC+vectorized``.

    Raises:
      ValueError: an unknown method or suffix, or a spec that does not parse.
    """
    if name in EXTERNAL:
        outside = EXTERNAL[name]
        return Timed(outside.spec, outside.label, "outside", outside.k)
    spec, plus, suffix = name.rpartition("+") if "+" in name else (name, "", "")
    if plus and suffix not in _SUFFIXES:
        raise ValueError(f"unknown suffix +{suffix} in {name!r}; use +eager or +vectorized")
    m = REGISTRY.parse(spec)
    evaluation = _SUFFIXES.get(suffix, "loop")
    built = m.spec if evaluation == "loop" else REGISTRY.parse(
        f"{spec}{',' if ':' in spec else ':'}evaluation={evaluation}").spec
    fixed = BASES[m.base].fixed_budget
    return Timed(m.spec + plus + suffix, m.label + (f", {suffix}" if suffix else ""),
                 "fixed" if fixed else "adaptive", m.k_max, evaluation,
                 built)


def _optax_algo(build: Callable[[Any], Any], value_fn) -> Algo:
    import jax
    import optax

    update_opt = build(0)  # the run key lives in the state; this one only updates

    def init(key, x0):
        return x0, build(key).init(x0)

    def step(state):
        x, s = state
        u, s = update_opt.update(None, s, x, value_fn=value_fn)
        return optax.apply_updates(x, u), s

    def get(name):
        return lambda state: jax.numpy.asarray(optax.tree.get(state[1], name), jax.numpy.int32)

    return Algo(init, step, lambda s: s[0], get("num_queries"), get("last_k"))


def _open_es_algo(value_fn, d: int, k: int) -> Algo:
    import jax
    import jax.numpy as jnp
    import optax
    from evosax.algorithms import Open_ES
    from evosax.core.fitness_shaping import identity_fitness_shaping_fn

    import zoaq_jax

    s = SYNTHETIC_HYPER
    optimizer = optax.chain(zoaq_jax.scale_by_zo_adamm(b1=s.b1, b2=s.b2, eps=s.eps),
                            optax.scale_by_learning_rate(s.lr))
    es = Open_ES(population_size=2 * k, solution=jnp.zeros(d), use_antithetic_sampling=True,
                 optimizer=optimizer, std_schedule=optax.constant_schedule(s.mu),
                 fitness_shaping_fn=identity_fitness_shaping_fn)
    es_params = es.default_params

    def init(key, x0):
        return es.init(key, x0, es_params), key

    def step(state):
        es_state, key = state
        key, ask_key, tell_key = jax.random.split(key, 3)
        population, es_state = es.ask(ask_key, es_state, es_params)
        fitness = jax.vmap(value_fn)(population)
        es_state, _ = es.tell(tell_key, population, fitness, es_state, es_params)
        return es_state, key

    return Algo(init, step, lambda s: s[0].mean,
                lambda s: jnp.asarray(2 * k * s[0].generation_counter, jnp.int32),
                lambda s: jnp.asarray(k, jnp.int32))


def algo(name: str, value_fn, d: int) -> Algo:
    method = timed(name)
    if method.name == "open_es":
        return _open_es_algo(value_fn, d, method.k_max)
    if method.kind == "outside":  # torch_loop is not a JAX program: torch_loop.Case runs it
        raise ValueError(f"{name} has no JAX program to compile")
    spec = REGISTRY.parse(method.spec)
    return _optax_algo(lambda key: spec.build(SYNTHETIC_HYPER, key, monitor=False), value_fn)


def record(case, steps: int, useful_calls: int, lane_use: float, final_gap: list[float],
           clock: str = "wall") -> dict:
    """The result record of a timed ``case`` (a :class:`Case` or ``torch_loop.Case``) whose
    last run made ``steps`` and ``useful_calls``: rates and costs from the minimum over the
    interleaved rounds (the round least disturbed by other processes) of ``clock``'s
    seconds (``"wall"`` or the process's ``"cpu"`` time; both kept, every round's and their
    minimum and median: :mod:`benchmarks.overhead.protocol`)."""
    wall, cpu = float(np.min(case.times)), float(np.min(case.cpu_times))
    seconds = max(cpu if clock == "cpu" else wall, 1e-9)
    method = timed(case.name)
    return {
        "method": case.name, "label": method.label, "kind": method.kind,
        "d": case.d, "seeds": case.lanes, "budget_per_seed": case.budget,
        "steps": steps, "compile_seconds": case.compile_seconds, "clock": clock,
        "run_seconds": wall, "run_seconds_all": case.times,
        "run_seconds_median": float(np.median(case.times)),
        "cpu_seconds": cpu, "cpu_seconds_all": case.cpu_times,
        "cpu_seconds_median": float(np.median(case.cpu_times)),
        "useful_calls": useful_calls, "calls_per_second": useful_calls / seconds,
        "us_per_call": 1e6 * seconds / useful_calls,
        "lane_use": lane_use, "wasted_fraction": 1.0 - lane_use,
        "final_gap": final_gap, "state_bytes_per_seed": case.state_bytes,
        "memory": case.memory,
    }
