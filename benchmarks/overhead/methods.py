"""The timed methods: zoaq_jax's optimizers and evosax's ``Open_ES`` as the outside reference.

Each method becomes an :class:`Algo` of pure functions over one seed's state; the
measurement vmaps them over seeds. All use the synthetic benchmark's settings
(learning rate 1e-3, ``mu`` = 5e-3, ``b1`` = 0.9, ``b2`` = 0.99, ``eps`` = 1e-8).

``open-es`` is evosax 0.3.2's ``Open_ES`` with antithetic sampling, population 20,
``std`` = ``mu``, raw fitness (``identity_fitness_shaping_fn``) and ZO-AdaMM's moments
as its optax optimizer: its gradient ``fitness @ z / (20 std)`` is exactly ZO-AdaMM K=10's
``mean_i r_i u_i`` with central responses ``r_i = (f(x + mu u_i) - f(x - mu u_i)) / (2 mu)``,
so the two run the same algorithm (different random numbers) and differ only in
framework overhead. (``optax.adam`` instead would add bias correction; the cost is the same.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

LR, MU, B1, B2, EPS = 1e-3, 5e-3, 0.9, 0.99, 1e-8


class Algo(NamedTuple):
    """One seed's run as pure functions (the measurement vmaps them)."""

    init: Callable[[Any, Any], Any]  # (key, x0) -> state
    step: Callable[[Any], Any]  # state -> state
    params: Callable[[Any], Any]  # state -> x
    calls: Callable[[Any], Any]  # state -> int32 oracle calls so far
    last_k: Callable[[Any], Any]  # state -> int32 directions bought at the last step


@dataclass(frozen=True)
class Method:
    name: str
    label: str
    kind: str  # "fixed", "adaptive" or "outside"
    k_max: int  # directions of a fixed step; the largest budget of an adaptive one
    # expansion.eager_evaluation's mode: False, True, "vectorized". It acts only where the
    # step predraws its candidates (auto_k never does; ZoAQ not at d = 10^6, where
    # k_max + n_hist directions exceed the batch limit): lane use assumes it acts.
    eager: bool | str = False
    reference: str = "open-es"  # the equivalent fixed configuration it is compared with


def _optax_algo(build: Callable[[Any], Any], value_fn, eager: bool) -> Algo:
    import jax
    import optax

    from zoaq_jax._src import expansion

    update_opt = build(0)  # the run key lives in the state; this one only updates

    def init(key, x0):
        return x0, build(key).init(x0)

    def step(state):
        x, s = state
        with expansion.eager_evaluation(eager):
            u, s = update_opt.update(None, s, x, value_fn=value_fn)
        return optax.apply_updates(x, u), s

    def last_k(state):
        return jax.numpy.asarray(optax.tree.get(state[1], "last_k"), jax.numpy.int32)

    def calls(state):
        return jax.numpy.asarray(optax.tree.get(state[1], "num_queries"), jax.numpy.int32)

    return Algo(init, step, lambda s: s[0], calls, last_k)


def _open_es_algo(value_fn, d: int, k: int) -> Algo:
    import jax
    import jax.numpy as jnp
    import optax
    from evosax.algorithms import Open_ES
    from evosax.core.fitness_shaping import identity_fitness_shaping_fn

    import zoaq_jax

    optimizer = optax.chain(zoaq_jax.scale_by_zo_adamm(b1=B1, b2=B2, eps=EPS),
                            optax.scale_by_learning_rate(LR))
    es = Open_ES(population_size=2 * k, solution=jnp.zeros(d), use_antithetic_sampling=True,
                 optimizer=optimizer, std_schedule=optax.constant_schedule(MU),
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

    def calls(state):
        return jnp.asarray(2 * k * state[0].generation_counter, jnp.int32)

    return Algo(init, step, lambda s: s[0].mean, calls,
                lambda s: jnp.asarray(k, jnp.int32))


METHODS: dict[str, Method] = {m.name: m for m in (
    Method("radazo-k10", "R-AdaZO K=10", "fixed", 10),
    Method("zo-adamm-k10", "ZO-AdaMM K=10", "fixed", 10),
    Method("open-es", "evosax Open_ES (pop. 20)", "outside", 10),
    Method("zoaq", "ZoAQ K∈[1,10]", "adaptive", 10),
    Method("zoaq-eager", "ZoAQ K∈[1,10], eager", "adaptive", 10, eager=True),
    Method("zoaq-vector", "ZoAQ K∈[1,10], vectorized", "adaptive", 10, eager="vectorized"),
    Method("auto-k", "auto_k K∈[1,16]", "adaptive", 16),
    Method("zoar-k10", "ZoAR K=10", "adaptive", 10),
    Method("statzo", "StatZO K∈[1,10]", "adaptive", 10),
    Method("statzo-eager", "StatZO K∈[1,10], eager", "adaptive", 10, eager=True),
    Method("statzo-vector", "StatZO K∈[1,10], vectorized", "adaptive", 10, eager="vectorized"),
)}


def algo(name: str, value_fn, d: int) -> Algo:
    """The :class:`Algo` of method ``name`` on ``value_fn`` in dimension ``d``."""
    import zoaq_jax

    method = METHODS[name]
    common = {"mu": MU, "b1": B1, "b2": B2, "eps": EPS}
    builders = {
        "radazo-k10": lambda key: zoaq_jax.radazo(LR, k=10, key=key, **common),
        "zo-adamm-k10": lambda key: zoaq_jax.zo_adamm(LR, k=10, key=key, **common),
        "zoaq": lambda key: zoaq_jax.zoaq(LR, k_min=1, k_max=10, n_hist=8, key=key, **common),
        "auto-k": lambda key: zoaq_jax.auto_k(LR, key=key, **common),
        "zoar-k10": lambda key: zoaq_jax.zoar(LR, k=10, n_hist=8, key=key, **common),
        "statzo": lambda key: zoaq_jax.statzo(LR, k_min=1, k_max=10, key=key, **common),
    }
    if name == "open-es":
        return _open_es_algo(value_fn, d, method.k_max)
    base = name.removesuffix("-eager").removesuffix("-vector")
    return _optax_algo(builders[base], value_fn, method.eager)


def parse(names: list[str]) -> list[str]:
    """Validated method names (``SystemExit`` with the choices otherwise)."""
    unknown = [n for n in names if n not in METHODS]
    if unknown:
        raise SystemExit(f"unknown method(s) {unknown}; choose from {list(METHODS)}")
    return list(dict.fromkeys(names))
