"""The property matrix: every registry entry (tests/library/registry.py) has every property.

Properties: ``zoaq_jax.run`` on the aliases (budgets with logging counted on the host,
key leaves with budgets, states of another configuration, domain exits, resumed runs);
state dtypes and shapes stable across updates (leaves of float32,
bfloat16, float16, Python float and PRNG keys; under x64 float64, float32, zero-size and
key leaves; inside ``lax.scan``); complex, integer and bool leaves refused at ``init``
by path; one compilation for many steps; exact query accounting against a host-side
call counter; donation; checkpoint round trips (Flax msgpack, Orbax and pickle) with an
identical next update; the NaN policy; ``inject_hyperparams`` equal to the plain
optimizer with unique names for every hyperparameter and diagnostic; ``vmap`` over
seeds equal to unbatched runs; construction errors; refused objectives (low-precision
losses, a data parameter named ``value``).

Each entry is compiled a few times only: results are computed once per entry
(``functools.cache``) and checked by several tests. Every entry goes through the jitted
step of ``drive``; the axes that compile a program of their own run on representatives
of the code they exercise: scans (plain, ``inject_hyperparams``, ``vmap``) on
``REPRESENTATIVES``, scans under x64 on ``X64``, Optax's wrappers on ``WRAPPED``,
un-jitted Python-float updates on ``LEAF_CODE``, meshes on the mesh test's list. Every program is compiled with XLA's
backend optimisations off (tests/conftest.py), and the jitted step of ``drive`` takes
committed arrays only, so that its one trace gives one executable.
"""

from __future__ import annotations

import functools
import inspect
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest
from flax import serialization

import zoaq_jax
from registry import REGISTRY

NAMES = sorted(REGISTRY)
STEPS = 2
TARGET = np.linspace(-1.0, 1.0, 6).astype(np.float32)
SCALE = np.linspace(0.5, 2.0, 6).astype(np.float32)

# Representatives of the code paths, for the axes that compile a program of their own
# (scans under x64, inject_hyperparams, vmap): the skeleton with a buffer, central
# differences, ZoAQ's gate and rule (zoaq); forward differences and the norm trigger
# (zoaq_norm_forward); sphere directions without a buffer, the ZO-AdaMM backbone
# (zoaq_sphere_nohist_zo_adamm); the variance test (statzo_estimator_central); auto_k's
# rule; a user's rule; ZoAR forward and central on the SGD backbone; the fixed-budget chain
# with weight decay (mezo); AMSGrad's maximum (zo_adamm_amsgrad); HiZOO's Hessian (hizoo).
# The other entries
# combine these same pieces (other grids, resets, monitors, estimators without a
# backbone); every entry has every property of the jitted step (``drive``).
REPRESENTATIVES = ("zoaq", "zoaq_norm_forward", "zoaq_sphere_nohist_zo_adamm",
                   "statzo_estimator_central", "auto_k", "adaptive_estimator_user_rule",
                   "zoar", "zoar_central_sgd", "mezo", "zo_adamm_amsgrad", "hizoo")
# Optax's wrappers carry the state through a cond and a select: the skeleton with ZoAQ's,
# auto_k's and a user's rule state, and ZoAR's state.
WRAPPED = ("zoaq", "zoar", "auto_k", "adaptive_estimator_user_rule")
# The code that touches parameter leaves: the skeleton with and without a buffer (its
# budget rules, auto_k's or a user's, never see a leaf), ZoAR, the chain with weight decay,
# HiZOO's per-leaf Hessian.
LEAF_CODE = ("zoaq", "zoaq_sphere_nohist_zo_adamm", "zoar", "mezo", "hizoo")
# Under x64 (float64 and float16 leaves, int32 counters): the code that touches leaves and
# the rules that keep counters of their own (the variance test's, auto_k's).
X64 = LEAF_CODE + ("statzo_estimator_central", "auto_k")

# d = 9 optimised scalars: float32, bfloat16 and a Python float; the PRNG key leaf is
# carried (the objective reads it), its updates are None. optax.inject_hyperparams
# cannot take key leaves nor rank float16 against bfloat16, so the scanned runs
# (compared with it) use INJECTABLE; keys go through the jitted, donated, checkpointed
# steps of `drive` and the x64 scan, float16 through the x64 scan.
INJECTABLE = {"w": jnp.zeros(6), "h": jnp.ones(2, jnp.bfloat16), "s": 0.25}
PARAMS = {**INJECTABLE, "k": jax.random.key(3)}


