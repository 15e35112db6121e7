"""Objectives with their own randomness: the per-call PRNG key ``noise_key``.

A ``value_fn`` naming ``noise_key`` gets, at the estimator's call with index ``n`` (its
count of calls before it), ``fold_in(fold_in(key, 2**32 - 1), n)``. The tests record
the keys the objective receives (a host function sees them as their uint32 data) and
check each documented property: counted with the calls, shared by the two points of a
pair exactly when common random numbers are on, the same however a step is chunked, in
sharded and sequential estimators, under ``vmap`` and in a resumed run; ``run``'s
logging keys are never a call's; a data keyword ``noise_key`` is refused. That a
``value_fn`` without the parameter runs bit for bit as before is the golden snapshot's
(``test_compile.py``).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import zoaq_jax
from zoaq_jax._src import directions as dirs

D = 3
X = jnp.asarray([0.5, -1.0, 2.0], jnp.float32)


def expected_keys(calls: range, seed: int = 0) -> list[tuple[int, ...]]:
    """The documented keys of the calls with these indices (threefry, from ``seed``)."""
    root = jax.random.fold_in(jax.random.key(seed), 2**32 - 1)
    return [tuple(np.asarray(jax.random.key_data(jax.random.fold_in(root, n))).tolist())
            for n in calls]


def noise(words):
    """A value drawn from a key's data, exact in float32 on the host and in JAX."""
    return ((words[..., 0] >> 12) & 1023).astype(np.float32) / np.float32(1024)


def objective(x, noise_key):  # JAX: smooth part exact in float32, plus the key's noise
    return x[0] + noise(jax.random.key_data(noise_key))


class Recorder:
    """A host objective equal to :func:`objective` that records every call's key data
    (``noise_key`` arrives as uint32 data) and point."""

    def __init__(self):
        self.calls: list[tuple[tuple[int, ...], np.ndarray]] = []

        def fn(x, noise_key):
            self.calls.append((tuple(noise_key.tolist()), np.array(x)))
            return np.float32(x[0]) + noise(noise_key)

        self.fn = zoaq_jax.host_oracle(fn)

    @property
    def keys(self) -> list[tuple[int, ...]]:
        return [k for k, _ in self.calls]


def steps(est, value_fn, n, x=X, **kw):
    step = jax.jit(lambda x, s: est.update(None, s, x, value_fn=value_fn, **kw))
    state = est.init(x)
    for _ in range(n):
        _, state = step(x + 0.1 * int(optax.tree.get(state, "num_queries")), state)
    return state


@pytest.mark.parametrize("make", [
    lambda: zoaq_jax.statzo_estimator(2, 5, common_random_numbers=False),  # forward: centre
    lambda: zoaq_jax.zoar_estimator(2, n_hist=2, common_random_numbers=False),
    lambda: zoaq_jax.hizoo_estimator(2, alpha=1e-2, common_random_numbers=False),
], ids=["statzo-forward", "zoar", "hizoo"])
def test_each_call_gets_the_key_of_its_index_and_retained_records_take_none(make):
    rec = Recorder()
    est = make()
    state = steps(est, rec.fn, 3)
    calls = int(optax.tree.get(state, "num_queries"))
    assert calls >= 6
    assert sorted(rec.keys) == sorted(expected_keys(range(calls)))  # each once, no other
    if optax.tree.get(state, "responses") is not None:  # ZoAR keeps its records' values
        # the same steps with the objective in JAX: the same keys, equal bit for bit
        in_jax = steps(est, objective, 3)
        for name in ("responses", "num_queries", "value_estimate"):
            np.testing.assert_array_equal(optax.tree.get(state, name),
                                          optax.tree.get(in_jax, name))


