"""The accept-or-expand loop's pieces, each alone (``expansion.loop_init``,
``loop_step``, ``loop_cond``, the strategies and their static choice), and the adaptive
step at module level (``controller.init`` / ``controller.step``)."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import zoaq_jax
from zoaq_jax import Grid
from zoaq_jax._src import controller, expansion, ledger
from zoaq_jax._src import directions as dirs

LIKE = jnp.zeros(3)


def _problem(grid, threshold, k_start=None, k_cap=None, precomputed=False, calls=None):
    """Fresh record i has the response i + 1 and the direction (1, 1, 1); the test passes
    once ``threshold`` records are in; ``calls`` collects each acquisition's ``(size,
    before_loop)``."""
    def acquire(first, size, before_loop=False):
        if calls is not None:
            calls.append((size, before_loop))
        index = first + jnp.arange(size)
        return (index + 1.0).astype(jnp.float32), jnp.zeros(size), jnp.ones((size, 3))

    def test(cand):
        return cand.n_ok.astype(jnp.float32), cand.n_ok >= threshold

    return expansion.Expansion(expansion.Acquirer(acquire, precomputed), test, LIKE, grid,
                               grid.k_min if k_start is None else k_start, k_cap)


def _sum_to(k):
    return np.full(3, k * (k + 1) / 2, np.float32)


def test_loop_init_buys_k_min_and_tests_it():
    cand = expansion.loop_init(_problem(Grid(2, 8, 3), threshold=100))
    assert int(cand.k) == 2 and not bool(cand.accepted)
    np.testing.assert_array_equal(cand.total, _sum_to(2))
    assert bool(expansion.loop_cond(cand))


def test_loop_init_leaves_the_first_chunk_to_the_loop_when_all_chunks_match():
    cand = expansion.loop_init(_problem(Grid(2, 8, 2), threshold=100))
    assert int(cand.k) == 0 and bool(expansion.loop_cond(cand))


def test_loop_step_buys_k_step_then_the_remainder_and_stops_at_k_max():
    calls = []  # only loop_init's chunk is named the one bought before the loop
    ex = _problem(Grid(2, 8, 4), threshold=100, calls=calls)  # the grid {2, 6, 8}
    cand = expansion.loop_step(ex, expansion.loop_init(ex))
    assert int(cand.k) == 6 and bool(expansion.loop_cond(cand))
    assert calls[0] == (2, True) and all(not before for _, before in calls[1:])
    cand = expansion.loop_step(ex, cand)
    assert int(cand.k) == 8 and not bool(expansion.loop_cond(cand))  # accepted at k_max
    np.testing.assert_array_equal(cand.total, _sum_to(8))
    np.testing.assert_array_equal(cand.responses, np.arange(1.0, 9.0))


def test_the_test_counts_from_k_start_and_a_query_limit_stops_at_k_cap():
    assert int(expansion.expand_loop(_problem(Grid(1, 8), 1, k_start=3)).k) == 3
    assert int(expansion.expand_loop(_problem(Grid(1, 8), 100, k_cap=jnp.int32(5))).k) == 5
    assert int(expansion.expand_loop(_problem(Grid(1, 8), 4)).k) == 4


@pytest.mark.parametrize("evaluation", ["unrolled", "vectorized"])
@pytest.mark.parametrize("threshold", [4, 100])
def test_every_strategy_accepts_the_candidate_of_the_loop(evaluation, threshold):
    ex = _problem(Grid(1, 7, 2), threshold, precomputed=True)
    loop, other = expansion.expand_loop(ex), expansion.accept_or_expand(ex, evaluation)
    chex.assert_trees_all_equal(loop, other)


def test_the_strategy_is_a_static_choice_of_evaluation_and_acquirer():
    grid = Grid(1, 8)
    assert expansion.strategy("loop", False, grid) == "loop"
    assert expansion.strategy("vectorized", False, grid) == "loop"  # nothing precomputed
    assert expansion.strategy("vectorized", True, grid) == "vectorized"
    assert expansion.strategy("unrolled", True, grid) == "unrolled"
    assert expansion.strategy("unrolled", True, Grid(1, 40)) == "loop"  # > 32 grid points


def test_the_adaptive_step_runs_alone_as_the_estimator_runs_it():
    policies = controller.Policies(zoaq_jax.gates.momentum(), zoaq_jax.budgets.reset(),
                                   zoaq_jax.retention.fifo(4))
    execution = controller.Execution(Grid(1, 4), 5e-3, "central", dirs.family("gaussian"),
                                     ledger.KeySchedule.of(0))
    est = zoaq_jax.zoaq_estimator(1, 4, retention=zoaq_jax.retention.fifo(4), key=0)
    x = jnp.linspace(-1.0, 1.0, 4)
    state = controller.init(x, policies, execution)
    chex.assert_trees_all_equal(state, est.init(x))
    alone = jax.jit(lambda s, p: controller.step(s, p, jnp.sum, None, {}, policies, execution))
    wired = jax.jit(lambda s, p: est.update(None, s, p, value_fn=jnp.sum))
    chex.assert_trees_all_equal(alone(state, x), wired(state, x))


def test_a_grid_is_validated_once_by_the_skeleton():
    with pytest.raises(ValueError, match="k_min must be <= k_max"):
        zoaq_jax.adaptive_estimator(zoaq_jax.gates.accept(), zoaq_jax.budgets.constant(1),
                                    grid=Grid(3, 2))
    with pytest.raises(TypeError, match="grid must be a zoaq_jax.Grid"):
        zoaq_jax.adaptive_estimator(zoaq_jax.gates.accept(), zoaq_jax.budgets.constant(1),
                                    grid=(1, 2, 1))