def objective(p, flag=False):
    """A polynomial in the float leaves (vmap reproduces it bit for bit), NaN if ``flag``."""
    w = p["w"] - TARGET
    rest = [jnp.asarray(p[name]) for name in ("h", "f", "s") if name in p]
    rest = [x.astype(jnp.promote_types(x.dtype, jnp.float32)) - 0.5 for x in rest]
    value = jnp.sum(SCALE * w**2 * (1 + 0.1 * w**2)) + sum(jnp.sum(x**2) for x in rest)
    if "k" in p:
        value = value + 0.01 * jax.random.key_data(p["k"])[-1].astype(w.dtype)
    return jnp.where(flag, jnp.nan, value)


def host_objective(calls):
    """``objective`` in NumPy behind ``host_oracle``, counting every call in ``calls``.

    Keys cannot cross ``pure_callback``: the host receives the key's data instead.
    """

    def f(p, flag):
        calls.append(1)
        if flag:
            return np.nan
        w = p["w"].astype(np.float64) - TARGET
        rest = sum(np.sum((np.asarray(p[name], np.float64) - 0.5) ** 2)
                   for name in ("h", "s"))
        return np.sum(SCALE * w**2 * (1 + 0.1 * w**2)) + rest + 0.01 * float(p["k"][-1])

    host = zoaq_jax.host_oracle(f)

    def value_fn(p, flag):
        return host({**p, "k": jax.random.key_data(p["k"])}, flag)

    return value_fn


def apply(entry, params, updates):
    """One step: ``params + updates`` (estimators: ``params - 0.05 * estimate``)."""
    if entry.estimator:
        updates = jax.tree.map(lambda u: -0.05 * u, updates)
    return zoaq_jax.apply_updates(params, updates)


def scanned(opt, entry, params, value_fn=objective):
    """``(params, state, updates)`` after ``STEPS`` updates in one ``lax.scan``."""

    def body(carry, _):
        p, s = carry
        u, s = opt.update(None, s, p, value_fn=value_fn, flag=False)
        return (apply(entry, p, u), s), u

    (p, s), us = jax.lax.scan(body, (params, opt.init(params)), length=STEPS)
    return p, s, us


def close(a, b):
    """Equal to float32 rounding (bfloat16/float16 leaves: to one ulp); keys equal."""
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
            np.testing.assert_array_equal(jax.random.key_data(x), jax.random.key_data(y))
            continue
        low = any(d in (x.dtype, y.dtype) for d in (jnp.bfloat16, jnp.float16))
        tol = 1e-2 if low else 1e-3
        chex.assert_trees_all_close(x, y, rtol=tol, atol=tol / 10)


def avals(tree):
    return jax.tree.map(lambda x: (jnp.shape(x), jnp.result_type(x)), tree)


def same_key(a, b):
    np.testing.assert_array_equal(jax.random.key_data(a), jax.random.key_data(b))


@functools.cache
def plain(name):
    entry = REGISTRY[name]
    opt = entry.make(key=0)
    return jax.jit(lambda p: scanned(opt, entry, p))(INJECTABLE), avals(opt.init(INJECTABLE))


@functools.cache
def ORBAX_DIR():  # noqa: N802 - a constant made once, on first use
    import tempfile

    return Path(tempfile.mkdtemp(prefix="zoaq_orbax_"))


def committed(tree):
    """``tree`` on the first device, committed like a jitted step's outputs: a step called
    with uncommitted arrays compiles its one trace a second time."""
    return jax.device_put(tree, jax.devices()[0])


