"""Running sums of the retained records: drift bound, refresh, equality with regeneration."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import zoaq_jax
from zoaq_jax.retention import fifo
from helpers import diag, wavy
from zoaq_jax._src import directions, history, ledger, retained

D = 16
U_ROUND = 2.0**-24  # float32 unit roundoff


def _states(est, steps, x):
    """The estimator's states after each of ``steps`` updates at the fixed point ``x``."""

    def body(state, _):
        _, state = est.update(None, state, x, value_fn=wavy)
        return state, state

    return jax.jit(lambda s: jax.lax.scan(body, s, length=steps)[1])(est.init(x))


def _exact(buffer, seed, like):
    """float64 ``sum r_i u_i`` and ``sum |r_i| |u_i|`` over a buffer, from the keys."""
    valid = np.asarray(history.valid(buffer))
    run_key = jax.random.key(seed)
    total, magnitude = np.zeros(D), np.zeros(D)
    for t, i, r in zip(np.asarray(buffer.steps)[valid], np.asarray(buffer.index)[valid],
                       np.asarray(buffer.responses, np.float64)[valid]):
        key = jax.random.fold_in(jax.random.fold_in(run_key, int(t)), int(i))
        u = directions.sample(directions.family("gaussian"), key, like)
        u = np.asarray(u, np.float64)
        total += r * u
        magnitude += abs(r) * abs(u)
    return total, magnitude


def _at(states, t, field):
    return jax.tree.map(lambda x: x[t], optax.tree.get(states, field))


