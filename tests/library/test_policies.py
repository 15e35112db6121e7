"""The controller's policies as pure functions, and the skeleton's exact identities."""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import zoaq_jax
from helpers import jitted_update, trajectory, wavy
from zoaq_jax import budgets, gates

D = 6


def _evidence(total, n, n_fresh=None, sq_norm=0.0, scale=1.0):
    return zoaq_jax.Evidence(jnp.asarray(total, jnp.float32), jnp.int32(n),
                             jnp.int32(n if n_fresh is None else n_fresh),
                             jnp.float32(sq_norm), scale)


def _context(ema, tau=0.5, warm=False):
    ema = jnp.asarray(ema, jnp.float32)
    return gates.MomentumContext(ema, jnp.linalg.norm(ema), jnp.float32(tau), jnp.bool_(warm))


def test_cosine_score_is_the_cosine_and_handles_warm_and_empty_candidates():
    ctx = _context([1.0, 0.0])
    assert float(gates.cosine_score(_evidence([3.0, 4.0], 2), ctx)) == pytest.approx(0.6)
    assert float(gates.cosine_score(_evidence([3.0, 4.0], 2), _context([1.0, 0.0], 0.3, True))
                 ) == pytest.approx(0.3)  # warm start: the threshold itself
    assert float(gates.cosine_score(_evidence([0.0, 0.0], 2), ctx)) == -np.inf
    assert float(gates.cosine_score(_evidence([3.0, 4.0], 2, n_fresh=0), ctx)) == -np.inf


def test_momentum_norm_score_is_the_relative_distance_of_the_mean():
    ctx = _context([1.0, 1.0])
    # g = total / n = (2, 0); ||g - m|| / ||m|| = ||(1, -1)|| / ||(1, 1)|| = 1
    assert float(gates.momentum_norm_score(_evidence([4.0, 0.0], 2), ctx)) == pytest.approx(1.0)
    assert float(gates.momentum_norm_score(_evidence([4.0, 0.0], 2), _context([1.0, 1.0], 0.5,
                                                                              True))) == 0.0
    assert float(gates.momentum_norm_score(_evidence([4.0, 0.0], 2, n_fresh=0), ctx)) == np.inf


def test_variance_score_is_the_relative_standard_error():
    g = np.array([[1.0, 2.0], [3.0, 0.0], [2.0, 1.0]])
    n = len(g)
    mean = g.mean(0)
    var = np.sum((g - mean) ** 2) / (n - 1)
    expected = np.sqrt(var / n) / np.linalg.norm(mean)
    ev = _evidence(g.sum(0), n, sq_norm=float(np.sum(g**2)))
    assert float(gates.variance_score(ev)) == pytest.approx(expected, rel=1e-5)
    assert float(gates.variance_score(_evidence([1.0, 1.0], 1, sq_norm=2.0))) == np.inf


def test_threshold_calibration_is_an_ema_projected_onto_the_band():
    assert float(gates.calibrate_threshold(0.5, 0.1, 0.9)) == pytest.approx(0.46)
    assert float(gates.calibrate_threshold(0.5, -1.0, 0.5, band=(0.0, 0.4))) == 0.0
    assert float(gates.calibrate_threshold(0.5, 1.0, 0.5, band=(0.0, 0.4))) == np.float32(0.4)


@pytest.mark.parametrize("kind, k, expected", [
    ("min", 7, 1), ("half", 7, 3), ("half", 9, 5), ("linear", 7, 7), ("half", 1, 1)])
def test_reset_rules(kind, k, expected):
    assert int(budgets.next_budget(kind, jnp.int32(k), 1, 2)) == expected


def test_reset_rule_keeps_the_start_after_an_unusable_step():
    rule, grid = budgets.reset("linear"), zoaq_jax.Grid(1, 9, 1)
    state = rule.init(None, grid)
    assert int(rule.start(state)) == 1
    state = rule.update(state, zoaq_jax.Outcome(jnp.int32(5), jnp.bool_(True), 0.0, 0.0,
                                                grid=grid))
    assert int(rule.start(state)) == 5
    state = rule.update(state, zoaq_jax.Outcome(jnp.int32(9), jnp.bool_(False), 0.0, 0.0,
                                                grid=grid))
    assert int(rule.start(state)) == 5


