"""Directions split over devices (``mesh=``) equal the single-device step.

Runs on the eight fake CPU devices of ``tests/conftest.py``. Small ``d`` and two steps per
configuration: each configuration is one compiled program.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import zoaq_jax

# Two leaves (a vector and a matrix) and a data keyword; K = 8 splits over 1, 2, 4, 8.
PARAMS = {"w": jnp.linspace(-1.0, 1.0, 24), "m": jnp.ones((3, 4))}
K = 8


def objective(x, a):
    return 0.5 * jnp.sum((x["w"] - a) ** 2) + jnp.sum(jnp.cos(x["m"]) * x["m"])


def mesh_of(shape):
    """A mesh of the first devices: ``n`` on one axis, or a tuple (several axes)."""
    shape = shape if isinstance(shape, tuple) else (shape,)
    names = ("directions", "more")[:len(shape)]
    return jax.make_mesh(shape, names, devices=jax.devices()[:int(np.prod(shape))])


def two_steps(est, mesh=None):
    """Two estimator steps with new data each, one jitted function; returns the estimates,
    the final state and the jit's cache size."""
    update = jax.jit(lambda s, p, a: est.update(None, s, p, value_fn=objective, a=a))
    state, params = est.init(PARAMS), PARAMS
    if mesh is not None:
        state, params = zoaq_jax.replicate((state, params), mesh)
    estimates = []
    for a in (0.3, -0.2):
        g, state = update(state, params, jnp.full(24, a))
        estimates.append(g)
    return estimates, state, update._cache_size()


