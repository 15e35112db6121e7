"""zoaq_jax.run as a scheduler job: budgets, best iterate, compile counts, leaks, progress,
static keywords, divergence."""

import enum
import functools
import gc
import warnings
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import zoaq_jax
from zoaq_jax.retention import fifo
from helpers import zoaq_chain
from zoaq_jax._src import programs

D = 6


def quadratic(x, a):
    return 0.5 * jnp.sum((x - a) ** 2)


def counted(calls):
    """The quadratic with a host counter of the real calls (one per evaluated point; a
    batch of points under the estimators' vmap reaches the callback as one array)."""
    def f(x):
        jax.debug.callback(lambda v: calls.append(np.size(v)), x[0])
        return 0.5 * jnp.sum((x - 1.0) ** 2)
    return f


@pytest.mark.parametrize("opt, budget", [
    (zoaq_chain(1e-2, k_min=2, k_max=7, k_step=2, retention=fifo(4), key=1),
     101),  # adaptive
    (zoaq_jax.zo_sgd(1e-2, k=3, difference="forward", key=2), 50),  # fixed, centre call
    (zoaq_jax.zoar(1e-2, k=2, n_hist=2, key=3), 31),  # ZoAR
])
def test_budget_is_never_exceeded_counted_on_the_host(opt, budget):
    calls = []
    _, state, trace = zoaq_jax.run(opt, counted(calls), jnp.zeros(D), 60, max_queries=budget,
                                   log_values=False)
    used = int(trace.num_queries[-1])
    assert used == sum(calls) <= budget  # exact accounting of real calls, within budget
    assert int(trace.status[-1]) == zoaq_jax.STATUSES.index("budget_spent")
    assert int(trace.num_log_evaluations[-1]) == 0
    # the leftover cannot buy another step: less than the cheapest step costs
    cheapest = {0: 2 * 2, 1: 1 + 3, 2: 2}[[101, 50, 31].index(budget)]
    assert budget - used < cheapest


def test_last_adaptive_step_is_capped_to_the_calls_left():
    # k_min=k_step=3, k_max=9, central: a step costs 6, 12 or 18 calls; the constant rule
    # buys 9 every step, so 40 calls give 2 full steps (36) and no room for a third.
    opt = zoaq_jax.adaptive_estimator(zoaq_jax.gates.accept(), zoaq_jax.budgets.constant(9),
                                      grid=zoaq_jax.Grid(3, 9, 3), key=0)
    _, _, trace = zoaq_jax.run(opt, quadratic, jnp.zeros(D), 5, max_queries=48,
                               log_values=False, a=jnp.ones(D))
    # 2 steps of 18 = 36, then 12 left: a capped step of k=6 (12 calls) exactly
    assert trace.num_queries.tolist() == [0, 18, 36, 48, 48, 48]
    assert trace.last_k.tolist() == [0, 9, 9, 6, 6, 6]


def test_budgeted_run_equals_the_plain_run_until_the_budget():
    opt = zoaq_jax.zoaq(1e-2, key=5)
    _, _, full = zoaq_jax.run(opt, quadratic, jnp.zeros(D), 30, a=jnp.ones(D))
    budget = int(full.num_queries[20])
    _, _, cut = zoaq_jax.run(opt, quadratic, jnp.zeros(D), 30, a=jnp.ones(D),
                             max_queries=budget, log_values=False)
    # the same steps and budgets; the budgeted program (a lax.cond around each step)
    # may round differently in the last bits
    np.testing.assert_array_equal(cut.num_queries[:21], full.num_queries[:21])
    np.testing.assert_array_equal(cut.last_k[:21], full.last_k[:21])
    np.testing.assert_allclose(cut.best_value[:21], full.best_value[:21], rtol=1e-5)
    assert int(cut.num_queries[-1]) <= budget


def test_best_params_track_the_lowest_free_estimate():
    opt = zoaq_jax.radazo(5e-2, k=4, key=0)
    params, _, trace = zoaq_jax.run(opt, quadratic, jnp.zeros(D), 40, a=jnp.ones(D))
    best = float(trace.best_value[-1])
    assert best == float(np.min(trace.best_value))  # non-increasing
    assert np.all(np.diff(np.asarray(trace.best_value)) <= 0)
    # central midpoints estimate f at the best iterate to O(mu^2)
    np.testing.assert_allclose(quadratic(trace.best_params, jnp.ones(D)), best, atol=1e-3)
    assert float(quadratic(trace.best_params, jnp.ones(D))) < float(trace.value[0])