def test_window_statistics_use_successive_differences():
    values = np.array([1.0, 2.0, 4.0])
    mean, se2 = budgets.window_statistics(jnp.float32(values.sum()),
                                          jnp.float32(np.sum(np.diff(values) ** 2)), 3)
    assert float(mean) == pytest.approx(7 / 3)
    assert float(se2) == pytest.approx((1 + 4) / (2 * 2) / 3)


def test_progress_decision_stall_and_significant_fast_progress():
    kw = dict(r=0.01, r_up=0.05, z=2.0)
    # a 0.1% gain within its noise (SE 0.01 each): not significant, and surely below r
    stalled, fast = budgets.progress_decision(10.0, 1e-4, 9.99, 1e-4, **kw)
    assert bool(stalled) and not bool(fast)
    # a 0.5% gain without noise: slow but steady progress is not a stall
    stalled, fast = budgets.progress_decision(10.0, 0.0, 9.95, 0.0, **kw)
    assert not bool(stalled) and not bool(fast)
    # the same gain in noise too large to bound it below r L: undecided, not a stall
    stalled, fast = budgets.progress_decision(10.0, 0.25, 9.95, 0.25, **kw)
    assert not bool(stalled) and not bool(fast)
    stalled, fast = budgets.progress_decision(10.0, 0.0, 10.0, 0.0, **kw)  # no gain at all
    assert bool(stalled) and not bool(fast)
    stalled, fast = budgets.progress_decision(10.0, 0.0, 9.0, 0.0, **kw)  # 10% gain
    assert not bool(stalled) and bool(fast)
    # the same 10% gain within the noise (SE 0.5 each) is not significant
    stalled, fast = budgets.progress_decision(10.0, 0.25, 9.0, 0.25, **kw)
    assert not bool(stalled) and not bool(fast)


GRID_16 = zoaq_jax.Grid(1, 16)


def _drive(rule, values, usable=True, grid=zoaq_jax.Grid(1, 8)):
    state, ks = rule.init(None, grid), []
    for v in values:
        state = rule.update(state, zoaq_jax.Outcome(rule.start(state), jnp.bool_(usable),
                                                    jnp.float32(v), jnp.float32(0), grid=grid))
        ks.append(int(rule.start(state)))
    return state, ks


def test_progress_rule_doubles_on_stalls_up_to_k_max():
    rule = budgets.progress(window=3)
    _, ks = _drive(rule, [5.0] * 18)
    # window 1 ends at step 3 (no previous window); every later window stalls
    assert ks == [1] * 5 + [2] * 3 + [4] * 3 + [8] * 7


def test_progress_rule_halves_after_two_fast_windows_only():
    rule = budgets.progress(window=2)
    start = rule.init(None, zoaq_jax.Grid(1, 8))._replace(next_k=jnp.int32(8))
    values = [100.0, 100.0, 50.0, 50.0, 25.0, 25.0, 12.0, 12.0, 6.0, 6.0]
    _, ks = _drive(rule._replace(init=lambda params, grid: start), values)
    # windows 2 and 3 are fast: halve at the end of window 3; windows 4 and 5 again
    assert ks == [8] * 5 + [4] * 4 + [2]


