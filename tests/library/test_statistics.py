"""Statistical properties with fixed seeds: unbiasedness on a quadratic.

For f(x) = 0.5 x'Ax + b'x the Gaussian-smoothed gradient equals the gradient Ax + b, so
an unbiased estimator's mean over N independent keys must lie within a few standard
errors of it. Each check uses N = 4000 keys (fixed), and a tolerance of 5 standard
errors per coordinate (estimated from the same samples): a false failure has
probability below 1e-5 per coordinate.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import zoaq_jax
from zoaq_jax.retention import fifo

D = 8
_M = jax.random.normal(jax.random.key(42), (D, D))
A_MAT = _M @ _M.T / D + jnp.eye(D)
B_VEC = jnp.linspace(-1.0, 1.0, D)
X = jnp.linspace(0.5, -0.5, D)
GRAD = np.asarray(A_MAT @ X + B_VEC, np.float64)
N = 4000


def quad(x):
    return 0.5 * x @ A_MAT @ x + B_VEC @ x


def _estimates(make, steps=1, x=X):
    """The estimate of the last of ``steps`` updates at the fixed point x, per key."""

    def one(seed):
        est = make(seed)

        def step(state, _):  # a scan: one compiled update whatever ``steps``
            g, state = est.update(None, state, x, value_fn=quad)
            return state, g

        return jax.lax.scan(step, est.init(x), None, length=steps)[1][-1]

    return np.asarray(jax.jit(jax.vmap(one))(jnp.arange(N)), np.float64)


def _assert_mean(samples, expected):
    se = samples.std(0, ddof=1) / np.sqrt(len(samples))
    assert np.all(np.abs(samples.mean(0) - expected) <= 5 * se), (samples.mean(0), expected, se)


@pytest.mark.parametrize("difference", ["central", "forward"])
@pytest.mark.parametrize("directions", ["gaussian", "sphere"])
def test_fixed_estimator_is_unbiased(difference, directions):
    g = _estimates(lambda s: zoaq_jax.fixed_estimator(k=2, mu=0.05, difference=difference,
                                                      directions=directions, key=s))
    _assert_mean(g, GRAD)


def test_fixed_estimator_variance_matches_gaussian_theory():
    """Central differences are exact on a quadratic: Cov(r u) = |g|^2 I + g g'."""
    g = _estimates(lambda s: zoaq_jax.fixed_estimator(k=1, mu=0.05, key=s))
    expected = np.sum(GRAD**2) + GRAD**2
    np.testing.assert_allclose(g.var(0), expected, rtol=0.15)


def test_zoaq_pooled_candidate_is_unbiased_without_the_gate():
    """With k_min = k_max the gate never selects; records pooled at one point stay unbiased."""
    g = _estimates(lambda s: zoaq_jax.zoaq_estimator(k_min=2, k_max=2, retention=fifo(4), mu=0.05,
                                                     key=s), steps=3)
    _assert_mean(g, GRAD)


def test_zoar_forward_baseline_shrinks_by_one_over_n():
    """The averaged baseline includes each record itself: E[g] = (1 - 1/n) grad."""
    k, n_hist = 2, 3
    n = (n_hist + 1) * k
    g = _estimates(lambda s: zoaq_jax.zoar_estimator(k=k, n_hist=n_hist, mu=0.05, key=s),
                   steps=n_hist + 1)
    _assert_mean(g, (1 - 1 / n) * GRAD)


def test_statzo_estimate_is_the_mean_of_its_records():
    """StatZO's estimate at a fixed budget is the forward-difference average: unbiased."""
    g = _estimates(lambda s: zoaq_jax.statzo_estimator(k_min=3, k_max=3, mu=0.05, key=s))
    _assert_mean(g, GRAD)
