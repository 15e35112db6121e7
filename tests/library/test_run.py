"""zoaq_jax.run as a scheduler job: budgets, best iterate, compile counts, leaks, progress,
static keywords, divergence."""

import dataclasses
import gc
import warnings
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import zoaq_jax

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
    (zoaq_jax.zoaq(1e-2, k_min=2, k_max=7, k_step=2, n_hist=4, key=1), 101),  # adaptive
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
                                      k_min=3, k_max=9, k_step=3, key=0)
    _, _, trace = zoaq_jax.run(opt, quadratic, jnp.zeros(D), 5, max_queries=48,
                               a=jnp.ones(D))
    # 2 steps of 18 = 36, then 12 left: a capped step of k=6 (12 calls) exactly
    assert trace.num_queries.tolist() == [0, 18, 36, 48, 48, 48]
    assert trace.last_k.tolist() == [0, 9, 9, 6, 6, 6]


def test_budgeted_run_equals_the_plain_run_until_the_budget():
    opt = zoaq_jax.zoaq(1e-2, key=5)
    _, _, full = zoaq_jax.run(opt, quadratic, jnp.zeros(D), 30, a=jnp.ones(D))
    budget = int(full.num_queries[20])
    _, _, cut = zoaq_jax.run(opt, quadratic, jnp.zeros(D), 30, a=jnp.ones(D),
                             max_queries=budget)
    # the same steps and budgets; the budgeted program (a lax.cond around each step)
    # may round differently in the last bits
    np.testing.assert_array_equal(cut.num_queries[:21], full.num_queries[:21])
    np.testing.assert_array_equal(cut.last_k[:21], full.last_k[:21])
    np.testing.assert_allclose(cut.value[:21], full.value[:21], rtol=1e-5)
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


def test_fingerprint_describes_frozen_dataclasses_by_their_fields():
    """Immutable settings objects (e.g. a parsed directions spec) must not defeat the
    compile cache: equal fields give equal fingerprints; a mutable dataclass, whose fields
    may change after the fact, stays compared by identity."""
    from zoaq_jax._src.configs import fingerprint

    @dataclasses.dataclass(frozen=True)
    class Frozen:
        name: str
        rate: float = 0.5

    @dataclasses.dataclass
    class Mutable:
        name: str

    assert fingerprint(Frozen("a")) == fingerprint(Frozen("a"))
    assert fingerprint(Frozen("a")) != fingerprint(Frozen("a", 0.25))
    assert fingerprint(Frozen("a")) != fingerprint(Frozen("b"))
    m = Mutable("a")
    assert fingerprint(m) == fingerprint(m) and fingerprint(m) != fingerprint(Mutable("a"))

    def closure(settings):  # as a factory closes over its parsed settings
        return lambda: settings

    assert fingerprint(closure(Frozen("a"))) == fingerprint(closure(Frozen("a")))
    assert fingerprint(closure(Frozen("a"))) != fingerprint(closure(Frozen("b")))


def test_compiles_once_per_configuration_and_keeps_no_optimizer_alive():
    traces = []

    def f(x, a):
        traces.append(1)  # runs only when the program is traced
        return quadratic(x, a)

    x, a = jnp.zeros(D), jnp.ones(D)
    outs = [zoaq_jax.run(zoaq_jax.zoaq(1e-2, key=0), f, x, 4, a=a) for _ in range(3)]
    first = len(traces)
    assert first > 0
    for out in outs[1:]:  # equal configurations: one compilation, the same numbers
        np.testing.assert_array_equal(out[0], outs[0][0])
    zoaq_jax.run(zoaq_jax.zoaq(2e-2, key=0), f, x, 4, a=a)  # another learning rate
    assert len(traces) == 2 * first
    for make in (zoaq_jax.radazo, zoaq_jax.zoar, zoaq_jax.auto_k, zoaq_jax.statzo):
        zoaq_jax.run(make(1e-2, key=0), f, x, 4, a=a)
        seen = len(traces)
        zoaq_jax.run(make(1e-2, key=0), f, x, 4, a=a)  # a new, equal optimizer object
        assert len(traces) == seen, make.__name__

    opt = zoaq_jax.zoaq(1e-2, key=0)
    refs = [weakref.ref(opt.init), weakref.ref(opt.update)]
    zoaq_jax.run(opt, f, x, 4, a=a)
    del opt, outs
    gc.collect()
    assert all(r() is None for r in refs)


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
    assert int(off.status[-1]) == 0


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