def test_progress_rule_doubles_ahead_of_the_next_stall():
    """After a stall at level L the budget doubles as soon as a window's mean reaches
    a L, then a^2 L, ...; without ``ahead`` only stalls double (and the same fast windows
    halve instead)."""
    values = [10.0] * 4 + [9.5] * 2 + [8.9] * 2 + [8.0] * 4  # windows of 2 steps
    _, ks = _drive(budgets.progress(window=2, ahead=0.9), values, grid=GRID_16)
    # stall at step 4 (L = 10, target 9); 9.5 holds; 8.9 <= 9 doubles (target 8.1);
    # 8.0 <= 8.1 doubles; the last window stalls
    assert ks == [1, 1, 1, 2, 2, 2, 2, 4, 4, 8, 8, 16]
    _, ks0 = _drive(budgets.progress(window=2, ahead=0.0), values, grid=GRID_16)
    assert max(ks0) == 2
    # a stall at a level <= 0 arms nothing: a later fall (a gain of 20%) is not a doubling
    _, ks_neg = _drive(budgets.progress(window=2), [-5.0] * 4 + [-6.0] * 2, grid=GRID_16)
    assert ks_neg == [1, 1, 1, 2, 2, 2]


def test_next_target_arms_on_a_stall_lowers_on_each_early_doubling_and_clears_on_halving():
    f, t = jnp.bool_(False), jnp.bool_(True)
    nt = functools.partial(budgets.next_target, ahead=0.5)
    assert float(nt(0.0, 8.0, t, f, f)) == 4.0  # a stall at 8 arms 4
    assert float(nt(4.0, 3.9, f, t, f)) == 2.0  # an early doubling lowers it to 2
    assert float(nt(4.0, 5.0, f, f, f)) == 4.0  # otherwise it holds
    assert float(nt(4.0, 5.0, f, f, t)) == 0.0  # a halving clears it (0: no target)
    assert float(nt(0.0, -1.0, t, f, f)) == 0.0  # no target at or below zero
    assert float(budgets.next_target(0.0, 8.0, t, f, f, ahead=0.0)) == 0.0


def test_progress_rule_ignores_unusable_steps_and_non_finite_values():
    rule = budgets.progress(window=2)
    state, _ = _drive(rule, [5.0, 4.0, 3.0])
    resumed = rule._replace(init=lambda params, grid: state)
    same, _ = _drive(resumed, [1.0] * 4, usable=False)
    chex.assert_trees_all_equal(same, state)
    nan, _ = _drive(resumed, [np.nan] * 4)
    chex.assert_trees_all_equal(nan, state)


def test_progress_windows_grow_with_the_run():
    """Windows are max(w, floor(g t)) steps: decisions evenly spaced in log-time."""
    lengths = [int(budgets.window_length(jnp.int32(t), 8, 0.25)) for t in (0, 8, 40, 400, 10**6)]
    assert lengths == [8, 8, 10, 100, 250_000]
    assert int(budgets.window_length(jnp.int32(10**6), 8, 0.0)) == 8  # growth 0: fixed


def _scan_rule(rule, values, k_values=None):
    """Feeds ``values`` (or ``k_values(k, t)``) to ``rule.update`` under lax.scan; returns
    the start budget after every step."""
    def step(state, inputs):
        t, v = inputs
        k = rule.start(state)
        v = v if k_values is None else k_values(k, t, v)
        state = rule.update(state, zoaq_jax.Outcome(k, jnp.bool_(True), v, jnp.float32(0),
                                                    grid=GRID_16))
        return state, rule.start(state)

    steps = jnp.arange(len(values))
    _, ks = jax.jit(lambda vs: jax.lax.scan(step, rule.init(None, GRID_16), (steps, vs)))(values)
    return np.asarray(ks)


def test_progress_defaults_double_within_tens_of_steps_on_a_stall():
    ks = _scan_rule(budgets.progress(), jnp.full(300, 5.0, jnp.float32))
    # windows close at 8, 16, 24, 32, 40 steps: K doubles at each close after the first
    changes = np.flatnonzero(np.diff(ks)) + 1
    np.testing.assert_array_equal(changes, [15, 23, 31, 39])
    assert ks[-1] == 16