def _programs():
    """The keys of ``run``'s program cache now (entries other tests' live objects keep
    when the whole suite runs in one process)."""
    return set(programs._PROGRAMS)


def test_compiles_once_per_optimizer_and_objective_and_keeps_neither_alive():
    """As ``jax.jit``: the same optimizer and objective objects share one program; a new
    optimizer object (even built alike) is a new program; the cache holds nothing."""
    traces, before = [], _programs()

    def f(x, a):
        traces.append(1)  # runs only when the program is traced
        return quadratic(x, a)

    x, a = jnp.zeros(D), jnp.ones(D)
    opt = zoaq_jax.zo_sgd(1e-2, k=1, key=0)
    outs = [zoaq_jax.run(opt, f, x, 4, a=a) for _ in range(3)]
    first = len(traces)
    assert first > 0
    for out in outs[1:]:
        np.testing.assert_array_equal(out[0], outs[0][0])
    assert len(traces) == first  # one trace for three calls
    zoaq_jax.run(zoaq_jax.zo_sgd(1e-2, k=1, key=0), f, x, 4, a=a)  # another object
    assert len(traces) == 2 * first

    refs = [weakref.ref(opt.init), weakref.ref(opt.update), weakref.ref(f)]
    del opt, outs, f
    gc.collect()
    assert all(r() is None for r in refs)
    assert _programs() <= before  # every entry of this test went with its objects


def test_non_array_keywords_are_static():
    def f(x, scale, mode):
        y = jnp.sum(x**2) if mode == "sum" else jnp.max(x**2)
        return scale * y

    opt = zoaq_jax.zo_sgd(1e-2, k=2, key=0)
    _, _, s = zoaq_jax.run(opt, f, jnp.ones(D), 3, scale=2, mode="sum")
    _, _, m = zoaq_jax.run(opt, f, jnp.ones(D), 3, scale=2, mode="max")
    assert float(s.value[0]) == 2 * D and float(m.value[0]) == 2.0


def test_vmap_over_seeds_leaks_no_tracer_and_equals_unbatched_runs():
    opt = zoaq_jax.zoaq(1e-2, key=0)
    x, a = jnp.zeros(D), jnp.ones(D)
    with jax.checking_leaks():
        batched = jax.vmap(lambda s: zoaq_jax.run(opt, quadratic, x, 10, seed=s,
                                                  max_queries=150, a=a))(jnp.arange(3))
    for i in range(3):
        single = zoaq_jax.run(opt, quadratic, x, 10, seed=i, max_queries=150, a=a)
        np.testing.assert_allclose(batched[0][i], single[0], rtol=1e-5, atol=1e-6)
        assert int(batched[2].num_queries[i, -1]) == int(single[2].num_queries[-1]) <= 150
    def built_inside(seed):  # the docstring's other idiom: the optimizer from the seed
        return zoaq_jax.run(zoaq_jax.zoaq(1e-2, key=seed), quadratic, x, 10, max_queries=150,
                            a=a)

    with jax.checking_leaks():
        inside = jax.vmap(built_inside)(jnp.arange(3))
    np.testing.assert_array_equal(inside[2].num_queries, batched[2].num_queries)
    # seed=i is the estimator built with key=i
    direct = zoaq_jax.run(zoaq_jax.zoaq(1e-2, key=2), quadratic, x, 10, a=a)
    np.testing.assert_array_equal(direct[0], zoaq_jax.run(opt, quadratic, x, 10, seed=2, a=a)[0])


def test_progress_callback_sees_every_log_point():
    seen = []
    zoaq_jax.run(zoaq_jax.zo_sgd(1e-2, k=2, key=0), quadratic, jnp.zeros(D), 12, log_every=4,
                 progress=lambda step, n: seen.append((step, n)), a=jnp.ones(D))
    assert sorted(seen) == [(0, 0), (4, 16), (8, 32), (12, 48)]