CASES = {  # estimator, records added or evicted a step at most (K)
    "zoaq": (lambda refresh: zoaq_jax.zoaq_estimator(
        k_max=4, retention=fifo(8, refresh=refresh), key=3), 4),
    "zoar_central": (lambda refresh: zoaq_jax.zoar_estimator(
        k=3, n_hist=2, difference="central", refresh=refresh, key=3), 3),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_running_sum_drift_is_within_the_float32_bound(name):
    r"""Drift bound. A step sets :math:`\tilde S_t = fl(fl(\tilde S_{t-1} + A_t) - L_t)`
    with :math:`A_t, L_t` the float32 sums of at most :math:`K` added and evicted
    contributions :math:`r_i u_i`. Per component, a sum of :math:`K` products errs by at
    most :math:`\gamma_K \sum |r_i| |u_i|` (:math:`\gamma_K = K u / (1 - K u)`,
    :math:`u = 2^{-24}`) and each addition by :math:`u` times its result, so with
    :math:`B = \max_t (M_{t-1} + M_t)`, :math:`M_t = \sum_{i \in \mathcal R_t} |r_i|
    |u_i|` (no fresh record is evicted in its own step here, so added and evicted
    records lie in :math:`\mathcal R_t \cup \mathcal R_{t-1}`), after :math:`N` steps

    .. math:: |\tilde S_N - S_N| \le N (K + 3) u B

    component-wise, against the exact sum :math:`S_N` of the float32 directions and
    responses in float64. The refresh period is above ``N`` here, so nothing resets the
    drift; the bound would fail for a running sum that dropped or double-counted a
    record (an error of order :math:`B / \sqrt d`, far above it)."""
    make, k = CASES[name]
    steps = 300
    x = jax.random.normal(jax.random.key(0), (D,))
    states = _states(make(10**6), steps, x)
    errors, magnitudes = [], []
    for t in range(steps):
        exact, magnitude = _exact(_at(states, t, "history"), 3, x)
        errors.append(np.abs(np.asarray(_at(states, t, "retained_sum"), np.float64) - exact))
        magnitudes.append(magnitude)
    bound_b = max(np.max(a + b) for a, b in zip(magnitudes[:-1], magnitudes[1:]))
    bound = steps * (k + 3) * U_ROUND * bound_b
    assert int(diag(_at(states, steps - 1, "ledger"), "step")) == steps
    assert max(np.max(e) for e in errors) <= bound
    assert np.max(errors[-1]) > 0  # the sum is a running one: it has rounding of its own


@pytest.mark.parametrize("name", sorted(CASES))
def test_refresh_resets_the_running_sum_to_the_exact_recomputation(name):
    """After every ``refresh``-th step the sum is recomputed from the keys: within one
    float32 summation of the exact float64 sum (:math:`\\gamma_n M`, ``n`` records),
    and bit for bit the float32 regeneration of the buffer."""
    make, _ = CASES[name]
    refresh, steps = 7, 21
    x = jax.random.normal(jax.random.key(0), (D,))
    states = _states(make(refresh), steps, x)
    for t in range(refresh - 1, steps, refresh):
        buffer = _at(states, t, "history")
        n = int(buffer.size)
        exact, magnitude = _exact(buffer, 3, x)
        got = np.asarray(_at(states, t, "retained_sum"))
        gamma = n * U_ROUND / (1 - n * U_ROUND)
        assert np.all(np.abs(got - exact) <= gamma * magnitude + 1e-30)
        keys = jax.vmap(lambda s, i: jax.random.fold_in(jax.random.fold_in(
            jax.random.key(3), s), i))(buffer.steps, buffer.index)
        coeffs = jnp.where(history.valid(buffer), buffer.responses, 0.0)
        (regenerated,) = directions.regenerate_sums(
            directions.family("gaussian"), lambda first, size: jax.lax.dynamic_slice_in_dim(keys, first, size),
            (coeffs,), x, n)
        np.testing.assert_array_equal(got, regenerated)


@pytest.mark.parametrize("name", ["zoaq", "zoaq_drawn_where_used", "zoaq_forward", "zoar",
                                  "zoar_central"])
def test_running_sums_give_the_regenerated_estimates(name):
    """A few hundred steps along a fixed path: the running sums (default refresh) give the
    estimates of the exact regeneration every step (``refresh=1``, the estimator before
    running sums) to rounding, with the same budgets and the same query counts."""
    make = {
        "zoaq": lambda r: zoaq_jax.zoaq_estimator(
            k_max=6, retention=fifo(8, refresh=r), key=5),
        "zoaq_drawn_where_used": lambda r: zoaq_jax.adaptive_estimator(
            zoaq_jax.gates.momentum(), zoaq_jax.budgets.reset("min"),
            fifo(8, refresh=r), grid=zoaq_jax.Grid(1, 6), predraw=False,
            key=5),
        "zoaq_forward": lambda r: zoaq_jax.zoaq_estimator(
            k_max=10, retention=fifo(4, refresh=r), difference="forward",
            key=5),
        "zoar": lambda r: zoaq_jax.zoar_estimator(k=2, n_hist=8, refresh=r, key=5),
        "zoar_central": lambda r: zoaq_jax.zoar_estimator(k=2, n_hist=8, difference="central",
                                                          refresh=r, key=5),
    }[name]
    steps = 200
    x0 = jax.random.normal(jax.random.key(1), (D,))
    path = x0 + 0.01 * jnp.arange(steps, dtype=jnp.float32)[:, None]

    def along_path(est):  # one compiled scan: per-step estimates, K and query counts
        def body(state, x):
            g, state = est.update(None, state, x, value_fn=wavy)
            return state, (g, optax.tree.get(state, "last_k"),
                           optax.tree.get(state, "num_queries"))

        return jax.jit(lambda s: jax.lax.scan(body, s, path))(est.init(x0))

    s_run, (g_run, k_run, q_run) = along_path(make(zoaq_jax._src.retained.REFRESH))
    s_exact, (g_exact, k_exact, q_exact) = along_path(make(1))
    scale = np.max(np.abs(np.asarray(g_exact)), axis=1, keepdims=True)  # per step
    assert np.all(np.abs(np.asarray(g_run) - np.asarray(g_exact)) <= 1e-4 * scale)
    np.testing.assert_array_equal(k_run, k_exact)
    np.testing.assert_array_equal(q_run, q_exact)
    size = int(optax.tree.get(s_run, "history").size)
    assert size == int(optax.tree.get(s_exact, "history").size) > 0


@pytest.mark.parametrize("compare_all", [history._COMPARE_ALL, 0])  # 0: binary search
def test_ring_buffer_leaving_records_are_the_evicted_ones(monkeypatch, compare_all):
    """``history.leaving`` names exactly the records ``push`` drops, old ones first and
    then, past the capacity, the step's own earliest kept records (whichever search
    finds the kept records)."""
    monkeypatch.setattr(history, "_COMPARE_ALL", compare_all)
    buffer = history.init(5)
    buffer = history.push(buffer, jnp.arange(4, dtype=jnp.int32), jnp.arange(4.0),
                          jnp.int32(0), jnp.ones(4, bool))
    keep = jnp.array([1, 0, 1, 1, 1, 1, 0, 1], bool)
    responses = 10.0 + jnp.arange(8.0)
    index = jnp.arange(8, dtype=jnp.int32)
    steps, index_out, values, live = history.leaving(buffer, index, responses, jnp.int32(1),
                                                     keep, 8)
    gone = [(int(s), int(i), float(v)) for s, i, v, ok in zip(steps, index_out, values, live)
            if ok]
    after = history.push(buffer, index, responses, jnp.int32(1), keep)
    # 4 old + 6 kept, capacity 5: the 4 old ones and the first kept one (index 0) leave.
    assert gone == [(0, 0, 0.0), (0, 1, 1.0), (0, 2, 2.0), (0, 3, 3.0), (1, 0, 10.0)]
    assert sorted(float(r) for r in after.responses) == [12.0, 13.0, 14.0, 15.0, 17.0]
    assert list(np.asarray(live)) == [True] * 5 + [False] * 3


def test_a_step_derives_its_fresh_and_record_keys_in_one_batch():
    """``step_and_record_keys``: the keys of ``direction_keys`` of the step key and of
    ``record_keys``, bit for bit."""
    schedule = ledger.KeySchedule.of(7)
    book = schedule.init(jnp.zeros(3))._replace(step=jnp.int32(5))
    steps, index = jnp.array([2, 3, 4], jnp.int32), jnp.array([1, 0, 9], jnp.int32)
    fresh, old = schedule.step_and_record_keys(book, 4, steps, index)
    data = jax.random.key_data
    np.testing.assert_array_equal(
        data(fresh), data(ledger.direction_keys(schedule.step_key(book), 0, 4)))
    np.testing.assert_array_equal(data(old), data(schedule.record_keys(book, steps, index)))


@pytest.mark.parametrize("factory", [zoaq_jax.retention.fifo, zoaq_jax.zoar_estimator,
                                     zoaq_jax.zoaq, zoaq_jax.zoar])
def test_refresh_is_checked_at_construction(factory):
    args = (1e-2,) if factory in (zoaq_jax.zoaq, zoaq_jax.zoar) else ()
    with pytest.raises(ValueError, match="refresh"):
        factory(*args, refresh=0)
    with pytest.raises(TypeError, match="refresh"):
        factory(*args, refresh=2.5)


@pytest.mark.parametrize("step, old, keep", [
    (0, [], [True, False, True, True]),  # empty slots name record (0, 0): fresh at step 0
    (3, [(1, 0), (1, 2), (2, 1)], [True, False, True, True]),  # the push wraps, evicts one
    (4, [(1, 0), (1, 1), (2, 0), (2, 1), (3, 0), (3, 1), (3, 2)],  # a wrapped buffer,
     [True] * 6),  # more kept than the capacity
    (4, [(1, 0), (1, 1), (2, 0), (2, 1), (3, 0), (3, 1), (3, 2)],  # a wrapped buffer whose
     [True, False, False]),  # old records survive the push (a slot's age is not its index)
])
def test_the_refresh_picks_the_pushed_records_keys_from_the_step_batch(step, old, keep):
    """The keys the refresh regenerates the pushed buffer from, picked from the step's one
    batch (fresh records and the buffer oldest first) by ``_pushed_keys``: every slot's
    per-leaf keys are those derived from its ``(step, index)``, bit for bit."""
    schedule = ledger.KeySchedule.of(7)
    like = {"a": jnp.zeros(3), "b": jnp.zeros((2, 2))}
    book = schedule.init(like)._replace(step=jnp.int32(step))
    buffer = history.init(5)
    for t, i in old:
        buffer = history.push(buffer, jnp.array([i]), jnp.zeros(1), jnp.int32(t),
                              jnp.array([True]))
    slots = len(keep)
    records = history.push(buffer, jnp.arange(slots, dtype=jnp.int32), jnp.ones(slots),
                           book.step, jnp.array(keep))
    keys = schedule.step_and_record_keys(book, slots, *history.oldest(buffer, 5), like)
    source = retained.Source(directions.family("gaussian"), schedule, book, like, None, keys)
    picked = retained._pushed_keys(source, buffer, records)(jnp.int32(0), 5)
    derived = directions.leaf_keys(schedule.record_keys(book, records.steps, records.index),
                                   like)
    np.testing.assert_array_equal(jax.random.key_data(picked), jax.random.key_data(derived))