@functools.cache
def drive(name):
    """Steps one entry with a counted host objective, donating the state to one jitted step.

    Main line: two finite steps, a checkpoint after the first, then one step whose every
    evaluation is NaN. Replays: the next update from Flax and pickle checkpoints, and a
    fresh ``init`` after the user's key went through a donated state.
    """
    entry, calls = REGISTRY[name], []
    params = {**PARAMS, "s": jnp.float32(PARAMS["s"])}  # a Python float would retrace once
    chex.clear_trace_counter()  # chex counts traces per code location, across entries
    value_fn = host_objective(calls)
    user_key = jax.random.key(7)
    opt = entry.make(key=user_key)

    @functools.partial(jax.jit, donate_argnums=1)
    @chex.assert_max_traces(n=1)
    def step(params, state, flag):
        u, state = opt.update(None, state, params, value_fn=value_fn, flag=flag)
        return apply(entry, params, u), state, u

    out = {"init": avals(opt.init(params))}
    params = committed(params)
    p1, s1, u1 = step(params, committed(opt.init(params)), False)
    out["first"] = (p1, u1, int(optax.tree.get(s1, "num_queries")))
    out["avals"] = (avals(params), avals(s1), avals(p1), avals(u1))
    flax_bytes = serialization.to_bytes(s1)
    pickled = pickle.dumps(jax.device_get(s1))
    with ocp.StandardCheckpointer() as checkpointer:  # Orbax refuses zero-size arrays
        path = ORBAX_DIR() / name
        checkpointer.save(path, s1)
        checkpointer.wait_until_finished()
        from_orbax = checkpointer.restore(
            path, jax.tree.map(ocp.utils.to_shape_dtype_struct, opt.init(params)))
    p2, s2, u2 = step(p1, s1, False)
    out["queries"] = int(optax.tree.get(s2, "num_queries"))
    out["calls"] = len(calls)
    out["finite"] = jax.device_get((p2, s2, u2))  # s2 is donated below
    p3, s3, u3 = step(p2, s2, True)
    out["nan"] = (p2, p3, s3, u3, int(optax.tree.get(out["finite"][1], "num_nonfinite")))
    template = opt.init(params)
    restored = {
        "flax": serialization.from_bytes(template, flax_bytes),
        "pickle": pickle.loads(pickled),
        "orbax": from_orbax,
    }
    out["replays"] = {kind: step(p1, committed(s), False)
                      for kind, s in restored.items()}
    out["key_data"] = np.asarray(jax.random.key_data(user_key))  # not deleted by donation
    out["again"] = step(params, committed(opt.init(params)), False)
    out["executables"] = step._cache_size()
    return out


@pytest.mark.parametrize("name", REPRESENTATIVES)
def test_state_dtypes_and_shapes_are_stable_in_scan(name):
    """float32, bfloat16 and Python float leaves: the scan carry (params, state) keeps
    its type; updates keep the float leaves' dtypes."""
    (params, state, updates), init = plain(name)
    assert avals(state) == init
    assert avals(params) == avals(INJECTABLE)
    first = jax.tree.map(lambda u: u[0], updates)
    assert avals(first) == avals(INJECTABLE)
    for leaf in ("h", "s"):  # low-precision and Python-float leaves move
        assert np.any(np.asarray(first[leaf], np.float32)), leaf


@pytest.mark.parametrize("name", X64)
def test_state_dtypes_and_shapes_are_stable_under_x64(name):
    with jax.enable_x64(True):
        entry = REGISTRY[name]
        # float64, float16, float32, a zero-size leaf, a Python float and a key.
        params = {"w": jnp.zeros(6, jnp.float64), "h": jnp.ones(2, jnp.float16),
                  "f": jnp.full(1, 2.0, jnp.float32), "e": jnp.zeros((0, 3), jnp.float64),
                  "s": 0.25, "k": jax.random.key(3)}
        opt = entry.make(key=0)
        init = avals(opt.init(params))
        new_params, state, _ = jax.jit(lambda p: scanned(opt, entry, p))(params)
        assert avals(state) == init
        assert avals(new_params) == avals(params)
        same_key(new_params["k"], params["k"])
        assert np.all(np.isfinite(np.asarray(new_params["h"], np.float32)))
        assert np.any(new_params["h"] != params["h"])  # float16 leaves move
        for _, leaf in optax.tree.get_all_with_path(state, "num_queries"):
            assert leaf.dtype == jnp.int32


@pytest.mark.parametrize("name", NAMES)
def test_state_dtypes_and_shapes_are_stable_under_jit(name):
    """float32, bfloat16, float32-scalar and key leaves through the jitted step: the state
    keeps its type, the params theirs, the updates the float leaves' (keys: ``None``)."""
    out = drive(name)
    params, state, new_params, updates = out["avals"]
    assert state == out["init"]
    assert new_params == params
    assert updates == {**params, "k": None}


