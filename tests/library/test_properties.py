"""The property matrix: every registry entry (tests/library/registry.py) has every property.

Properties: state dtypes and shapes stable across updates (float32, bfloat16, integer
and float64 leaves, inside ``lax.scan``); one compilation for many steps; exact query
accounting against a host-side call counter; donation; checkpoint round trips (Flax
and pickle) with an identical next update; the NaN policy; ``inject_hyperparams``
equal to the plain optimizer with unique names for every hyperparameter and
diagnostic; ``vmap`` over seeds equal to unbatched runs; construction errors.

Each entry is compiled a few times only: results are computed once per entry
(``functools.cache``) and checked by several tests.
"""

from __future__ import annotations

import functools
import inspect
import pickle

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import serialization

import zoaq_jax
from registry import REGISTRY

NAMES = sorted(REGISTRY)
STEPS = 2
TARGET = np.linspace(-1.0, 1.0, 6).astype(np.float32)
SCALE = np.linspace(0.5, 2.0, 6).astype(np.float32)

# d = 8 optimised scalars: float32, bfloat16 and an integer leaf the objective reads.
PARAMS = {"w": jnp.zeros(6), "h": jnp.ones(2, jnp.bfloat16), "n": jnp.array([3, -2])}


def objective(p, flag=False):
    """A polynomial in the float leaves (vmap reproduces it bit for bit), NaN if ``flag``."""
    w = p["w"] - TARGET
    h = p["h"].astype(jnp.promote_types(p["h"].dtype, jnp.float32)) - 0.5
    value = (jnp.sum(SCALE * w**2 * (1 + 0.1 * w**2)) + jnp.sum(h**2)
             + 0.01 * jnp.sum(p["n"]).astype(w.dtype))
    return jnp.where(flag, jnp.nan, value)


def host_objective(calls):
    """``objective`` in NumPy behind ``host_oracle``, counting every call in ``calls``."""

    def f(p, flag):
        calls.append(1)
        if flag:
            return np.nan
        w = p["w"].astype(np.float64) - TARGET
        h = p["h"].astype(np.float64) - 0.5
        return (np.sum(SCALE * w**2 * (1 + 0.1 * w**2)) + np.sum(h**2)
                + 0.01 * np.sum(p["n"]))

    return zoaq_jax.host_oracle(f)


def apply(entry, params, updates):
    """One step: ``params + updates`` (estimators: ``params - 0.05 * estimate``)."""
    if entry.estimator:
        updates = jax.tree.map(lambda u: -0.05 * u, updates)
    return optax.apply_updates(params, updates)


def scanned(opt, entry, params, value_fn=objective):
    """``(params, state, updates)`` after ``STEPS`` updates in one ``lax.scan``."""

    def body(carry, _):
        p, s = carry
        u, s = opt.update(None, s, p, value_fn=value_fn, flag=False)
        return (apply(entry, p, u), s), u

    (p, s), us = jax.lax.scan(body, (params, opt.init(params)), length=STEPS)
    return p, s, us


def close(a, b):
    """Equal to float32 rounding (bfloat16 leaves: to one bfloat16 ulp)."""
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        tol = 1e-2 if jnp.bfloat16 in (x.dtype, y.dtype) else 1e-3
        chex.assert_trees_all_close(x, y, rtol=tol, atol=tol / 10)


def avals(tree):
    return jax.tree.map(lambda x: (jnp.shape(x), jnp.result_type(x)), tree)


@functools.cache
def plain(name):
    entry = REGISTRY[name]
    opt = entry.make(key=0)
    return jax.jit(lambda p: scanned(opt, entry, p))(PARAMS), avals(opt.init(PARAMS))


