"""The research loop and the consistency monitor."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import zoaq_jax
from helpers import quadratic, wavy


def test_run_trace_layout_and_progress():
    opt = zoaq_jax.zoaq(1e-2, key=0)
    params, state, trace = zoaq_jax.run(opt, quadratic, jnp.ones(10), 300, log_every=100,
                                        a=jnp.zeros(10))
    np.testing.assert_array_equal(trace.step, [0, 100, 200, 300])
    assert float(trace.value[0]) == 5.0 and float(trace.value[-1]) < 2.5
    assert int(trace.num_queries[0]) == 0 and np.all(np.diff(trace.num_queries) > 0)
    assert int(trace.num_queries[-1]) == int(optax.tree.get(state, "num_queries"))
    np.testing.assert_allclose(trace.value[-1], quadratic(params), rtol=1e-6)


def test_run_compiles_once_for_new_values():
    """New params, data and states reuse the compiled run; a new length compiles again."""
    from zoaq_jax._src import loop, programs

    opt = zoaq_jax.zoaq(1e-2, key=0)
    for start in (1.0, 2.0, 3.0):
        zoaq_jax.run(opt, quadratic, jnp.zeros(10), 20, log_every=10, a=jnp.ones(10) * start)
    # the cached program of this opt and objective
    program = programs.cached((opt.init, opt.update, quadratic), loop.compile)
    assert program._cache_size() == 1
    zoaq_jax.run(opt, quadratic, jnp.ones(10), 30, log_every=10, a=jnp.zeros(10))
    assert program._cache_size() == 2


def test_run_fills_missing_diagnostics():
    _, _, trace = zoaq_jax.run(zoaq_jax.radazo(1e-3, k=2), wavy, jnp.ones(4), 4)
    assert np.all(np.isnan(trace.last_score)) and np.all(np.isnan(trace.tau))
    np.testing.assert_array_equal(trace.last_k[1:], 2)


def test_monitor_equals_zoaq_score_after_warm_start():
    b1 = 0.8
    opt = optax.chain(zoaq_jax.zoaq_estimator(k_max=5, gate=zoaq_jax.gates.momentum(b1=b1), key=2),
                      zoaq_jax.monitor_consistency(b1=b1), optax.scale(-1e-2))
    step = jax.jit(lambda p, s: opt.update(None, s, p, value_fn=wavy))
    params, state = jnp.ones(8), opt.init(jnp.ones(8))
    for t in range(15):
        u, state = step(params, state)
        params = params + u
        if t > 0:
            np.testing.assert_allclose(optax.tree.get(state, "consistency"),
                                       optax.tree.get(state, "last_score"), rtol=1e-5)


def test_run_continues_from_a_state_and_traces_extras():
    opt = optax.chain(zoaq_jax.zoaq_estimator(k_max=4, key=3), zoaq_jax.monitor_consistency(),
                      optax.scale(-1e-2))
    p1, s1, t1 = zoaq_jax.run(opt, wavy, jnp.ones(6), 20, extras=("consistency",))
    p2, s2, t2 = zoaq_jax.run(opt, wavy, p1, 20, init_state=s1, extras=("consistency",))
    p_all, s_all, _ = zoaq_jax.run(opt, wavy, jnp.ones(6), 40)
    np.testing.assert_allclose(p2, p_all, rtol=1e-5, atol=1e-6)
    assert int(t2.num_queries[-1]) == int(optax.tree.get(s_all, "num_queries"))
    assert t1.extras["consistency"].shape == (21,) and np.isnan(t1.extras["consistency"][0])
    assert np.all(np.isfinite(t2.extras["consistency"]))
    with pytest.raises(KeyError, match="no diagnostic named"):
        zoaq_jax.run(opt, wavy, jnp.ones(6), 2, extras=("nonexistent",))
