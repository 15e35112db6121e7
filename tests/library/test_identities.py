"""Exact identities between estimators and against hand-written reference loops."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import zoaq_jax
from zoaq_jax.retention import fifo
from helpers import diag, jitted_update, trajectory, wavy


@pytest.mark.parametrize("difference", ["central", "forward"])
@pytest.mark.parametrize("directions", ["gaussian", "sphere"])
@pytest.mark.parametrize("k", [1, 4])
def test_zoaq_without_history_at_fixed_k_is_the_fixed_estimator(difference, directions, k):
    x = jax.random.normal(jax.random.key(1), (12,))
    common = dict(difference=difference, directions=directions, key=7)
    a, _ = trajectory(zoaq_jax.zoaq_estimator(k_min=k, k_max=k, retention=fifo(0), **common),
                      wavy, x, 4, lr=1e-2)
    b, _ = trajectory(zoaq_jax.fixed_estimator(k=k, **common), wavy, x, 4, lr=1e-2)
    for (ga, sa), (gb, sb) in zip(a, b):
        np.testing.assert_array_equal(ga, gb)  # bitwise
        assert diag(sa, "num_queries") == diag(sb, "num_queries")


@pytest.mark.parametrize("k", [1, 3])
def test_zoar_without_history_is_the_fixed_estimator(k):
    x = jax.random.normal(jax.random.key(2), (9,))
    a, _ = trajectory(zoaq_jax.zoar_estimator(k=k, n_hist=0, difference="central", key=3), wavy,
                      x, 4, lr=1e-2)
    b, _ = trajectory(zoaq_jax.fixed_estimator(k=k, key=3), wavy, x, 4, lr=1e-2)
    for (ga, sa), (gb, sb) in zip(a, b):
        # The same arithmetic in two programs: XLA may round one operation of one of them
        # differently (1 ulp in 1 of 9 coordinates at k = 1 with the suite's flags).
        np.testing.assert_array_max_ulp(ga, gb, maxulp=2)
        assert diag(sa, "num_queries") == diag(sb, "num_queries") == 2 * k * diag(sa, "step")


def _numpy_directions(seed, step, k, d):
    """The documented key schedule: direction i of step t is N(0, I) from
    fold_in(fold_in(key, t), i), leaf 0 drawn with fold_in(., 0)."""
    key = jax.random.fold_in(jax.random.key(seed), step)
    return np.stack([
        np.asarray(jax.random.normal(jax.random.fold_in(jax.random.fold_in(key, i), 0), (d,)),
                   np.float64)
        for i in range(k)
    ])


def _numpy_run(f, x, steps, k, mu, lr, b1, b2, eps, seed, rule):
    """A plain NumPy float64 loop of R-AdaZO / ZO-AdaMM with central differences."""
    x = np.asarray(x, np.float64)
    m = np.zeros_like(x)
    v = np.zeros_like(x)
    v_max = np.zeros_like(x)
    for t in range(steps):
        u = _numpy_directions(seed, t, k, x.size)
        r = np.array([(f(x + mu * ui) - f(x - mu * ui)) / (2 * mu) for ui in u])
        g = (r[:, None] * u).mean(0)
        m = b1 * m + (1 - b1) * g
        if rule == "radazo":
            v = b2 * v + (1 - b2) * m**2
            x = x - lr * m / (np.sqrt(v) + eps)
        elif rule == "radazo_paper":
            v = b2 * v + (1 - b2) * m**2
            x = x - lr * m / np.sqrt(v + eps)
        elif rule == "adamm":
            v = b2 * v + (1 - b2) * g**2
            x = x - lr * m / (np.sqrt(v) + eps)
        else:  # amsgrad
            v = b2 * v + (1 - b2) * g**2
            v_max = np.maximum(v_max, v)
            x = x - lr * m / (np.sqrt(v_max) + eps)
    return x


@pytest.mark.parametrize("difference", ["forward", "central"])
def test_zoar_with_history_matches_a_numpy_reference(difference):
    """ZoAR pools the records of the last n_hist steps with the fresh ones; the forward
    form subtracts the mean of all pooled values (the averaged baseline)."""
    k, n_hist, mu, d, seed, steps = 2, 2, 0.05, 6, 4, 5

    def f(x):  # wavy, in NumPy float64
        return float(np.sum(np.cos(x) * x**2) + 0.1 * np.sum(x) ** 2)

    est = zoaq_jax.zoar_estimator(k=k, n_hist=n_hist, mu=mu, difference=difference, key=seed)
    xs = [np.linspace(-1.0, 1.0, d) + 0.1 * t for t in range(steps)]  # a fixed path
    state, update = est.init(jnp.asarray(xs[0], jnp.float32)), jitted_update(est, wavy)
    records = []  # (u_i, value or response) of every step
    for t, x in enumerate(xs):
        g, state = update(state, jnp.asarray(x, jnp.float32))
        u = _numpy_directions(seed, t, k, d)
        if difference == "forward":
            y = [f(x + mu * ui) for ui in u]
        else:
            y = [(f(x + mu * ui) - f(x - mu * ui)) / (2 * mu) for ui in u]
        records.append((u, np.array(y)))
        us = np.concatenate([r[0] for r in records[-(n_hist + 1):]])
        ys = np.concatenate([r[1] for r in records[-(n_hist + 1):]])
        coeffs = (ys - ys.mean()) / mu if difference == "forward" else ys
        expected = (coeffs[:, None] * us).mean(0)
        np.testing.assert_allclose(np.asarray(g), expected, rtol=2e-3, atol=2e-3)
        assert diag(state, "num_queries") == (t + 1) * k * (1 if difference == "forward" else 2)


@pytest.mark.parametrize("rule", ["radazo", "radazo_paper", "adamm", "amsgrad"])
def test_backbones_match_a_numpy_loop(rule):
    d, k, mu, lr, steps, seed = 6, 3, 1e-2, 5e-2, 25, 11
    x0 = np.linspace(-1.0, 1.0, d)
    f_np = lambda x: 0.5 * float(np.sum(x**2)) + float(np.sum(np.sin(x)))  # noqa: E731
    f_jax = lambda x: 0.5 * jnp.sum(x**2) + jnp.sum(jnp.sin(x))  # noqa: E731
    kwargs = dict(learning_rate=lr, k=k, mu=mu, b1=0.9, b2=0.99, eps=1e-8, key=seed)
    if rule.startswith("radazo"):
        opt = zoaq_jax.radazo(eps_in_sqrt=rule == "radazo_paper", **kwargs)
    else:
        opt = zoaq_jax.zo_adamm(amsgrad=rule == "amsgrad", **kwargs)
    params, _, trace = zoaq_jax.run(opt, f_jax, jnp.asarray(x0, jnp.float32), steps)
    expected = _numpy_run(f_np, x0, steps, k, mu, lr, 0.9, 0.99, 1e-8, seed, rule)
    # float32 finite differences with mu = 1e-2 carry ~1e-5 relative error per response.
    np.testing.assert_allclose(params, expected, rtol=0, atol=2e-4)
    assert int(trace.num_queries[-1]) == 2 * k * steps


def test_streamed_directions_give_the_batched_estimates(monkeypatch):
    """Above the batch limit directions are drawn where used (memory O(d)): same keys,
    same directions, so the same estimates up to summation order."""
    from zoaq_jax._src import directions

    x = jax.random.normal(jax.random.key(3), (16,))
    make = lambda: zoaq_jax.zoaq_estimator(k_min=1, k_max=5, retention=fifo(6), key=2)  # noqa: E731
    batched, _ = trajectory(make(), wavy, x, 5, lr=1e-2)
    monkeypatch.setattr(directions, "_BATCH_LIMIT", 0)
    streamed, _ = trajectory(make(), wavy, x, 5, lr=1e-2)
    for (gb, sb), (gs, ss) in zip(batched, streamed):
        np.testing.assert_allclose(gs, gb, rtol=1e-4, atol=1e-4)  # estimates are O(10)
        assert diag(sb, "num_queries") == diag(ss, "num_queries")