@pytest.mark.parametrize("name", NAMES)
def test_step_compiles_once(name):
    """Seven calls (new flag values, restored checkpoints, a fresh init) share one trace
    and one executable."""
    assert drive(name)["executables"] == 1  # assert_max_traces(n=1) raises on a 2nd trace


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
    assert u1["k"] is None  # key leaves are carried: no update, the same key
    same_key(p1["k"], PARAMS["k"])
    p, _, u = out["again"]
    chex.assert_trees_all_equal((p, u), (p1, u1))
    assert int(optax.tree.get(out["again"][1], "num_queries")) == queries


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("kind", ["flax", "pickle", "orbax"])
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
        if any(n in jax.tree_util.keystr(path)
               for n in ("last_score", "consistency", "value_estimate")):
            continue  # documented: +-inf scores without a finite response; NaN cosine of 0;
            # NaN value estimate when no finite response was available (run reads it)
        if jnp.issubdtype(leaf.dtype, jnp.floating):
            assert np.all(np.isfinite(np.asarray(leaf, np.float32))), jax.tree_util.keystr(path)
    if entry.estimator:  # no finite response: the estimate is zero
        chex.assert_trees_all_equal(updates, jax.tree.map(jnp.zeros_like, updates))


def _injected(name):
    entry = REGISTRY[name]
    return optax.inject_hyperparams(entry.factory, static_args=entry.static_args)(
        **entry.kwargs, key=0)


@pytest.mark.parametrize("name", REPRESENTATIVES)
def test_inject_hyperparams_equals_the_plain_optimizer(name):
    entry = REGISTRY[name]
    params, state, updates = jax.jit(lambda p: scanned(_injected(name), entry, p))(INJECTABLE)
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
    state = _injected(name).init(INJECTABLE)
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


