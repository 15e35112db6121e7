"""The ledger's counters: saturation near 2**31 (no wrap) and exactly-zero responses, for
the adaptive skeleton and ZoAR, under jit and vmap."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import zoaq_jax
from zoaq_jax._src import ledger

D = 4
TOP = ledger.COUNT_MAX

ESTIMATORS = {  # name -> (optimizer from a key, fresh responses a step)
    "zoaq": (lambda key: zoaq_jax.zoaq(1e-2, k_min=2, k_max=4, key=key), None),
    "zo_sgd_forward": (lambda key: zoaq_jax.zo_sgd(1e-2, k=3, difference="forward",
                                                   key=key), 3),
    "zoar": (lambda key: zoaq_jax.zoar(1e-2, k=2, n_hist=2, key=key), 2),
    "zoar_central": (lambda key: zoaq_jax.zoar(1e-2, k=2, difference="central", key=key), 2),
}


def f(x):
    return jnp.sum((x - 0.3) ** 2)


def set_counts(state, count):
    def edit(node):
        if isinstance(node, zoaq_jax.QueryLedger):
            return node._replace(num_queries=jnp.asarray(count, jnp.int32),
                                 num_zero_responses=jnp.asarray(count, jnp.int32))
        return node
    return jax.tree.map(edit, state, is_leaf=lambda n: isinstance(n, zoaq_jax.QueryLedger))


def steps(opt, x, state, n):
    def body(carry, _):
        x, s = carry
        u, s = opt.update(None, s, x, value_fn=f)
        return (optax.apply_updates(x, u), s), None
    return jax.lax.scan(body, (x, state), None, length=n)[0]


def test_advance_saturates_instead_of_wrapping():
    book = ledger.KeySchedule.of(0).init(jnp.ones(2))._replace(
        num_queries=jnp.asarray(TOP - 5, jnp.int32))
    book = ledger.advance(book, k=3, calls=3, nonfinite=0, zero=0, value=1.0)
    assert int(book.num_queries) == TOP - 2  # exact below the limit
    book = ledger.advance(book, k=3, calls=100, nonfinite=0, zero=0, value=1.0)
    assert int(book.num_queries) == TOP
    assert book.num_queries.dtype == jnp.int32


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_counters_saturate_near_the_limit_under_jit_and_vmap(name):
    make, _ = ESTIMATORS[name]
    opt = make(0)
    x = jnp.ones(D)
    state = set_counts(opt.init(x), TOP - 3)
    _, state = jax.jit(steps, static_argnums=(0, 3))(opt, x, state, 3)
    assert int(optax.tree.get(state, "num_queries")) == TOP  # not negative
    # one lane far from the limit, one near it: each saturates on its own
    lanes = jax.vmap(lambda c: set_counts(opt.init(x), c))(jnp.asarray([0, TOP - 3]))
    _, lanes = jax.jit(jax.vmap(lambda s: steps(opt, x, s, 2)))(lanes)
    counts = np.asarray(optax.tree.get(lanes, "num_queries"))
    assert counts[1] == TOP and 0 < counts[0] < 100


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_zero_responses_are_counted_when_mu_is_below_resolution(name):
    make, _ = ESTIMATORS[name]
    x = jnp.full(D, 1.0)

    def count(mu_tiny, key):
        opt = make(key)
        if mu_tiny:  # the same estimator with mu = 1e-9: x + mu u == x in float32
            opt = {"zoaq": lambda k: zoaq_jax.zoaq(1e-2, k_min=2, k_max=4, mu=1e-9, key=k),
                   "zo_sgd_forward": lambda k: zoaq_jax.zo_sgd(
                       1e-2, k=3, difference="forward", mu=1e-9, key=k),
                   "zoar": lambda k: zoaq_jax.zoar(1e-2, k=2, n_hist=2, mu=1e-9, key=k),
                   "zoar_central": lambda k: zoaq_jax.zoar(
                       1e-2, k=2, difference="central", mu=1e-9, key=k)}[name](key)
        _, state = steps(opt, x, opt.init(x), 3)
        return optax.tree.get(state, "num_zero_responses"), optax.tree.get(state, "last_k")

    keys = jnp.arange(2)
    zeros, last_k = jax.jit(jax.vmap(lambda k: count(True, k)))(keys)
    # every fresh response is exactly 0: k_max for the adaptive rule (it expands), k else
    per_step = 4 if name == "zoaq" else ESTIMATORS[name][1]
    assert np.asarray(zeros).tolist() == [3 * per_step] * 2
    assert np.asarray(last_k).tolist() == [per_step] * 2
    normal, _ = jax.jit(jax.vmap(lambda k: count(False, k)))(keys)
    assert np.asarray(normal).tolist() == [0, 0]


def test_run_warns_on_the_host_naming_mu():
    opt = zoaq_jax.zoaq(1e-2, mu=1e-9, key=0)
    with pytest.warns(RuntimeWarning, match="Increase mu"):
        zoaq_jax.run(opt, f, jnp.ones(D), 3)
    opt = zoaq_jax.zoaq(1e-2, key=0)
    _, state, _ = zoaq_jax.run(opt, f, jnp.ones(D), 3)
    zoaq_jax.check_responses(state)  # silent: no zero response
    assert int(optax.tree.get(state, "num_zero_responses")) == 0


def test_sparse_directions_missing_the_objective_are_not_blamed_on_mu():
    """sparse:0.1 at d = 10: about a third of the masks are empty and give exact zeros,
    the objective's own; with mu far above the float resolution nothing is counted, no
    warning; with mu below it every response is counted."""
    x = jnp.zeros(10)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, state, _ = zoaq_jax.run(zoaq_jax.mezo(1e-2, k=1, directions="sparse:0.1", key=0),
                                   f, x, 40, log_every=40)
    assert int(optax.tree.get(state, "num_zero_responses")) == 0
    opt = zoaq_jax.mezo(1e-2, k=1, mu=1e-9, directions="sparse:0.1", key=0)
    _, state = steps(opt, jnp.ones(10), opt.init(jnp.ones(10)), 3)
    assert int(optax.tree.get(state, "num_zero_responses")) == 3