def relative_error(a, b):
    return max(float(jnp.max(jnp.abs(x - y)) / jnp.max(jnp.abs(y)))
               for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


@pytest.fixture(scope="module")
def single():
    assert len(jax.devices()) >= 8, "tests/conftest.py sets 8 fake CPU devices"
    return two_steps(zoaq_jax.fixed_estimator(k=K, key=3))


@pytest.mark.parametrize("shape,combine", [(1, "psum"), (2, "gather"), ((2, 2), "psum"),
                                           (8, "gather")])
def test_split_equals_single_device_and_compiles_once(single, shape, combine):
    """Estimates to 1e-6 relative (bit for bit on one device with psum), counts exact,
    one compilation for two steps with new data (central differences; forward ones in
    the next test). A 2-D mesh splits over all its devices."""
    mesh = mesh_of(shape)
    n = mesh.size
    est = zoaq_jax.fixed_estimator(k=K, key=3, mesh=mesh, combine=combine)
    estimates, state, compiles = two_steps(est, mesh)
    ref_estimates, ref_state, _ = single
    assert compiles == 1
    for g, ref in zip(estimates, ref_estimates):
        if n == 1:
            jax.tree.map(np.testing.assert_array_equal, g, ref)
        assert relative_error(g, ref) < 1e-6
    for name in ("step", "num_queries", "num_nonfinite", "num_zero_responses", "last_k"):
        assert optax.tree.get(state, name) == optax.tree.get(ref_state, name), name
    assert optax.tree.get(state, "num_queries") == 2 * 2 * K
    np.testing.assert_allclose(optax.tree.get(state, "value_estimate"),
                               optax.tree.get(ref_state, "value_estimate"), rtol=1e-6)
    g = estimates[0]
    assert len(g["w"].sharding.device_set) == n  # replicated on the mesh


@pytest.fixture
def drawn_batches(monkeypatch):
    """The sizes of the direction batches drawn while a test traces (a list it fills)."""
    from zoaq_jax._src import directions as dirs

    batches = []
    sample_many = dirs.sample_many

    def counting(kind, keys, like):
        batches.append(keys.shape[0])
        return sample_many(kind, keys, like)

    monkeypatch.setattr(dirs, "sample_many", counting)
    return batches


@pytest.mark.parametrize("combine, drawn", [("psum", [K // 4]), ("gather", [K])])
def test_directions_drawn_per_device(combine, drawn, drawn_batches):
    """Each device draws its ``K / n`` directions (psum), or all ``K`` once and evaluates
    its slice of them (gather): no direction is drawn twice in a step."""
    mesh = mesh_of(4)
    est = zoaq_jax.fixed_estimator(k=K, key=3, mesh=mesh, combine=combine)
    state, params = zoaq_jax.replicate((est.init(PARAMS), PARAMS), mesh)
    jax.eval_shape(lambda s, p: est.update(None, s, p, value_fn=objective, a=PARAMS["w"]),
                   state, params)  # traces the per-device program once
    assert drawn_batches == drawn


@pytest.mark.parametrize("combine", ["psum", "gather"])
def test_over_the_batch_limit_devices_draw_in_chunks(single, combine, drawn_batches,
                                                    monkeypatch):
    """With room for one direction at a time, each device draws its K / n directions one
    by one (gather then regenerates all K one by one for the sum): no batch of more than
    one direction, and the estimates agree with one device's to float32 rounding."""
    from zoaq_jax._src import directions as dirs

    monkeypatch.setattr(dirs, "_BATCH_LIMIT", dirs.dimension(PARAMS))
    estimates, state, _ = two_steps(
        zoaq_jax.fixed_estimator(k=K, key=3, mesh=mesh_of(2), combine=combine), mesh_of(2))
    ref_estimates, ref_state, _ = single
    assert drawn_batches and max(drawn_batches) == 1
    for g, ref in zip(estimates, ref_estimates):
        assert relative_error(g, ref) < 1e-6
    assert optax.tree.get(state, "num_queries") == optax.tree.get(ref_state, "num_queries")


def test_alias_under_vmap_over_seeds_and_query_limit_equals_single_device():
    """``zo_sgd(difference="forward", mesh=...)`` (the default ``"psum"``) run by
    :func:`zoaq_jax.run` for three seeds under ``vmap``, with a query limit that stops it
    after 3 of 4 steps: same queries and status as one device, iterates to 1e-4. From the
    second step on the two runs query points that differ in their last bits, and a
    difference quotient amplifies the objective's rounding by ``1 / mu`` (design notes,
    "Determinism under vmap and sharding"); one step's estimate at the same point
    agrees to 1e-6 (the test above)."""
    def runs(opt):
        def one(seed):
            return zoaq_jax.run(opt, objective, PARAMS, 4, seed=seed, log_values=False,
                                max_queries=3 * (K + 1), a=jnp.zeros(24))
        return jax.jit(jax.vmap(one))(jnp.arange(3))

    ref_params, _, ref_trace = runs(zoaq_jax.zo_sgd(0.1, k=K, difference="forward"))
    out_params, _, trace = runs(zoaq_jax.zo_sgd(0.1, k=K, difference="forward",
                                                mesh=mesh_of(8)))
    np.testing.assert_array_equal(trace.num_queries, ref_trace.num_queries)
    np.testing.assert_array_equal(trace.status, ref_trace.status)
    assert int(trace.num_queries[0, -1]) == 3 * (K + 1)
    assert relative_error(out_params, ref_params) < 1e-4


def test_unsupported_settings_fail_at_construction():
    mesh = mesh_of(8)
    with pytest.raises(ValueError, match="multiple of 8"):
        zoaq_jax.radazo(1e-3, k=12, mesh=mesh)
    with pytest.raises(ValueError, match="fixed-budget estimators only.*k_min=1 != k_max=8"):
        zoaq_jax.adaptive_estimator(zoaq_jax.gates.accept(), zoaq_jax.budgets.constant(8),
                                    grid=zoaq_jax.Grid(1, 8), mesh=mesh)
    with pytest.raises(ValueError, match="n_hist=4"):
        zoaq_jax.adaptive_estimator(zoaq_jax.gates.accept(), zoaq_jax.budgets.constant(8),
                                    zoaq_jax.retention.fifo(4), grid=zoaq_jax.Grid(8, 8),
                                    mesh=mesh)
    with pytest.raises(TypeError, match="jax.sharding.Mesh"):
        zoaq_jax.mezo(1e-3, k=8, mesh=jax.devices())
    with pytest.raises(ValueError, match="combine"):
        zoaq_jax.fixed_estimator(k=8, mesh=mesh, combine="allreduce")