def test_common_random_numbers_share_a_difference_key_and_only_then():
    central, forward, given = Recorder(), Recorder(), Recorder()
    steps(zoaq_jax.fixed_estimator(3, common_random_numbers=True), central.fn, 1)
    by_key: dict = {}
    for k, x in central.calls:
        by_key.setdefault(k, []).append(x)
    assert sorted(by_key) == sorted(expected_keys(range(0, 6, 2)))  # a pair's first call
    for plus, minus in by_key.values():  # the two points of one pair: x + mu u, x - mu u
        np.testing.assert_allclose((plus + minus) / 2, X, atol=1e-6)
        assert not np.allclose(plus, minus)
    steps(zoaq_jax.fixed_estimator(3, difference="forward", common_random_numbers=True),
          forward.fn, 1)
    assert forward.keys == expected_keys(range(1)) * 4  # the centre's key, in all four
    steps(zoaq_jax.fixed_estimator(3, difference="forward", common_random_numbers=True),
          given.fn, 1, value=jnp.float32(0.0))  # the caller's centre: no shared call
    assert sorted(given.keys) == sorted(expected_keys(range(3)))


def test_a_direction_key_does_not_depend_on_how_the_step_is_chunked(monkeypatch):
    """The same six directions bought in chunks of 2: drawn in one batch, or where they
    are used in chunks of the batch limit, or evaluated all at once: each point gets the
    same key."""
    recorded = []
    for variant in (dict(), dict(limit=2 * D), dict(evaluation="vectorized")):
        with monkeypatch.context() as patch:
            if "limit" in variant:  # directions drawn where used, chunks of 2 in absorb
                patch.setattr(dirs, "_BATCH_LIMIT", variant.pop("limit"))
            rec = Recorder()
            est = zoaq_jax.adaptive_estimator(
                zoaq_jax.gates.accept(), zoaq_jax.budgets.constant(6),
                grid=zoaq_jax.Grid(2, 6, 2), common_random_numbers=False, **variant)
            steps(est, rec.fn, 1)
        recorded.append(dict(rec.calls))
    keys = expected_keys(range(12))
    for points in recorded:
        assert sorted(points) == sorted(keys)
        for k in keys:
            np.testing.assert_array_equal(points[k], recorded[0][k])


def noisy_bowl(x, noise_key):
    return jnp.sum((x - 1.0) ** 2) * (1.0 + 0.3 * jax.random.normal(noise_key))


def test_vmap_over_seeds_equals_each_seed_run_alone():
    """Each lane of steps vmapped over seeds gets its seed's keys: it equals that seed's
    steps run alone (to float rounding, see docs; independent noise of 0.3 / mu per
    response would show any other key)."""
    est = zoaq_jax.fixed_estimator(2, common_random_numbers=False)
    seeds = [zoaq_jax.fixed_estimator(2, key=seed).init(X) for seed in range(3)]
    batched = jax.tree.map(lambda *x: jnp.stack(x), *seeds)
    step = jax.jit(lambda s: est.update(None, s, X, value_fn=noisy_bowl)[1])
    vmapped = jax.jit(jax.vmap(step))
    for _ in range(3):
        batched, seeds = vmapped(batched), [step(s) for s in seeds]
    for seed, state in enumerate(seeds):
        for name in ("value_estimate", "num_queries"):
            np.testing.assert_allclose(optax.tree.get(batched, name)[seed],
                                       optax.tree.get(state, name), rtol=1e-6)