@functools.cache
def drive(name):
    """Steps one entry with a counted host objective, donating the state to one jitted step.

    Main line: two finite steps, a checkpoint after the first, then one step whose every
    evaluation is NaN. Replays: the next update from Flax and pickle checkpoints, and a
    fresh ``init`` after the user's key went through a donated state.
    """
    entry, calls = REGISTRY[name], []
    chex.clear_trace_counter()  # chex counts traces per code location, across entries
    value_fn = host_objective(calls)
    user_key = jax.random.key(7)
    opt = entry.make(key=user_key)

    @functools.partial(jax.jit, donate_argnums=1)
    @chex.assert_max_traces(n=1)
    def step(params, state, flag):
        u, state = opt.update(None, state, params, value_fn=value_fn, flag=flag)
        return apply(entry, params, u), state, u

    out = {"init": avals(opt.init(PARAMS))}
    p1, s1, u1 = step(PARAMS, opt.init(PARAMS), False)
    out["first"] = (p1, u1, int(optax.tree.get(s1, "num_queries")))
    flax_bytes = serialization.to_bytes(s1)
    pickled = pickle.dumps(jax.device_get(s1))
    p2, s2, u2 = step(p1, s1, False)
    out["queries"] = int(optax.tree.get(s2, "num_queries"))
    out["calls"] = len(calls)
    out["finite"] = jax.device_get((p2, s2, u2))  # s2 is donated below
    p3, s3, u3 = step(p2, s2, True)
    out["nan"] = (p2, p3, s3, u3, int(optax.tree.get(out["finite"][1], "num_nonfinite")))
    template = opt.init(PARAMS)
    restored = {
        "flax": serialization.from_bytes(template, flax_bytes),
        "pickle": pickle.loads(pickled),
    }
    out["replays"] = {kind: step(p1, jax.tree.map(jnp.asarray, s), False)
                      for kind, s in restored.items()}
    out["key_data"] = np.asarray(jax.random.key_data(user_key))  # not deleted by donation
    out["again"] = step(PARAMS, opt.init(PARAMS), False)
    return out


@pytest.mark.parametrize("name", NAMES)
def test_state_dtypes_and_shapes_are_stable_in_scan(name):
    """Float32, bfloat16 and integer leaves: the scan carry (params, state) keeps its type."""
    (params, state, updates), init = plain(name)
    assert avals(state) == init
    assert avals(params) == avals(PARAMS)
    # Updates keep the float leaves' dtypes (integer leaves get zero updates; Optax's own
    # scale_by_learning_rate may return those in float32).
    first = jax.tree.map(lambda u: u[0], updates)
    assert avals({k: first[k] for k in ("w", "h")}) == avals({k: PARAMS[k] for k in ("w", "h")})
    assert not np.any(first["n"])
    np.testing.assert_array_equal(params["n"], PARAMS["n"])  # integer leaves are frozen
    assert np.any(first["h"])  # bf16 leaves get nonzero updates


@pytest.mark.parametrize("name", NAMES)
def test_state_dtypes_and_shapes_are_stable_under_x64(name):
    with jax.enable_x64(True):
        entry = REGISTRY[name]
        params = {"w": jnp.zeros(6, jnp.float64), "h": jnp.ones(2, jnp.float32),
                  "n": jnp.array([3, -2], jnp.int64)}
        opt = entry.make(key=0)
        init = avals(opt.init(params))
        new_params, state, _ = jax.jit(lambda p: scanned(opt, entry, p))(params)
        assert avals(state) == init
        assert avals(new_params) == avals(params)
        for _, leaf in optax.tree.get_all_with_path(state, "num_queries"):
            assert leaf.dtype == jnp.int32


@pytest.mark.parametrize("name", NAMES)
def test_step_compiles_once(name):
    """Five calls (new flag values, restored checkpoints, a fresh init) share one trace."""
    drive(name)  # chex.assert_max_traces(n=1) raises inside on a second trace


@pytest.mark.parametrize("name", NAMES)
def test_query_count_is_exact(name):
    out = drive(name)
    assert out["calls"] == out["queries"] > 0


@pytest.mark.parametrize("name", NAMES)
def test_state_can_be_donated_without_deleting_the_users_key(name):
    """Every main-line state was donated; the user's key survives and a new init works."""
    out = drive(name)
    np.testing.assert_array_equal(out["key_data"], jax.random.key_data(jax.random.key(7)))
    p1, u1, queries = out["first"]
    p, _, u = out["again"]
    chex.assert_trees_all_equal((p, u), (p1, u1))
    assert int(optax.tree.get(out["again"][1], "num_queries")) == queries


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("kind", ["flax", "pickle"])
def test_checkpoint_round_trip_gives_the_identical_next_update(name, kind):
    out = drive(name)
    chex.assert_trees_all_equal(out["replays"][kind], out["finite"])


@pytest.mark.parametrize("name", NAMES)
def test_nan_responses_are_discarded_counted_and_harmless(name):
    entry = REGISTRY[name]
    before, after, state, updates, nonfinite = drive(name)["nan"]
    assert int(optax.tree.get(state, "num_nonfinite")) == nonfinite + int(
        optax.tree.get(state, "last_k"))
    for path, leaf in jax.tree_util.tree_leaves_with_path((after, state, updates)):
        if any(n in jax.tree_util.keystr(path) for n in ("last_score", "consistency")):
            continue  # documented: +-inf scores without a finite response; NaN cosine of 0
        if jnp.issubdtype(leaf.dtype, jnp.floating):
            assert np.all(np.isfinite(np.asarray(leaf, np.float32))), jax.tree_util.keystr(path)
    if entry.estimator:  # no finite response: the estimate is zero
        chex.assert_trees_all_equal(updates, jax.tree.map(jnp.zeros_like, updates))


