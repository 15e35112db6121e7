"""ZoAQ's accept-or-expand controller (paper Algorithm 1) and StatZO's norm test."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import zoaq_jax
from zoaq_jax.retention import fifo
from helpers import diag, jitted_update, trajectory, wavy, zoaq_chain

D = 16
A = jnp.linspace(-1.0, 2.0, D)
GAUSSIAN = zoaq_jax._src.directions.family("gaussian")


def linear(x):
    """f(x) = a.x: every central response is exactly a.u, whatever x."""
    return jnp.dot(A, x)


def _with_ema(state, ema, tau):
    return state._replace(gate=state.gate._replace(ema=ema, tau=jnp.float32(tau)))


def test_warm_start_accepts_at_k_min_and_keeps_tau():
    est = zoaq_jax.zoaq_estimator(k_min=2, k_max=6, gate=zoaq_jax.gates.momentum(tau0=0.7, b1=0.9),
                                  key=0)
    x = jnp.ones(D)
    g, state = jitted_update(est, wavy)(est.init(x), x)
    assert diag(state, "last_k") == 2
    assert diag(state, "tau") == pytest.approx(0.7)
    assert diag(state, "last_score") == pytest.approx(0.7)  # Score returns tau at warm start
    np.testing.assert_allclose(state.gate.ema, 0.1 * g, rtol=1e-6)


@pytest.mark.parametrize("n_hist", [0, 4])
def test_accepts_at_k_min_when_the_ema_agrees_and_expands_when_it_points_away(n_hist):
    est = zoaq_jax.zoaq_estimator(k_min=1, k_max=6, retention=fifo(n_hist), key=3)
    update = jitted_update(est, linear)
    x = jnp.zeros(D)
    state = est.init(x)
    for _ in range(3):  # fill the buffer
        _, state = update(state, x)
    for _ in range(8):
        _, agree = update(_with_ema(state, A, 0.0), x)
        _, disagree = update(_with_ema(state, -A, 0.0), x)
        assert diag(agree, "last_k") == 1
        assert diag(disagree, "last_k") == 6
        assert diag(disagree, "last_score") < 0 <= diag(agree, "last_score")
        state = agree


def test_candidate_sets_are_nested():
    """Expanding from 1 to 5 buys directions 0..4 of the step: the fixed-K set."""
    zoaq = zoaq_jax.zoaq_estimator(k_min=1, k_max=5, retention=fifo(0), key=5)
    fixed = zoaq_jax.fixed_estimator(k=5, key=5)
    x = jnp.zeros(D)  # no cancellation: the two sums differ only in summation order
    zs = _with_ema(zoaq.init(x), -A, 0.0)
    g, zs = jitted_update(zoaq, linear)(zs, x)
    h, fs = jitted_update(fixed, linear)(fixed.init(x), x)
    assert diag(zs, "last_k") == 5
    assert diag(zs, "num_queries") == diag(fs, "num_queries") == 10
    np.testing.assert_allclose(g, h, rtol=1e-5, atol=1e-6)


def _expanded_estimate(reuse_after_expand):
    retention = fifo(3, reuse_after_expand=reuse_after_expand)
    est = zoaq_jax.zoaq_estimator(k_min=1, k_max=4, retention=retention, key=9)
    update = jitted_update(est, linear)
    x = jnp.zeros(D)
    state = est.init(x)
    _, state = update(state, x)  # step 0 fills the buffer with one record
    _, state = update(state, x)  # step 1 adds more
    g, after = update(_with_ema(state, -A, 0.0), x)  # step 2 must expand to 4
    assert diag(after, "last_k") == 4
    fixed = zoaq_jax.fixed_estimator(k=4, key=9)
    fstate = fixed.init(x)._replace(ledger=state.ledger)  # same step key as step 2
    h, _ = jitted_update(fixed, linear)(fstate, x)
    return g, h, state


def test_fresh_on_expand_drops_history_from_expanded_candidates():
    g, h, _ = _expanded_estimate(False)
    np.testing.assert_allclose(g, h, rtol=1e-5, atol=1e-6)


def test_adaptive_controller_keeps_history_in_expanded_candidates():
    g, h, state = _expanded_estimate(True)
    buffer = state.retention.history
    n_old = int(buffer.size)
    assert n_old == 3
    old = jnp.sum(jnp.where(zoaq_jax._src.history.valid(buffer), buffer.responses, 0)[:, None]
                  * jax.vmap(lambda k: zoaq_jax._src.directions.sample(GAUSSIAN, k, A))(
                      jax.vmap(lambda t, i: jax.random.fold_in(jax.random.fold_in(
                          jax.random.key(9), t), i))(buffer.steps, buffer.index)), axis=0)
    np.testing.assert_allclose(g, (old + 4 * h) / (n_old + 4), rtol=1e-5, atol=1e-5)


def test_always_accept_never_expands():
    gate = zoaq_jax.gates.accept(zoaq_jax.gates.momentum())  # AlwaysMomentum
    opt = zoaq_chain(1e-2, k_min=2, k_max=8, gate=gate, key=1)
    _, _, trace = zoaq_jax.run(opt, wavy, jnp.ones(D), 30)
    assert set(np.asarray(trace.last_k[1:]).tolist()) == {2}
    assert np.all(np.isfinite(np.asarray(trace.last_score[2:])))  # the gate still scores


def test_budget_grid_and_query_accounting_central():
    opt = zoaq_chain(1e-2, k_min=2, k_max=7, k_step=2, gate=zoaq_jax.gates.momentum(tau0=0.9),
                     key=4)
    _, _, trace = zoaq_jax.run(opt, wavy, jnp.ones(D), 60)
    ks = np.asarray(trace.last_k[1:])
    assert set(ks.tolist()) <= {2, 4, 6, 7} and len(set(ks.tolist())) > 1
    np.testing.assert_array_equal(np.diff(trace.num_queries), 2 * ks)


def test_query_accounting_forward_counts_one_centre_per_step():
    opt = zoaq_chain(1e-2, k_min=1, k_max=5, difference="forward", key=4)
    _, _, trace = zoaq_jax.run(opt, wavy, jnp.ones(D), 40)
    np.testing.assert_array_equal(np.diff(trace.num_queries), 1 + np.asarray(trace.last_k[1:]))


def test_a_caller_supplied_centre_value_is_reused_and_not_counted():
    est = zoaq_jax.zoaq_estimator(k_min=2, k_max=2, difference="forward", key=0)
    x = jnp.ones(D)
    g1, s1 = est.update(None, est.init(x), x, value_fn=wavy)
    g2, s2 = est.update(None, est.init(x), x, value_fn=wavy, value=wavy(x))
    np.testing.assert_array_equal(g1, g2)
    assert diag(s1, "num_queries") == 3 and diag(s2, "num_queries") == 2


def test_gate_and_threshold_calibration_follow_algorithm_1():
    b_tau = 0.8
    opt = zoaq_jax.zoaq(1e-2, k_min=1, k_max=6, beta_tau=b_tau, tau0=1.0, key=2)
    _, _, tr = zoaq_jax.run(opt, wavy, jnp.ones(D), 80)
    tau, score, k = (np.asarray(a, np.float64) for a in (tr.tau, tr.last_score, tr.last_k))
    for t in range(2, len(tau)):  # step 1 is the warm start
        np.testing.assert_allclose(tau[t], b_tau * tau[t - 1] + (1 - b_tau) * score[t],
                                   rtol=1e-5)
        if k[t] < 6:  # accepted before the cap: the score passed the threshold in force
            assert score[t] >= tau[t - 1] - 1e-6
    assert (k[2:] > 1).any() and (k[2:] == 1).any()


def test_tau_band_projects_the_threshold():
    opt = zoaq_chain(1e-2, gate=zoaq_jax.gates.momentum(tau_band=(0.2, 0.5)), key=2)
    _, _, tr = zoaq_jax.run(opt, wavy, jnp.ones(D), 60)
    assert float(tr.tau[0]) == pytest.approx(0.5)  # tau0 = 1 projected
    assert np.all((np.asarray(tr.tau) >= 0.2 - 1e-7) & (np.asarray(tr.tau) <= 0.5 + 1e-7))


def test_norm_trigger_uses_c_norm():
    opt = zoaq_chain(1e-2, k_max=5, gate=zoaq_jax.gates.momentum_norm(c_norm=0.8), key=2)
    _, _, tr = zoaq_jax.run(opt, wavy, jnp.ones(D), 60)
    assert np.all(np.asarray(tr.tau) == np.float32(0.8))
    k, s = np.asarray(tr.last_k[2:]), np.asarray(tr.last_score[2:])
    assert np.all(s[k < 5] <= 0.8)


@pytest.mark.parametrize("reset", ["linear", "half"])
def test_reset_policies_set_the_next_starting_budget(reset):
    opt = zoaq_chain(1e-2, k_min=1, k_max=9, budget=zoaq_jax.budgets.reset(reset), key=6)
    _, _, tr = zoaq_jax.run(opt, wavy, jnp.ones(D), 60)
    k = np.asarray(tr.last_k[1:])
    start = k[:-1] if reset == "linear" else 1 + (k[:-1] - 1) // 2
    assert np.all(k[1:] >= start)
    assert k.max() > 1


def test_buffer_holds_the_newest_records_with_their_acquisition_responses():
    n_hist, mu = 5, 1e-2
    est = zoaq_jax.zoaq_estimator(k_min=1, k_max=3, retention=fifo(n_hist), mu=mu, key=8)
    x0 = jax.random.normal(jax.random.key(1), (D,))
    steps, _ = trajectory(est, wavy, x0, 6, lr=0.05)
    params, acquired = x0, []
    for t, (g, state) in enumerate(steps):
        step_key = jax.random.fold_in(jax.random.key(8), t)
        for i in range(diag(state, "last_k")):
            u = zoaq_jax._src.directions.sample(GAUSSIAN, jax.random.fold_in(step_key, i),
                                                params)
            r = (wavy(params + mu * u) - wavy(params - mu * u)) / (2 * mu)
            acquired.append((t, float(r)))
        params = params - 0.05 * g
    h = steps[-1][1].retention.history
    valid = np.asarray(zoaq_jax._src.history.valid(h))
    got = sorted(zip(np.asarray(h.steps)[valid].tolist(), np.asarray(h.responses)[valid].tolist()))
    want = acquired[-n_hist:]
    assert [s for s, _ in got] == sorted(s for s, _ in want)
    np.testing.assert_allclose([r for _, r in got], [r for _, r in sorted(want)], rtol=1e-3,
                               atol=1e-3)


def test_state_memory_does_not_grow_with_history_times_dimension():
    d, n_hist = 64, 32
    est = zoaq_jax.zoaq_estimator(k_max=4, retention=fifo(n_hist))
    state = est.init(jnp.zeros(d))
    sizes = [x.size for x in jax.tree.leaves(state)]
    assert max(sizes) <= max(d, n_hist)
    assert sum(sizes) < 2 * d + 4 * n_hist + 16


def test_statzo_norm_test_extremes_and_cost():
    x = jnp.ones(D)
    loose = zoaq_jax.statzo_estimator(k_min=1, k_max=6, theta=1e6, key=0)
    tight = zoaq_jax.statzo_estimator(k_min=1, k_max=6, theta=1e-6, key=0)
    _, s1 = jitted_update(loose, wavy)(loose.init(x), x)
    _, s2 = jitted_update(tight, wavy)(tight.init(x), x)
    assert diag(s1, "last_k") == 2  # one record cannot estimate a variance
    assert diag(s2, "last_k") == 6
    assert diag(s1, "num_queries") == 3 and diag(s2, "num_queries") == 7


def test_statzo_score_is_the_relative_standard_error():
    mu = 0.05  # large enough that float32 cancellation stays below the tolerances
    est = zoaq_jax.statzo_estimator(k_min=4, k_max=4, theta=0.5, mu=mu, key=2)
    x = jax.random.normal(jax.random.key(0), (D,))
    g, state = jitted_update(est, wavy)(est.init(x), x)
    key = jax.random.fold_in(jax.random.key(2), 0)
    f0 = wavy(x)
    gi = np.stack([np.asarray((wavy(x + mu * u) - f0) / mu * u) for u in (
        zoaq_jax._src.directions.sample(GAUSSIAN, jax.random.fold_in(key, i), x)
        for i in range(4))], dtype=np.float64)
    mean = gi.mean(0)
    var = ((gi - mean) ** 2).sum(1).sum() / 3
    np.testing.assert_allclose(g, mean, rtol=1e-4, atol=1e-3)
    assert diag(state, "last_score") == pytest.approx(np.sqrt(var / 4) / np.linalg.norm(mean),
                                                      rel=1e-3)


def test_statzo_central_differences_cost_two_calls_a_direction():
    est = zoaq_jax.statzo_estimator(k_min=3, k_max=3, difference="central", key=0)
    x = jnp.ones(D)
    g, state = jitted_update(est, wavy)(est.init(x), x)
    fixed = zoaq_jax.fixed_estimator(k=3, key=0)
    h, _ = jitted_update(fixed, wavy)(fixed.init(x), x)
    assert diag(state, "num_queries") == 6
    np.testing.assert_allclose(g, h, rtol=1e-6)
