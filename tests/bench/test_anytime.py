"""Anytime evaluation: curves on a call grid, the fixed-K envelope, query regret."""

import numpy as np
import pytest

from benchmarks import anytime


def test_sample_curve_holds_the_last_logged_value():
    calls, values = np.array([0, 10, 20]), np.array([5.0, 3.0, 1.0])
    grid = np.array([0, 5, 10, 19, 20, 100])
    np.testing.assert_array_equal(anytime.sample_curve(calls, values, grid),
                                  [5.0, 5.0, 3.0, 3.0, 1.0, 1.0])


def test_envelope_is_the_pointwise_best_fixed_method():
    env, best = anytime.envelope({"k1": np.array([3.0, 2.0, 2.0]),
                                  "k4": np.array([4.0, 2.5, 1.0])})
    np.testing.assert_array_equal(env, [3.0, 2.0, 1.0])
    assert best == ["k1", "k1", "k4"]


def test_regret_is_calls_to_reach_the_envelope_over_the_budget():
    grid = np.array([10.0, 20.0, 40.0, 80.0])
    env = np.array([4.0, 3.0, 2.0, 1.0])
    fast = np.array([3.0, 2.0, 1.0, 1.0])  # reaches 3 at 10, 2 at 20, 1 at 40
    assert anytime.regret(grid, fast, env, [20.0, 40.0, 80.0]) == [0.5, 0.5, 0.5]
    slow = np.array([5.0, 4.0, 3.0, 2.0])  # reaches 2 only at 80, never 1
    assert anytime.regret(grid, slow, env, [40.0, 80.0]) == [2.0, float("inf")]
    # from an origin: budgets and calls both counted after it
    assert anytime.regret(grid, fast, env, [40.0], origin=10.0) == [pytest.approx(1 / 3)]


def test_a_near_tie_within_the_tolerance_counts_as_reached():
    grid = np.array([10.0, 20.0, 40.0])
    env = np.array([2.0, 1.0, 1.0])
    close = np.array([2.0, 1.009, 1.009])  # within 1% of the envelope from 20 calls on
    assert anytime.regret(grid, close, env, [20.0, 40.0]) == [1.0, 0.5]
    assert anytime.regret(grid, close, env, [40.0], tolerance=0.0) == [float("inf")]
    assert anytime.regret(grid, np.array([2.0, 1.011, 1.011]), env, [40.0]) == [float("inf")]
    assert anytime.target(-2.0) == pytest.approx(-1.98)  # a negative quality: 1% above it
    assert anytime.ratio(None, 10.0) == float("inf") and anytime.ratio(5.0, 10.0) == 0.5
    assert "1%" in anytime.rule()


def test_call_grid_contains_the_budgets():
    grid = anytime.call_grid(1000.0, [1000 / 64, 1000 / 3, 1000.0])
    assert {1000 / 64, 1000 / 3, 1000.0} <= set(grid.tolist())
    assert np.all(np.diff(grid) > 0)