def test_log_evaluations_are_counted_apart_from_queries():
    _, _, trace = zoaq_jax.run(zoaq_jax.zo_sgd(1e-2, k=2, key=0), quadratic, jnp.zeros(D), 6,
                               log_every=2, a=jnp.ones(D))
    assert trace.num_log_evaluations.tolist() == [1, 2, 3, 4]
    assert trace.num_queries.tolist() == [0, 8, 16, 24]  # 2 directions x 2 calls a step


def test_divergence_stops_the_run_naming_the_learning_rate():
    opt = zoaq_jax.zo_sgd(3.0, k=2, key=0)  # far beyond 2 / L for this quadratic
    with pytest.warns(RuntimeWarning, match="learning rate"):
        params, _, trace = zoaq_jax.run(opt, quadratic, jnp.zeros(D), 60, a=jnp.ones(D))
    status = np.asarray(trace.status)
    assert status[-1] == zoaq_jax.STATUSES.index("diverged")
    stop = int(np.argmax(status > 0))
    assert np.all(np.isfinite(np.asarray(params)))  # stopped long before overflow
    assert float(trace.value[-1]) < 1e12 and stop < 60
    assert float(quadratic(trace.best_params, jnp.ones(D))) <= float(trace.value[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, _, off = zoaq_jax.run(opt, quadratic, jnp.zeros(D), 10, a=jnp.ones(D),
                                 divergence=None)
    assert zoaq_jax.STATUSES[int(off.status[-1])] == "finished"  # not "running"


def test_bad_budgets_are_refused_at_the_call():
    opt = zoaq_jax.zoaq(1e-2)
    with pytest.raises(ValueError, match="max_queries"):
        zoaq_jax.run(opt, quadratic, jnp.zeros(D), 2, max_queries=2**31, a=jnp.ones(D))
    with pytest.raises(ValueError, match="max_queries"):
        zoaq_jax.run(opt, quadratic, jnp.zeros(D), 2, max_queries=-1, a=jnp.ones(D))
    import optax
    with pytest.raises(ValueError, match="query ledger"):
        zoaq_jax.run(optax.sgd(1e-2), quadratic, jnp.zeros(D), 2, max_queries=5,
                     a=jnp.ones(D))


def test_run_carries_key_leaves_and_reraises_host_exceptions():
    """Params holding a PRNG key run (the key is carried unchanged), and a host
    objective's own exception reaches the caller of ``run`` with its type."""
    params = {"w": jnp.ones(3), "rng": jax.random.key(7)}
    opt = zoaq_jax.radazo(learning_rate=1e-2, k=2, key=0)
    out, _, trace = zoaq_jax.run(opt, lambda p: jnp.sum(p["w"] ** 2), params, 4, divergence=None)
    assert jnp.array_equal(jax.random.key_data(out["rng"]), jax.random.key_data(params["rng"]))
    assert int(trace.num_queries[-1]) == 16

    class SimulatorError(RuntimeError):
        pass

    def simulator(x):
        raise SimulatorError("simulator failed")

    with pytest.raises(SimulatorError, match="simulator failed"):
        zoaq_jax.run(opt, zoaq_jax.host_oracle(simulator), jnp.ones(3), 2)


class Key(enum.Enum):
    A = 1


def _method_objectives():
    class Model:
        def __init__(self, target):
            self.target = target

        def loss(self, x):
            return jnp.sum((x - self.target) ** 2)

    return [Model(1.0).loss, Model(5.0).loss]


def _global_objectives():
    made = []
    for target in (1.0, 5.0):  # a sweep whose lambda reads the loop variable as a global
        scope = {"jnp": jnp, "target": target}
        exec("f = lambda x: jnp.sum((x - target) ** 2)", scope)
        made.append(scope["f"])
    return made


OBJECTIVE_KINDS = {
    "globals": _global_objectives,
    "closure_cells": lambda: [(lambda t: lambda x: jnp.sum((x - t) ** 2))(t) for t in (1.0, 5.0)],
    "default_args": lambda: [lambda x, t=t: jnp.sum((x - t) ** 2) for t in (1.0, 5.0)],
    "bound_methods": _method_objectives,
    "partial": lambda: [functools.partial(lambda x, t: jnp.sum((x - t) ** 2), t=t)
                        for t in (1.0, 5.0)],
    # unhashable (a dict) and unorderable (an Enum and a str key) closed-over values
    "unorderable_closure": lambda: [
        (lambda d: lambda x: jnp.sum((x - d[Key.A]) ** 2) + d["b"])({Key.A: t, "b": 0.0})
        for t in (1.0, 5.0)],
}


@pytest.mark.parametrize("kind", sorted(OBJECTIVE_KINDS))
def test_a_cached_program_never_answers_for_another_objective(kind):
    """Two objectives that differ only in a value read through ``kind``: each run's
    logged value is its own objective's (a program cached for the first would report
    the first's)."""
    opt, x = zoaq_jax.zo_sgd(1e-2, k=1, key=0), jnp.zeros(2)
    for f in OBJECTIVE_KINDS[kind]():
        _, _, trace = zoaq_jax.run(opt, f, x, 1)
        assert float(trace.value[0]) == float(f(x))  # 2 and 50


def test_a_schedule_reading_a_loop_variable_is_its_own_program():
    """A learning-rate sweep whose schedule reads the loop variable: one step of ZO-SGD
    moves by lr * g with the same g, so the moves scale with the rates."""
    x = jnp.zeros(3)
    moves = []
    for lr in (1e-3, 1e-1):
        opt = zoaq_jax.zo_sgd(lambda t: lr, k=2, key=0)
        params, _, _ = zoaq_jax.run(opt, quadratic, x, 1, a=jnp.ones(3))
        moves.append(np.asarray(params - x))
    np.testing.assert_allclose(moves[1], 100 * moves[0], rtol=1e-4)


def test_a_large_closed_over_array_is_freed_after_the_run():
    before = _programs()
    data = jnp.linspace(0.0, 1.0, 2**20)  # 4 MB
    alive = weakref.ref(data)

    def f(x):
        return jnp.sum((x - data[:2]) ** 2)

    opt = zoaq_jax.zo_sgd(1e-2, k=1, key=0)
    zoaq_jax.run(opt, f, jnp.zeros(2), 2)
    del data, f
    gc.collect()
    assert alive() is None
    assert all(id(opt.init) in key for key in set(programs._PROGRAMS) - before)


def test_a_progress_callback_that_raises_stops_the_run_with_its_exception():
    calls, seen = [], []

    class BarError(RuntimeError):
        pass

    def progress(step, n):
        seen.append(step)
        if step == 2:
            raise BarError("the bar broke")

    with pytest.raises(BarError, match="the bar broke"):
        zoaq_jax.run(zoaq_jax.zo_sgd(1e-2, k=2, key=0), counted(calls), jnp.zeros(D), 20,
                     log_every=2, progress=progress, log_values=False)
    assert seen == [0, 2]  # no later log point
    assert sum(calls) == 2 * 2 * 2  # the two steps before it, none after
    # under an outer jit the run executes after run() returned: the callback raises, and
    # host_errors re-raises the exception as itself
    program = jax.jit(lambda x: zoaq_jax.run(zoaq_jax.zo_sgd(1e-2, k=2, key=0), quadratic, x,
                                             4, log_every=2, progress=progress,
                                             a=jnp.ones(D))[0])
    with pytest.raises(BarError, match="the bar broke"), zoaq_jax.host_errors():
        jax.block_until_ready(program(jnp.zeros(D)))


def test_a_run_leaving_the_domain_ends_nonfinite_with_a_warning():
    """inf outside sum(x) < 1: central pairs give inf - inf, the free estimate is NaN."""
    def f(x):
        return jnp.where(jnp.sum(x) < 1.0, jnp.sum((x - 2.0) ** 2), jnp.inf)

    for opt in (zoaq_jax.zoaq(0.1, k_max=4, n_hist=2, key=0), zoaq_jax.mezo(0.1, k=2, key=0)):
        with pytest.warns(RuntimeWarning, match="nonfinite"):
            _, _, trace = zoaq_jax.run(opt, f, jnp.zeros(4), 60)
        assert zoaq_jax.STATUSES[int(trace.status[-1])] == "nonfinite"
        assert np.isfinite(float(trace.best_value[-1]))


def test_a_run_stops_after_blind_steps_steps_without_a_finite_estimate():
    """An objective NaN around the start: each step's pairs are all NaN and the iterate
    stays; the run stops ``nonfinite`` at step ``BLIND_STEPS``, not at the first one, also
    when resumed a step at a time, and a paid log point does not evaluate it again."""
    from zoaq_jax import BLIND_STEPS
    f = lambda x: jnp.where(jnp.sum(x) == 0.0, 1.0, jnp.nan)  # noqa: E731
    with pytest.warns(RuntimeWarning, match="nonfinite"):
        _, state, trace = zoaq_jax.run(zoaq_jax.radazo(0.1, k=2, key=0), f, jnp.zeros(4),
                                       3 * BLIND_STEPS, log_every=1)
    status = np.asarray(trace.status)
    assert BLIND_STEPS > 1 and int(np.argmax(status != 0)) == BLIND_STEPS
    assert zoaq_jax.STATUSES[int(status[-1])] == "nonfinite"
    assert int(optax.tree.get(state, "num_queries")) == 4 * BLIND_STEPS
    # the streak lives in the state: a run resumed a step at a time stops at the same step
    opt, state, ends = zoaq_jax.radazo(0.1, k=2, key=0), None, []
    for _ in range(BLIND_STEPS):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            _, state, trace = zoaq_jax.run(opt, f, jnp.zeros(4), 1, init_state=state)
        ends.append(zoaq_jax.STATUSES[int(trace.status[-1])])
    assert ends == ["finished"] * (BLIND_STEPS - 1) + ["nonfinite"]
    # a paid log point after a step that left the iterate where it was costs nothing
    _, _, trace = zoaq_jax.run(opt, f, jnp.zeros(4), 3, log_every=1, max_queries=100)
    assert list(np.asarray(trace.num_log_evaluations)) == [1, 1, 1, 1]


def test_a_simulation_failing_at_scattered_points_does_not_stop_the_run():
    """NaN at about 1% of the points (a failing simulation): StatZO K = 1 (momentum) made
    steps without a finite response and moved on, and the run stopped there before
    (``nonfinite`` at step 58, f 0.27); it now runs to the end (f 0.13)."""
    def flaky(x):
        h = jnp.abs(jnp.sin((jnp.sum(x * jnp.arange(1, x.size + 1)) + 0.3) * 12345.678))
        return jnp.where(h < 0.01, jnp.nan, jnp.sum((x - 1.0) ** 2))

    _, state, trace = zoaq_jax.run(zoaq_jax.statzo(0.05, key=0), flaky, jnp.zeros(10), 300,
                                   log_every=300)
    assert zoaq_jax.STATUSES[int(trace.status[-1])] == "finished"
    assert int(optax.tree.get(state, "num_nonfinite")) > 0
    assert float(jnp.sum((trace.best_params - 1.0) ** 2)) < 0.2  # from 10


def test_an_infinite_estimate_is_a_blind_step_not_a_divergence():
    """+inf outside ``sum(x) < 0.5``: forward differences evaluate the centre, so a step
    outside has the estimate inf; it counts towards ``BLIND_STEPS`` (as ``diverged`` it
    ended the run at the first such step, before the streak could)."""
    def f(x):
        return jnp.where(jnp.sum(x) < 0.5, jnp.sum((x - 2.0) ** 2), jnp.inf)

    with pytest.warns(RuntimeWarning, match="nonfinite"):
        _, state, trace = zoaq_jax.run(zoaq_jax.radazo(0.1, k=2, difference="forward",
                                                       key=0), f, jnp.zeros(4), 40,
                                       log_every=1)
    status = [zoaq_jax.STATUSES[int(s)] for s in np.asarray(trace.status)]
    assert "diverged" not in status and status[-1] == "nonfinite"
    assert int(optax.tree.get(state, "blind_steps")) == zoaq_jax.BLIND_STEPS


def test_a_minus_infinite_centre_is_not_the_best_value():
    """f = -inf on a band the iterate crosses (forward differences evaluate the centre),
    then a wall of 1e6: the -inf estimate is a blind step, not the divergence baseline's
    best (it made the baseline infinite, and the run never stopped on the wall)."""
    def f(x):
        wall = jnp.sum((x - 2.0) ** 2) + jnp.where(x[0] > 2.1, 1e6, 0.0)
        return jnp.where((x[0] > 0.8) & (x[0] < 1.2), -jnp.inf, wall)

    with pytest.warns(RuntimeWarning, match="diverged"):
        _, state, trace = zoaq_jax.run(zoaq_jax.radazo(0.05, k=2, difference="forward",
                                                       key=0), f, jnp.full(4, 0.5), 100)
    assert zoaq_jax.STATUSES[int(trace.status[-1])] == "diverged"
    assert np.isfinite(float(optax.tree.get(state, "best_value")))
    assert np.isfinite(float(trace.best_value[-1]))


def test_a_chain_of_two_estimators_gets_a_clear_error():
    """run counts and stops on one ledger; two raised optax's "multiple values" KeyError."""
    opt = optax.chain(zoaq_jax.fixed_estimator(2, key=0), zoaq_jax.fixed_estimator(2, key=1),
                      optax.scale(-0.1))
    with pytest.raises(ValueError, match="opt: its state holds 2 query ledgers"):
        zoaq_jax.run(opt, lambda x: jnp.sum(x**2), jnp.ones(3), 4)


def test_tuning_free_near_a_domain_edge_is_not_stopped_by_its_radius():
    """x - log x from 5: a radius reaching over x = 0 gives a step without a finite
    response while the iterate is inside; tuning_free halves its radius and goes on. The
    run stopped there before (``nonfinite`` after 40-72 calls, f 12.6-19.3 on 5 seeds)."""
    f = lambda x: jnp.sum(x - jnp.log(x))  # noqa: E731
    opt = zoaq_jax.tuning_free(key=0)
    for seed in range(5):
        _, state, trace = zoaq_jax.run(opt, f, jnp.full(10, 5.0), 1000, max_queries=1500,
                                       seed=seed, log_every=1000)
        assert zoaq_jax.STATUSES[int(trace.status[-1])] == "budget_spent", seed
        assert int(optax.tree.get(state, "num_nonfinite")) > 0  # it did meet the edge
        assert float(f(trace.best_params)) < 10.01  # the minimum is 10


def test_a_resumed_run_equals_the_uninterrupted_one_status_included():
    """The divergence baseline lives in the state: a run cut a few steps before its
    divergence stop and resumed stops where the uninterrupted one does."""
    opt = zoaq_jax.zo_sgd(3.0, k=2, key=0)  # diverges (see the test above)
    x, a = jnp.zeros(D), jnp.ones(D)
    with pytest.warns(RuntimeWarning):
        whole = zoaq_jax.run(opt, quadratic, x, 30, a=a)
    status = np.asarray(whole[2].status)
    assert zoaq_jax.STATUSES[status[-1]] == "diverged"
    cut = int(np.argmax(status > 0)) - 2
    half, state, first = zoaq_jax.run(opt, quadratic, x, cut, a=a)
    assert zoaq_jax.STATUSES[int(first.status[-1])] == "finished"
    with pytest.warns(RuntimeWarning):
        rest = zoaq_jax.run(opt, quadratic, half, 30 - cut, init_state=state, a=a)
    np.testing.assert_array_equal(rest[0], whole[0])
    assert int(rest[2].status[-1]) == int(whole[2].status[-1])
    assert int(rest[1][0].ledger.num_queries) == int(whole[1][0].ledger.num_queries)


def test_a_state_of_another_configuration_is_refused_naming_the_field():
    small = zoaq_jax.zoaq(1e-2, k_max=4, n_hist=4, key=0)
    other = zoaq_jax.zoaq(1e-2, k_max=10, n_hist=8, key=0).init(jnp.zeros(D))
    with pytest.raises(ValueError, match=r"init_state\[0\]\.\w+.*another configuration"):
        zoaq_jax.run(small, quadratic, jnp.zeros(D), 2, init_state=other, a=jnp.ones(D))
    with pytest.raises(ValueError, match="init_state.*structure"):
        zoaq_jax.run(small, quadratic, jnp.zeros(D), 2,
                     init_state=zoaq_jax.radazo(1e-2).init(jnp.zeros(D)), a=jnp.ones(D))


def test_a_numpy_objective_and_a_foreign_optimizer_get_clear_errors():
    import optax

    def numpy_f(x):
        return float(np.sum(np.asarray(x) ** 2))

    def python_f(x):  # Python numbers from a traced array
        return sum(float(v) ** 2 for v in x)

    for fn in (numpy_f, python_f):
        with pytest.raises(TypeError, match=r"zoaq_jax\.host_oracle"):
            zoaq_jax.run(zoaq_jax.zoaq(1e-2), fn, jnp.zeros(D), 2)
    with pytest.raises(TypeError, match="not a zoaq_jax optimizer"):
        zoaq_jax.run(optax.adam(1e-2), quadratic, jnp.zeros(D), 2, a=jnp.ones(D))
    with pytest.raises(TypeError, match="opt must be an optimizer"):
        zoaq_jax.run(lambda x: x, quadratic, jnp.zeros(D), 2, a=jnp.ones(D))


def test_seeds_beyond_32_bits_are_refused():
    with pytest.raises(ValueError, match=r"seed must be an integer seed in \[-2\*\*31, 2\*\*32\)"):
        zoaq_jax.run(zoaq_jax.zoaq(1e-2), quadratic, jnp.zeros(D), 2, seed=2**32,
                     a=jnp.ones(D))
    with pytest.raises(ValueError, match="repeat the run of seed 0"):
        zoaq_jax.zoaq(1e-2, key=2**32)
    zoaq_jax.zoaq(1e-2, key=2**32 - 1)
    zoaq_jax.zoaq(1e-2, key=-(2**31))


def test_a_run_never_raises_the_optimizers_own_budget():
    """tuning_free(budget=60) may make 60 calls in all: a larger ``max_queries`` left it
    spending 80 here (run replaced its limit), and resuming its state raised "made by
    another optimizer" (run dropped the limit, and with it a field of the state)."""
    opt = zoaq_jax.tuning_free(60, key=0)
    f = functools.partial(quadratic, a=1.0)
    x0 = jnp.full(D, 3.0)
    _, state, trace = zoaq_jax.run(opt, f, x0, 40, log_every=40, max_queries=1000)
    assert int(trace.num_queries[-1]) == 60
    assert zoaq_jax.STATUSES[int(trace.status[-1])] == "budget_spent"
    params, state, trace = zoaq_jax.run(opt, f, x0, 40, log_every=40, max_queries=22)
    assert int(trace.num_queries[-1]) == 20  # the same program, 2 calls for the log points
    _, state, trace = zoaq_jax.run(opt, f, params, 40, log_every=40, init_state=state,
                                   max_queries=1000)
    assert int(trace.num_queries[-1]) == 60
    with pytest.raises(ValueError, match="made by another optimizer"):  # checked, then capped
        zoaq_jax.run(opt, f, x0, 2, init_state=zoaq_jax.zoaq(1e-2).init(x0), max_queries=9)


def test_a_data_parameter_named_after_a_run_keyword_is_refused_by_name():
    """run(seed=...) is run's own seed: value_fn(x, seed) could never get its data (the
    error said to pass what was passed), value_fn(x, extras) failed on hashing, and
    value_fn(x, seed=0) silently kept its default while the optimizer was reseeded."""
    opt = zoaq_jax.zo_sgd(1e-2, k=1)
    x0 = jnp.zeros(D)

    def noisy(x, seed=0):
        return quadratic(x, 1.0) + 0.0 * seed

    def shifted(x, extras):
        return quadratic(x, extras)

    for f, kwargs, name in ((noisy, {"seed": 3}, "seed"), (shifted, {}, "extras"),
                            (shifted, {"extras": jnp.ones(D)}, "extras")):
        with pytest.raises(TypeError, match=f"data parameter named '{name}'.*data_{name}"):
            zoaq_jax.run(opt, f, x0, 2, **kwargs)
    _, _, trace = zoaq_jax.run(opt, noisy, x0, 2)  # its default, run's seed not given
    assert int(trace.num_queries[-1]) == 4
    with pytest.raises(TypeError, match="data parameter named 'params'"):  # every name of run
        zoaq_jax.run(opt, lambda x, params: quadratic(x, params), x0, 2)
    with pytest.raises(TypeError, match="data parameter named 'divergence'"):  # not the default
        zoaq_jax.run(opt, lambda x, divergence=1.0: quadratic(x, divergence), x0, 2,
                     divergence=10.0)
    bound = functools.partial(noisy, seed=3.0)  # bound by the user: data, not run's seed
    _, _, trace = zoaq_jax.run(opt, bound, x0, 2, seed=5)
    assert int(trace.num_queries[-1]) == 4