@pytest.mark.parametrize("difference, combine", [("central", "psum"), ("forward", "gather")])
def test_sharded_and_sequential_estimators_give_the_objective_the_same_keys(difference,
                                                                             combine):
    """Directions split over 4 devices (each evaluates its share with the calls' global
    indices; a forward centre value before the split) and points evaluated one at a
    time: the plain estimator's values, to float rounding. Independent noise of
    0.3 / mu per response would show any other key."""
    mesh = jax.make_mesh((4,), ("directions",), devices=jax.devices()[:4])
    options = dict(difference=difference, common_random_numbers=False)
    plain = steps(zoaq_jax.fixed_estimator(8, **options), noisy_bowl, 2)
    est = zoaq_jax.fixed_estimator(8, mesh=mesh, combine=combine, **options)
    state = zoaq_jax.replicate(est.init(X), mesh)
    step = jax.jit(lambda x, s: est.update(None, s, x, value_fn=noisy_bowl))
    for _ in range(2):
        x = zoaq_jax.replicate(X + 0.1 * int(optax.tree.get(state, "num_queries")), mesh)
        _, state = step(x, state)
    for name in ("value_estimate", "num_queries"):
        np.testing.assert_allclose(optax.tree.get(state, name),
                                   optax.tree.get(plain, name), rtol=1e-6)
    if difference == "central":
        one_at_a_time = steps(zoaq_jax.fixed_estimator(8, **options),
                              zoaq_jax.sequential(noisy_bowl), 2)
        np.testing.assert_allclose(optax.tree.get(one_at_a_time, "value_estimate"),
                                   optax.tree.get(plain, "value_estimate"), rtol=1e-6)


def test_run_logging_keys_are_never_a_call_key_and_a_resumed_run_continues_them():
    """Two runs of 2 steps, the second resumed from the first's state: the calls' keys
    go on from the state's count, and each log point gets the key of its step,
    ``fold_in(root, 2**31 + t)``, never a call's (the resumed run logs step 2 again)."""
    opt = zoaq_jax.zo_sgd(1e-2, k=1, common_random_numbers=False)
    rec = Recorder()
    half, state, first = zoaq_jax.run(opt, rec.fn, X, 2)
    _, state, rest = zoaq_jax.run(opt, rec.fn, half, 2, init_state=state)
    calls = int(optax.tree.get(state, "num_queries"))
    root = jax.random.fold_in(jax.random.key(0), 2**32 - 1)
    logged = [tuple(np.asarray(jax.random.key_data(jax.random.fold_in(
        root, jnp.uint32(2**31 + t)))).tolist()) for t in (0, 1, 2, 2, 3, 4)]
    assert calls == 8 and int(rest.num_log_evaluations[-1]) == 3
    assert sorted(rec.keys) == sorted(expected_keys(range(calls)) + logged)
    assert not set(expected_keys(range(calls))) & set(logged)
    assert float(rest.value[0]) == float(first.value[-1])  # the same point and key


def test_a_data_keyword_noise_key_is_refused_and_a_bound_one_kept():
    est = zoaq_jax.fixed_estimator(1)
    key = jax.random.key(1)
    with pytest.raises(TypeError, match="noise_key.*fills"):
        est.update(None, est.init(X), X, value_fn=noisy_bowl, noise_key=key)
    with pytest.raises(TypeError, match="noise_key.*fills"):
        zoaq_jax.run(zoaq_jax.zo_sgd(1e-2), noisy_bowl, X, 2, noise_key=key)
    with pytest.raises(TypeError, match=r"\*\*kwargs"):
        est.update(None, est.init(X), X, value_fn=lambda x, **kw: jnp.sum(x), noise_key=key)
    with pytest.raises(TypeError, match="common_random_numbers must be True or False"):
        zoaq_jax.radazo(1e-2, common_random_numbers="yes")
    # A key bound by functools.partial is the caller's: kept, the same at every call.
    fixed = functools.partial(noisy_bowl, noise_key=key)
    g, plain = jax.jit(lambda s: [est.update(None, s, X, value_fn=fn)[0] for fn in (
        fixed, lambda x: noisy_bowl(x, key))])(est.init(X))
    np.testing.assert_array_equal(g, plain)


def test_numpy_generator_is_a_function_of_the_key_alone():
    a, b = (np.asarray(jax.random.key_data(k)) for k in jax.random.split(jax.random.key(0)))
    first = zoaq_jax.numpy_generator(a).normal(size=3)
    np.testing.assert_array_equal(first, zoaq_jax.numpy_generator(a.copy()).normal(size=3))
    assert not np.allclose(first, zoaq_jax.numpy_generator(b).normal(size=3))