def test_progress_defaults_hold_at_moderate_progress_and_halve_on_fast_progress():
    t = jnp.arange(1, 3001, dtype=jnp.float32)
    # v = t^-0.1: a window of 25% of the run gains about 2%, between r = 1% and r_up = 5%
    rule = budgets.progress()
    start = rule.init(None, GRID_16)._replace(next_k=jnp.int32(4))
    held = _scan_rule(rule._replace(init=lambda params, grid: start), t**-0.1)
    assert set(held.tolist()) == {4}
    # v = exp(-t / 50): every window gains far more than r_up: K halves to k_min and stays
    fast = _scan_rule(rule._replace(init=lambda params, grid: start), jnp.exp(-t[:300] / 50.0))
    assert fast[-1] == 1 and np.all(np.diff(fast) <= 0)


def test_progress_defaults_are_stable_at_a_noise_floor_for_1e5_steps():
    """At a noise floor (i.i.d. values whose spread shrinks as 1/sqrt(K), no trend), K
    climbs to k_max and changes at most 10 times in 10^5 steps."""
    n = 100_000
    noise = jax.random.normal(jax.random.key(0), (n,))
    ks = _scan_rule(budgets.progress(), noise,
                    lambda k, t, e: 1.0 + 0.3 * e / jnp.sqrt(k.astype(jnp.float32)))
    assert np.count_nonzero(np.diff(ks)) <= 10
    assert ks[-1] > 1  # the stall was detected


def test_accept_gate_with_a_constant_budget_is_the_fixed_estimator_bit_for_bit():
    fixed = zoaq_jax.fixed_estimator(k=3, key=4)
    built = zoaq_jax.adaptive_estimator(gates.accept(), budgets.constant(3),
                                        grid=zoaq_jax.Grid(3, 3), key=4)
    x = jnp.linspace(-1.0, 1.0, D)
    (a, _), = trajectory(fixed, wavy, x, 1)[0]
    (b, _), = trajectory(built, wavy, x, 1)[0]
    chex.assert_trees_all_equal(a, b)
    _, pa = trajectory(fixed, wavy, x, 20, lr=0.05)
    _, pb = trajectory(built, wavy, x, 20, lr=0.05)
    chex.assert_trees_all_equal(pa, pb)


def test_a_user_budget_rule_runs_through_the_same_machinery():
    """The tutorial's rule: K = 1 on even steps and 4 on odd ones."""
    alternate = zoaq_jax.BudgetRule(
        init=lambda params, grid: jnp.int32(0),
        start=lambda t: jnp.where(t % 2 == 0, 1, 4),
        update=lambda t, outcome: t + 1,
    )
    est = zoaq_jax.adaptive_estimator(gates.accept(), alternate, grid=zoaq_jax.Grid(1, 4), key=0)
    steps, _ = trajectory(est, wavy, jnp.ones(D), 6)
    ks = [int(optax.tree.get(s, "last_k")) for _, s in steps]
    assert ks == [1, 4, 1, 4, 1, 4]
    assert int(optax.tree.get(steps[-1][1], "num_queries")) == 2 * sum(ks)


def test_value_estimate_is_the_mean_midpoint_of_central_pairs():
    """On a quadratic, (f(x + mu u) + f(x - mu u)) / 2 = f(x) + mu^2 |u|^2 / 2 exactly."""
    rule = zoaq_jax.BudgetRule(init=lambda params, grid: jnp.float32(0),
                               start=lambda s: jnp.int32(2),
                               update=lambda s, outcome: outcome.value)
    mu = 0.1
    est = zoaq_jax.adaptive_estimator(gates.accept(), rule, grid=zoaq_jax.Grid(2, 2), mu=mu, key=1)
    x = jnp.ones(D)
    _, state = jitted_update(est, lambda p: 0.5 * p @ p)(est.init(x), x)
    keys = jax.vmap(jax.random.fold_in, in_axes=(None, 0))(
        jax.random.fold_in(jax.random.key(1), 0), jnp.arange(2))
    u = jax.vmap(lambda k: jax.random.normal(jax.random.fold_in(k, 0), (D,)))(keys)
    seen = 0.5 * D + 0.5 * mu**2 * float(jnp.mean(jnp.sum(u**2, axis=1)))
    assert float(state.budget) == pytest.approx(seen, rel=1e-5)