@pytest.mark.parametrize("name", REPRESENTATIVES)
def test_vmap_over_seeds_equals_unbatched_runs(name):
    """Lane 0 of a vmapped run is the unbatched run with seed 0: counts exactly, floats
    to rounding (XLA may fuse batched arithmetic differently; see docs/design/determinism.md)."""
    entry = REGISTRY[name]
    batched = jax.jit(jax.vmap(lambda seed: scanned(entry.make(key=seed), entry, INJECTABLE)))(
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
    with pytest.raises(ValueError, match="key must be an integer seed"):
        entry.make(key=2**32)  # JAX keeps 32 bits: this would repeat seed 0
    for arg, param in inspect.signature(entry.factory).parameters.items():
        if isinstance(param.default, float):  # every float option must be finite
            for bad in (float("nan"), float("inf")):
                with pytest.raises(ValueError, match=arg):
                    entry.make(**{arg: bad})
    if entry.factory in (zoaq_jax.zoar, zoaq_jax.zoar_estimator) and (
            entry.kwargs.get("difference", "forward") == "forward"):
        with pytest.raises(ValueError, match="n_hist.*its own baseline"):
            entry.make(k=1, n_hist=0)
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


# ----------------------------------------------------------------------------- leaves


@pytest.mark.parametrize("name", NAMES)
def test_complex_integer_and_bool_leaves_are_refused_at_init_by_path(name):
    opt = REGISTRY[name].make(key=0)
    for bad, dtype in [(jnp.ones(2, jnp.complex64), "complex64"),
                       (jnp.array([3, -2]), "int32"), (jnp.array([True]), "bool"),
                       (3, "int32")]:
        with pytest.raises(TypeError, match=rf"params\['deep'\]\[1\] is {dtype}"):
            opt.init({"w": jnp.ones(2), "deep": (jnp.ones(1), bad)})
    with pytest.raises(ValueError, match="no floating-point scalar"):
        opt.init({"e": jnp.zeros((0, 2)), "k": jax.random.key(0)})


@pytest.mark.parametrize("name", NAMES)
def test_refused_objectives_fail_at_the_first_update(name):
    """Low-precision losses and a data parameter named ``value`` (update()'s keyword)."""
    opt = REGISTRY[name].make(key=0)
    params = jnp.ones(3)
    state = opt.init(params)
    for dtype in (jnp.bfloat16, jnp.float16):
        with pytest.raises(ValueError, match=f"value_fn returns {jnp.dtype(dtype).name}"):
            opt.update(None, state, params, value_fn=lambda x, d=dtype: jnp.sum(x**2).astype(d))

    def with_value(x, value):
        return jnp.sum((x - value) ** 2)

    with pytest.raises(TypeError, match="named 'value'"):
        opt.update(None, state, params, value_fn=with_value, value=jnp.float32(1.0))


@pytest.mark.parametrize("name", NAMES)
def test_a_zero_stability_term_is_refused(name):
    entry = REGISTRY[name]
    if not _accepts(entry, "eps") or entry.kwargs.get("backbone") == "sgd":
        pytest.skip("no stability term in use")
    with pytest.raises(ValueError, match="eps must be a finite number > 0"):
        entry.make(eps=0.0)


@pytest.mark.parametrize("name", LEAF_CODE)
def test_unjitted_update_takes_a_python_float_leaf(name):
    """Un-jitted: the Python float reaches the arithmetic as a float, not an array."""
    entry = REGISTRY[name]
    opt = entry.make(key=0)
    params = {"w": jnp.zeros(6), "s": 0.25}
    u, _ = opt.update(None, opt.init(params), params,
                      value_fn=lambda p: jnp.sum((p["w"] - TARGET) ** 2) + (p["s"] - 1.0) ** 2)
    assert u["s"].shape == () and u["s"].dtype == jnp.float32
    assert float(apply(entry, params, u)["s"]) > 0.25  # towards 1


@pytest.mark.parametrize("name", ("zo_sgd", "radazo", "zoaq"))
def test_float16_estimates_saturate_instead_of_overflowing(name):
    """The objective sees float32 points; estimates above 65504 are cast to +-65504."""
    entry = REGISTRY[name]
    opt = entry.make(key=0)
    x = jnp.full(4, 30.0, jnp.float16)  # gradient 4 x^3 = 108000 > float16's 65504
    u, _ = jax.jit(lambda s, p: opt.update(None, s, p, value_fn=lambda y: jnp.sum(y**4)))(
        opt.init(x), x)
    assert u.dtype == jnp.float16 and np.all(np.isfinite(np.asarray(u, np.float32)))
    if name == "zo_sgd":  # the raw estimate, cast: saturated somewhere, never inf
        assert np.max(np.abs(np.asarray(u, np.float32))) == 1e-2 * 65504.0 or \
            np.all(np.abs(np.asarray(u, np.float32)) < 1e-2 * 65504.0)


# ----------------------------------------------------------------------------- runs

# zoaq_jax.run over the aliases (each a program of its own, so one run per alias): a
# host-counted objective with a key leaf, a budget that is no multiple of any step's
# cost, logging every 2 steps and a progress callback.
ALIASES = ("zoaq", "radazo", "zo_adamm_amsgrad", "zo_sgd", "mezo", "zoar",
           "statzo_nondividing", "auto_k", "hizoo")
BUDGET = 23


@functools.cache
def budgeted_run(name):
    calls, seen = [], []
    params = {**PARAMS, "s": jnp.float32(PARAMS["s"])}
    out = zoaq_jax.run(REGISTRY[name].make(key=1), host_objective(calls), params, 12,
                       log_every=2, max_queries=BUDGET, flag=False,
                       progress=lambda step, n: seen.append(step))
    return out, len(calls), seen


@pytest.mark.parametrize("name", ALIASES)
def test_a_budget_counts_every_call_logging_included(name):
    (params, state, trace), calls, seen = budgeted_run(name)
    used = int(trace.num_queries[-1]) + int(trace.num_log_evaluations[-1])
    assert calls == used <= BUDGET  # the estimator's calls and the logging evaluations
    assert zoaq_jax.STATUSES[int(trace.status[-1])] == "budget_spent"
    assert np.isfinite(float(trace.value[-1]))  # a call was kept back for the last value
    assert seen == list(range(0, 13, 2))


@pytest.mark.parametrize("name", ALIASES)
def test_a_budgeted_run_carries_key_leaves(name):
    (params, _, trace), _, _ = budgeted_run(name)
    same_key(params["k"], PARAMS["k"])
    same_key(trace.best_params["k"], PARAMS["k"])


def bowl(x):
    """A separable quadratic in one array, for the runs on plain arrays."""
    return jnp.sum(SCALE * (x - TARGET) ** 2)


@pytest.mark.parametrize("name", NAMES)
def test_a_state_of_another_configuration_is_refused_by_run(name):
    """Another optimizer's state (another structure), and the state of larger sizes
    where they fix the state's shapes (a fixed-budget state fits any ``k``)."""
    entry, x = REGISTRY[name], jnp.zeros(6)
    opt = entry.make(key=0)
    stranger = REGISTRY["zoaq" if "zoar" in name else "zoar"].make(key=0).init(x)
    with pytest.raises(ValueError, match=r"init_state\S*: the state's structure differs"):
        zoaq_jax.run(opt, bowl, x, 1, init_state=stranger)
    sizes = {arg: entry.kwargs.get(arg, 2) + 2 for arg in entry.static_args
             if arg not in ("k_min", "k_step")}
    larger = entry.make(key=0, **sizes).init(x)
    if avals(larger) != avals(opt.init(x)):
        with pytest.raises(ValueError, match=r"init_state\S*: .*(another configuration|"
                                             r"structure differs)"):
            zoaq_jax.run(opt, bowl, x, 1, init_state=larger)


# Runs that leave the objective's domain (inf outside: central pairs give inf - inf,
# forward centres inf): the skeleton's forward centre, ZoAR's forward values, the
# fixed chain, auto_k's rule, HiZOO's centre.
DOMAIN = ("zoaq_norm_forward", "zoar", "mezo", "auto_k", "hizoo")


def outside_is_infinite(x):
    return jnp.where(jnp.sum(x) < 0.5, jnp.sum((x - 2.0) ** 2), jnp.inf)


@pytest.mark.parametrize("name", DOMAIN)
def test_a_run_leaving_the_domain_stops_nonfinite_and_warns(name):
    with pytest.warns(RuntimeWarning, match="nonfinite"):
        params, _, trace = zoaq_jax.run(REGISTRY[name].make(key=0),
                                        outside_is_infinite, jnp.zeros(6), 60,
                                        log_every=60)
    assert zoaq_jax.STATUSES[int(trace.status[-1])] == "nonfinite"
    assert float(outside_is_infinite(trace.best_params)) <= 24.0  # a finite best iterate


@pytest.mark.parametrize("name", ("zoaq", "zoar", "hizoo"))
def test_a_resumed_run_equals_the_uninterrupted_one(name):
    """8 + 8 steps through the state equal 16 (one program for both halves; the two
    programs may round the running sums differently in the last bit: counts exactly)."""
    opt, x = REGISTRY[name].make(key=0), jnp.zeros(6)
    whole = zoaq_jax.run(opt, bowl, x, 16, log_every=8, init_state=opt.init(x))
    p, s, first = zoaq_jax.run(opt, bowl, x, 8, log_every=8, init_state=opt.init(x))
    p, s, second = zoaq_jax.run(opt, bowl, p, 8, log_every=8, init_state=s)
    for a, b in zip(jax.tree.leaves((p, s)), jax.tree.leaves(whole[:2])):
        if not jnp.issubdtype(a.dtype, jnp.floating):
            np.testing.assert_array_equal(a, b)
    close((p, s), whole[:2])
    assert first.status[-1] == second.status[-1] == whole[2].status[-1]
    assert zoaq_jax.STATUSES[int(whole[2].status[-1])] == "finished"


# ----------------------------------------------------------------------------- wrappers


@pytest.mark.parametrize("name", WRAPPED)
def test_multisteps_and_apply_if_finite_around_the_optimizer(name):
    """Optax's wrappers around a whole optimizer (updates passed as zeros, since the
    wrappers accumulate or check them; key leaves cannot go through them: Optax's
    wrappers build zeros like every leaf)."""
    entry = REGISTRY[name]
    params = {k: PARAMS[k] for k in ("w", "h")}
    zeros = jax.tree.map(jnp.zeros_like, params)
    opt = entry.make(key=0)

    def objective_plain(p, flag):
        return objective({**p, "s": 0.5, "k": jax.random.key(0)}, flag)

    def steps(tx, flags):
        def body(carry, flag):
            p, s = carry
            u, s = tx.update(zeros, s, p, value_fn=objective_plain, flag=flag)
            return (apply(entry, p, u), s), (u, optax.tree.get(s, "num_queries"))

        _, (updates, queries) = jax.lax.scan(body, (params, tx.init(params)),
                                             jnp.asarray(flags))
        return queries, updates

    nan_second = [False, True, False]
    q_plain, u_plain = jax.jit(lambda: steps(opt, nan_second))()
    q_multi, u_multi = jax.jit(lambda: steps(optax.MultiSteps(opt, 2), [False, False]))()
    first = jax.tree.map(lambda u: u[0], u_plain)
    # The first call only accumulates (zeros, no query); the second is the first step.
    chex.assert_trees_all_equal(jax.tree.map(lambda u: u[0], u_multi), zeros)
    close(jax.tree.map(lambda u: u[1], u_multi), first)  # compiled inside a cond: rounding
    np.testing.assert_array_equal(q_multi, [0, q_plain[0]])  # num_queries after each call
    # apply_if_finite: the all-NaN second step already gives finite (zero) updates.
    q_guard, u_guard = jax.jit(lambda: steps(optax.apply_if_finite(opt, 2), nan_second))()
    chex.assert_trees_all_equal(u_guard, u_plain)
    np.testing.assert_array_equal(q_guard, q_plain)


# ----------------------------------------------------------------------------- meshes

_MESH_SCRIPT = textwrap.dedent("""
    import jax, jax.numpy as jnp, numpy as np, zoaq_jax, sys
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
    sys.path.insert(0, "tests/library")
    from registry import REGISTRY, zoaq_chain
    assert len(jax.devices()) == 8
    params = {"w": jnp.linspace(-1, 1, 64), "m": jnp.ones((8, 16))}
    MAKERS = {"zoaq": lambda: zoaq_chain(**REGISTRY["zoaq"].kwargs, directions="sphere",
                                         key=1)}  # the buffer and sphere normalisation

    def f(p):
        return jnp.sum(p["w"] ** 2 * (1 + p["w"] ** 2)) + jnp.sum((p["m"] - 0.5) ** 2)

    def steps(opt, p):
        def body(carry, _):
            p, s = carry
            u, s = opt.update(None, s, p, value_fn=f)
            return (zoaq_jax.apply_updates(p, jax.tree.map(lambda x: scale * x, u)), s), u
        return jax.lax.scan(body, (p, opt.init(p)), length=3)[0]

    for name in sys.argv[1:]:
        opt = MAKERS[name]() if name in MAKERS else REGISTRY[name].make(key=1)
        scale = -1e-3 if REGISTRY[name].estimator else 1.0  # raw estimates at d = 192
        (ref_p, ref_s) = jax.jit(lambda p: steps(opt, p))(params)
        for kind in (AxisType.Explicit, AxisType.Auto):
            mesh = jax.make_mesh((8,), ("x",), axis_types=(kind,))
            sharded = {"w": jax.device_put(params["w"], NamedSharding(mesh, P("x"))),
                       "m": jax.device_put(params["m"], NamedSharding(mesh, P("x", None)))}
            out_p, out_s = jax.jit(lambda p: steps(opt, p))(sharded)
            assert len(out_p["w"].sharding.device_set) == 8, (name, kind)
            for a, b in zip(jax.tree.leaves(out_s), jax.tree.leaves(ref_s)):
                if not jnp.issubdtype(a.dtype, jnp.floating):
                    np.testing.assert_array_equal(a, b)
            jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4),
                         out_p, ref_p)
            print(name, kind, "ok")
""")


def test_both_mesh_axis_types_give_the_unsharded_result():
    """``jax.make_mesh`` (explicit axes, JAX's default) and Auto axes, on 8 fake CPUs.

    In its own process: the device count is read when JAX starts. Representatives of the
    code that touches whole leaves: the skeleton with a buffer and sphere directions (the
    expansion's slice updates, the history, the retained sums, the cross-leaf norm; a
    step without a buffer runs a subset of this code), its variance test, ZoAR's step.
    """
    names = ["zoaq", "statzo_estimator_central", "zoar"]
    import os
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
           "XLA_FLAGS": os.environ["XLA_FLAGS"],  # tests/conftest.py's: 8 devices, FAST
           "JAX_PLATFORMS": "cpu"}
    root = Path(__file__).resolve().parents[2]  # this checkout's zoaq_jax, not another
    done = subprocess.run([sys.executable, "-c", _MESH_SCRIPT, *names], env=env, cwd=root,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count(" ok") == 2 * len(names)