def _injected(name):
    entry = REGISTRY[name]
    return optax.inject_hyperparams(entry.factory, static_args=entry.static_args)(
        **entry.kwargs, key=0)


@pytest.mark.parametrize("name", NAMES)
def test_inject_hyperparams_equals_the_plain_optimizer(name):
    entry = REGISTRY[name]
    params, state, updates = jax.jit(lambda p: scanned(_injected(name), entry, p))(PARAMS)
    (p0, s0, u0), _ = plain(name)
    # Hyperparameters arrive as float32 arrays instead of Python floats; a constant
    # folded in double precision may differ by one ulp, amplified by 1/mu (and, on the
    # bfloat16 leaf, rounded to one bfloat16 ulp).
    close(params, p0)
    close(updates, u0)
    assert int(optax.tree.get(state, "num_queries")) == int(optax.tree.get(s0, "num_queries"))


def _field_names(tree):
    """Every NamedTuple field name in a state."""
    names = []

    def walk(x):
        if isinstance(x, tuple) and hasattr(x, "_fields"):
            names.extend(x._fields)
            for v in x:
                walk(v)
        elif isinstance(x, (tuple, list)):
            for v in x:
                walk(v)

    walk(tree)
    return names


@pytest.mark.parametrize("name", NAMES)
def test_every_hyperparameter_and_diagnostic_has_a_unique_name(name):
    state = _injected(name).init(PARAMS)
    hyper = optax.tree.get(state, "hyperparams")
    fields = [f for f in _field_names(state) if f not in ("hyperparams", "inner_state")]
    assert len(fields) == len(set(fields)), sorted(fields)
    for field in set(fields) | set(hyper):
        optax.tree.get(state, field)  # raises on multiple values
    if "mu" in hyper:  # setting the smoothing radius changes that one leaf only
        changed = optax.tree.set(state, mu=hyper["mu"] * 2)
        diff = [b for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(changed))
                if not np.array_equal(a, b, equal_nan=True)]
        assert diff == [hyper["mu"] * 2]


@pytest.mark.parametrize("name", NAMES)
def test_vmap_over_seeds_equals_unbatched_runs(name):
    """Lane 0 of a vmapped run is the unbatched run with seed 0: counts exactly, floats
    to rounding (XLA may fuse batched arithmetic differently; see design.md)."""
    entry = REGISTRY[name]
    batched = jax.jit(jax.vmap(lambda seed: scanned(entry.make(key=seed), entry, PARAMS)))(
        jnp.arange(2))
    (params, state, updates), _ = plain(name)
    lane = jax.tree.map(lambda x: x[0], batched)
    for a, b in zip(jax.tree.leaves(lane[1]), jax.tree.leaves(state)):
        if not jnp.issubdtype(a.dtype, jnp.floating):
            np.testing.assert_array_equal(a, b)
    close(lane, (params, state, updates))
    assert not np.array_equal(batched[2]["w"][0], batched[2]["w"][1])  # seeds matter


def _accepts(entry, arg):
    return arg in inspect.signature(entry.factory).parameters


@pytest.mark.parametrize("name", NAMES)
def test_bad_arguments_fail_at_construction(name):
    entry = REGISTRY[name]
    with pytest.raises(ValueError, match="key must be an integer seed"):
        entry.make(key=2**70)
    with pytest.raises(TypeError, match="key"):
        entry.make(key=jnp.zeros(2, jnp.uint32))
    if _accepts(entry, "mu"):
        with pytest.raises(TypeError, match="mu must be a real scalar"):
            entry.make(mu=jnp.ones(2) * 1e-3)
        with pytest.raises(TypeError, match="mu must be a real scalar"):
            entry.make(mu="0.01")
    if _accepts(entry, "learning_rate") and entry.factory.__module__.startswith("zoaq_jax"):
        for bad, error in [(None, TypeError), (np.array([-1e-2]), TypeError),
                           ("0.01", TypeError), (-1e-2, ValueError), (float("inf"), ValueError)]:
            with pytest.raises(error, match="learning_rate"):
                entry.make(learning_rate=bad)
