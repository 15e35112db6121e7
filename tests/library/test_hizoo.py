"""HiZOO's own maths: the Hessian estimate's expectation, MeZO at alpha = 0, the centre call.

The contract every optimizer meets (counts, one compilation, vmap, budgets, resuming,
checkpoints, NaN) is the property matrix's (``registry.py``: ``hizoo``,
``hizoo_estimator_code``).
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import zoaq_jax
from zoaq_jax._src import hizoo
from helpers import diag, jitted_update

C = jnp.logspace(0.0, 2.0, 6)  # a diagonal quadratic's curvatures, 1 to 100


def bowl(x):
    return 0.5 * jnp.sum(C * x**2)


X = jnp.linspace(-1.0, 1.0, 6)
MU = 0.1  # second differences of a quadratic are exact for any mu (and far above rounding)
N = 8000  # one-direction estimates; the tolerance is 4 standard errors of their mean


def _estimates(h, form):
    """``N`` one-direction estimates h * S of the diagonal Hessian at ``X`` (vmapped)."""
    def one(key):
        u = jax.random.normal(key, (1, 6))
        s = jax.lax.rsqrt(h)
        delta = jax.vmap(lambda v: bowl(X + MU * s * v) + bowl(X - MU * s * v) - 2 * bowl(X))(u)
        total, n = hizoo.curvature_sum(delta, u, MU, form)
        return h * total / n

    return np.asarray(jax.jit(jax.vmap(one))(jax.random.split(jax.random.key(0), N)))


@pytest.mark.parametrize("h", ["identity", "curvature"])
@pytest.mark.parametrize("form", hizoo.HESSIAN_ESTIMATES)
def test_the_hessian_estimate_has_the_stated_expectation(form, h):
    """Paper: E = diag(H), unbiased; code: E = diag(H) + tr(A) h / 2, A = S^1/2 H S^1/2
    (fixed seeds, 4 standard errors)."""
    h = jnp.ones(6) if h == "identity" else 3.0 * C
    est = _estimates(h, form)
    expected = np.asarray(C) + (0.0 if form == "paper" else float(jnp.sum(C / h)) * h / 2)
    error = np.abs(est.mean(0) - expected) / (est.std(0) / np.sqrt(N))
    assert np.all(error < 4.0), error


def test_the_estimators_hessian_moves_by_the_code_estimate_in_expectation():
    """End to end (the centre call, the second difference, the scaling): with the code's
    estimate |H| = H, so one step from h = 1 gives E[h_1] = (1 - a) + a (c + tr(H) / 2)."""
    alpha = 0.5

    def first_hessian(seed):
        est = zoaq_jax.hizoo_estimator(mu=MU, alpha=alpha, hessian_estimate="code", key=seed)
        _, state = est.update(None, est.init(X), X, value_fn=bowl)
        return optax.tree.get(state, "hessian")

    h1 = np.asarray(jax.jit(jax.vmap(first_hessian))(jnp.arange(N)))
    estimate = (h1 - (1 - alpha)) / alpha
    expected = np.asarray(C) + float(jnp.sum(C)) / 2
    error = np.abs(estimate.mean(0) - expected) / (estimate.std(0) / np.sqrt(N))
    assert np.all(error < 4.0), error


@pytest.mark.parametrize("k", [1, 2])
def test_a_frozen_identity_hessian_is_mezo_bit_for_bit(k):
    """alpha = 0 keeps h = 1: the parameters equal MeZO's bit for bit (the suite's XLA flags;
    XLA's default CPU optimizations may contract a product into a fused multiply-add in
    one program and not the other), at 2k + 1 calls a step instead of 2k."""
    x = jax.random.normal(jax.random.key(1), (9,))
    a = zoaq_jax.run(zoaq_jax.hizoo(1e-3, k=k, alpha=0.0, weight_decay=1e-2, key=4), bowl9, x, 12)
    b = zoaq_jax.run(zoaq_jax.mezo(1e-3, k=k, weight_decay=1e-2, key=4), bowl9, x, 12)
    np.testing.assert_array_equal(a[0], b[0])
    assert int(a[2].num_queries[-1]) == (2 * k + 1) * 12
    assert int(b[2].num_queries[-1]) == 2 * k * 12
    np.testing.assert_array_equal(optax.tree.get(a[1], "hessian"), np.ones(9))


def bowl9(x):
    return 0.5 * jnp.sum(jnp.logspace(0.0, 1.0, 9) * x**2) + jnp.sum(jnp.sin(x))


def test_the_centre_is_one_call_and_a_given_value_none():
    """3 calls a step for k = 1, 2k + 1 for k = 3, counted by a host counter; with
    ``value=f(x)`` passed the centre is not evaluated (2k calls), and the step is the same."""
    calls = []

    def f(x):
        calls.append(1)
        return float(np.sum(np.asarray(x, np.float64) ** 2))

    value_fn = zoaq_jax.host_oracle(f)
    x = jnp.linspace(-1.0, 1.0, 5)
    for k in (1, 3):
        est = zoaq_jax.hizoo_estimator(k, alpha=0.1, key=2)
        calls.clear()
        g, state = est.update(None, est.init(x), x, value_fn=value_fn)
        assert len(calls) == diag(state, "num_queries") == 2 * k + 1
        calls.clear()
        given, state = est.update(None, est.init(x), x, value_fn=value_fn,
                                  value=jnp.sum(x**2))
        assert len(calls) == diag(state, "num_queries") == 2 * k
        np.testing.assert_allclose(given, g, rtol=1e-6)
        assert diag(state, "value_estimate") == pytest.approx(float(jnp.sum(x**2)))


def test_a_nonfinite_centre_leaves_the_hessian_and_counts_a_skip():
    """The pairs still give the gradient; the Hessian keeps its value, and says so."""
    est = zoaq_jax.hizoo_estimator(k=2, alpha=0.5, key=0)
    state = est.init(X)
    g, state = jitted_update(est, bowl)(state, X, value=jnp.float32(jnp.nan))
    np.testing.assert_array_equal(optax.tree.get(state, "hessian"), np.ones(6))
    assert diag(state, "hessian_skips") == 1 and diag(state, "num_nonfinite") == 0
    assert np.all(np.isfinite(g)) and np.any(g != 0)
    _, state = jitted_update(est, bowl)(state, X)  # a finite centre: the Hessian moves
    assert diag(state, "hessian_skips") == 1
    assert np.all(optax.tree.get(state, "hessian") != 1.0)


def test_an_update_that_overflows_or_underflows_keeps_the_hessian():
    h = {"a": jnp.ones(3), "b": jnp.full((2,), 2.0)}
    for bad in (jnp.inf, -jnp.inf, jnp.nan, 1e38):
        s = {"a": jnp.array([1.0, bad, 1.0]), "b": jnp.ones(2)}
        new, updated = hizoo.hessian_update(h, s, jnp.int32(1), 0.5)
        if bad == 1e38:  # a finite huge estimate is an update like any other
            assert bool(updated)
            continue
        assert not bool(updated)
        jax.tree.map(np.testing.assert_array_equal, new, h)
    tiny = {"a": jnp.full(3, 1e-38), "b": jnp.full(2, 1e-38)}  # (1 - a) h underflows to 0
    new, updated = hizoo.hessian_update(tiny, jax.tree.map(jnp.zeros_like, tiny),
                                        jnp.int32(1), 1 - 2**-24)
    assert not bool(updated)
    new, updated = hizoo.hessian_update(h, jax.tree.map(jnp.ones_like, h), jnp.int32(0), 0.5)
    assert not bool(updated)  # no finite second difference


def test_directions_beyond_one_batch_give_the_batched_step(monkeypatch):
    """Above the batch limit the k directions are drawn and evaluated one at a time: the
    same keys, directions and calls, so the same step up to summation order."""
    from zoaq_jax._src import directions

    x = jax.random.normal(jax.random.key(3), (6,))
    make = lambda: zoaq_jax.hizoo_estimator(k=3, mu=MU, alpha=0.2, key=5)  # noqa: E731
    batched = jitted_update(make(), bowl)(make().init(x), x)
    monkeypatch.setattr(directions, "_BATCH_LIMIT", 0)
    assert hizoo._chunk(3, x) == 1
    streamed = jitted_update(make(), bowl)(make().init(x), x)
    np.testing.assert_allclose(streamed[0], batched[0], rtol=1e-5)
    np.testing.assert_allclose(optax.tree.get(streamed[1], "hessian"),
                               optax.tree.get(batched[1], "hessian"), rtol=1e-5)
    assert diag(streamed[1], "num_queries") == diag(batched[1], "num_queries") == 7


def test_the_hessian_learns_the_curvatures_order():
    """On a diagonal quadratic (curvatures 1 to 1000, d = 10, the iterate nearly still)
    the learned h ranks the coordinates as the curvatures do: log-correlation above 0.9
    after 1,500 steps (measured 0.98 at 3,000 steps with alpha = 0.01)."""
    c = jnp.logspace(0.0, 3.0, 10)
    _, state, _ = zoaq_jax.run(zoaq_jax.hizoo(1e-6, mu=MU, alpha=0.02, key=1),
                               lambda x: 0.5 * jnp.sum(c * x**2), jnp.ones(10), 1500,
                               log_every=1500)
    h = np.asarray(optax.tree.get(state, "hessian"))
    assert np.corrcoef(np.log(h), np.log(np.asarray(c)))[0, 1] > 0.9


def test_bad_options_are_refused_at_construction():
    with pytest.raises(ValueError, match=r"alpha must lie in \[0, 1\)"):
        zoaq_jax.hizoo(1e-3, alpha=1.0)
    with pytest.raises(ValueError, match="hessian_estimate must be one of"):
        zoaq_jax.hizoo_estimator(hessian_estimate="unbiased")
    with pytest.raises(ValueError, match="k must be >= 1"):
        zoaq_jax.hizoo_estimator(0)
    with pytest.raises(TypeError, match="alpha must be a real scalar"):
        zoaq_jax.hizoo(1e-3, alpha="1e-3")


def test_a_new_alpha_under_inject_hyperparams_does_not_recompile():
    opt = optax.inject_hyperparams(zoaq_jax.hizoo, static_args=("k",))(
        learning_rate=1e-2, alpha=0.1, key=0)
    step = jax.jit(lambda s: opt.update(None, s, X, value_fn=bowl)[1])
    state = opt.init(X)
    first = optax.tree.get(step(state), "hessian")
    other = optax.tree.get(step(optax.tree.set(state, alpha=jnp.float32(0.5))), "hessian")
    assert not np.array_equal(first, other) and step._cache_size() == 1
