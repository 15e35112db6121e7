"""auto_k: exact accounting, one compilation, vmap equivalence, NaN policy, bad input."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import zoaq_jax
from helpers import trajectory, wavy
from zoaq_jax.budgets import progress

D = 6


def test_with_a_window_that_never_closes_it_is_radazo_k_min():
    """The same directions, budgets and queries; parameters to float32 rounding after 50
    steps (two programs: XLA may fuse their arithmetic differently, see tests/conftest.py;
    here 5e-6 apart, while another key or K moves them by 0.6 to 3, a 1% larger learning
    rate by 2e-2)."""
    x = jnp.linspace(-1.0, 1.0, D)
    a = zoaq_jax.run(zoaq_jax.auto_k(1e-2, k_min=2, window=10**6, key=3), wavy, x, 50)
    b = zoaq_jax.run(zoaq_jax.radazo(1e-2, k=2, key=3), wavy, x, 50)
    chex.assert_trees_all_close(a[0], b[0], rtol=1e-4, atol=1e-5)
    chex.assert_trees_all_equal(a[2].num_queries, b[2].num_queries)
    chex.assert_trees_all_equal(a[2].last_k, b[2].last_k)


@pytest.mark.parametrize("difference, centre_calls", [("central", 0), ("forward", 1)])
def test_every_call_is_counted(difference, centre_calls):
    calls = []

    def counted(x):  # one host call per oracle call, an independent count
        calls.append(1)
        return float(np.sum(np.cos(x) * x**2) + 0.1 * np.sum(x) ** 2)

    est = zoaq_jax.auto_k_estimator(k_max=8, budget=progress(window=3), difference=difference,
                                        key=0)
    steps, _ = trajectory(est, zoaq_jax.host_oracle(counted), jnp.ones(D), 30)
    ks = [int(optax.tree.get(s, "last_k")) for _, s in steps]
    per_direction = 2 if difference == "central" else 1
    assert max(ks) > 1  # the budget moved
    expected = sum(per_direction * k + centre_calls for k in ks)
    assert int(optax.tree.get(steps[-1][1], "num_queries")) == expected == len(calls)


def test_one_compilation_whatever_the_budget():
    est = zoaq_jax.auto_k_estimator(k_max=8, budget=progress(window=2), key=0)
    traces = []

    def f(x):
        traces.append(1)
        return jnp.sum(x * 0.0) + 1.0  # no progress: K doubles every window

    @jax.jit
    @chex.assert_max_traces(n=1)
    def step(state, x):
        return est.update(None, state, x, value_fn=f)

    state, x = est.init(jnp.ones(D)), jnp.ones(D)
    seen = set()
    for _ in range(10):
        _, state = step(state, x)
        seen.add(int(optax.tree.get(state, "last_k")))
    assert seen == {1, 2, 4, 8}


def test_vmap_over_seeds_equals_per_seed_runs():
    def one(seed):
        opt = zoaq_jax.auto_k(5e-2, k_max=8, window=5, key=seed)
        return zoaq_jax.run(opt, wavy, jnp.ones(D), 40, log_every=10)

    seeds = jnp.arange(3)
    params, _, trace = jax.vmap(one)(seeds)
    for i in range(3):
        p, _, t = one(seeds[i])
        np.testing.assert_array_equal(trace.last_k[i], t.last_k)
        np.testing.assert_array_equal(trace.num_queries[i], t.num_queries)
        chex.assert_trees_all_close(params[i], p, rtol=1e-5, atol=1e-6)


def test_non_finite_responses_are_counted_and_leave_the_budget_state_alone():
    def poisoned(x):
        return jnp.where(x[0] > 1.0, jnp.nan, wavy(x))  # x + mu u for about half the u

    est = zoaq_jax.auto_k_estimator(k_min=4, k_max=8, mu=0.5, budget=progress(window=2), key=1)
    x = jnp.ones(D)
    steps, _ = trajectory(est, poisoned, x, 6)
    state = steps[-1][1]
    assert int(optax.tree.get(state, "num_nonfinite")) > 0
    for g, s in steps:
        assert np.all(np.isfinite(np.asarray(g)))
        assert np.isfinite(float(s.budget.current.window_sum)) and np.isfinite(float(s.budget.prev_mean))
    # every direction NaN: zero updates, and the progress window does not move
    blind = zoaq_jax.auto_k_estimator(k_max=8, budget=progress(window=2), key=1)
    start = blind.init(x)
    out, _ = trajectory(blind, lambda y: jnp.nan * jnp.sum(y), x, 3)
    for g, s in out:
        assert not np.any(np.asarray(g))
        chex.assert_trees_all_equal(s.budget, start.budget)


@pytest.mark.parametrize("kwargs, match", [
    (dict(k_min=5, k_max=2), "k_min must be <= k_max"),
    (dict(k_max=0), "k_max must be >= 1"),
    (dict(mu=0.0), "mu must be a finite number > 0"),
    (dict(difference="backward"), "difference must be one of"),
])
def test_bad_settings_fail_at_construction(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        zoaq_jax.auto_k_estimator(**kwargs)
    with pytest.raises((ValueError, TypeError), match=match):
        zoaq_jax.auto_k(1e-3, **kwargs)


@pytest.mark.parametrize("kwargs, match", [
    (dict(window=1), "window must be >= 2"),
    (dict(growth=-0.1), "growth must lie in"),
    (dict(growth=1.5), "growth must lie in"),
    (dict(r=0.0), "r must be a finite number > 0"),
    (dict(r=0.1, r_up=0.05), "r_up must be >= r"),
    (dict(z=-1.0), "z must be a finite number >= 0"),
    (dict(z_stall=-0.5), "z_stall must be a finite number >= 0"),
    (dict(ahead=1.0), "ahead must lie in"),
    (dict(ahead=-0.1), "ahead must lie in"),
])
def test_bad_rule_settings_fail_at_construction(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        progress(**kwargs)
    if set(kwargs) <= {"window", "floor"}:  # the rule's settings the alias takes flat
        with pytest.raises((ValueError, TypeError), match=match):
            zoaq_jax.auto_k(1e-3, **kwargs)
