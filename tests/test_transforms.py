"""Transformations: jit (compile once), vmap over seeds, sharding, PyTrees, Optax chains."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import zoaq_jax
from helpers import diag, wavy

D = 16


def loss_with_data(params, batch):
    """A PyTree objective with data: params = {'w': [D], 'b': [2, 4]}."""
    pred = batch["x"] @ params["w"] + jnp.sum(params["b"])
    return jnp.mean((pred - batch["y"]) ** 2) + 0.1 * jnp.sum(params["b"] ** 2)


def _batch(seed):
    x = jax.random.normal(jax.random.key(seed), (32, D))
    return {"x": x, "y": x @ jnp.linspace(-1, 1, D)}


PARAMS = {"w": jnp.zeros(D), "b": jnp.ones((2, 4))}


def separable(params, data):
    """A polynomial objective with data and 1-D and 2-D leaves.

    It has no matrix products and no transcendental functions, whose XLA kernels may
    round differently in batched and unbatched programs (finite differences amplify
    such last-bit differences by 1/mu); on it vmap and sharding must reproduce per-seed
    runs bit for bit.
    """
    w = params["w"] - data["target"]
    return jnp.sum(data["scale"] * w**2 * (1 + 0.1 * w**2)) + jnp.sum((params["b"] - 0.5) ** 2)


DATA = {"target": jnp.linspace(-1.0, 1.0, D), "scale": jnp.linspace(0.5, 2.0, D)}

OPTIMIZERS = {
    "zoaq": lambda key: zoaq_jax.zoaq(1e-2, k_max=6, key=key),
    "zoaq_forward": lambda key: zoaq_jax.zoaq(1e-2, k_max=4, difference="forward", key=key),
    "radazo": lambda key: zoaq_jax.radazo(1e-2, k=3, key=key),
    "zo_adamm": lambda key: zoaq_jax.zo_adamm(1e-2, k=3, key=key),
    "zo_sgd": lambda key: zoaq_jax.zo_sgd(1e-3, k=2, key=key),
    "mezo": lambda key: zoaq_jax.mezo(1e-3, k=2, weight_decay=1e-3, key=key),
    "zoar": lambda key: zoaq_jax.zoar(1e-2, k=2, n_hist=3, key=key),
    "statzo": lambda key: zoaq_jax.statzo(1e-2, k_max=4, key=key),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_step_compiles_once_and_reports_diagnostics(name):
    opt = OPTIMIZERS[name](0)

    @jax.jit
    def step(params, state, batch):
        updates, state = opt.update(None, state, params, value_fn=loss_with_data, batch=batch)
        return optax.apply_updates(params, updates), state

    params, state = PARAMS, opt.init(PARAMS)
    values, ks = [], []
    for t in range(6):
        params, state = step(params, state, _batch(t))  # new data values every step
        values.append(float(loss_with_data(params, _batch(0))))
        ks.append(diag(state, "last_k"))
    assert step._cache_size() == 1
    assert diag(state, "num_queries") > 0
    assert all(np.isfinite(values))
    assert jax.tree.map(lambda p: p.dtype, params) == jax.tree.map(lambda p: p.dtype, PARAMS)


def test_adaptive_budgets_do_not_recompile():
    opt = zoaq_jax.zoaq(1e-2, k_min=1, k_max=8, key=0)
    step = jax.jit(lambda p, s: opt.update(None, s, p, value_fn=wavy))
    params, state, ks = jnp.ones(D), opt.init(jnp.ones(D)), set()
    for _ in range(25):
        u, state = step(params, state)
        params = params + u
        ks.add(diag(state, "last_k"))
    assert len(ks) > 1 and step._cache_size() == 1


def _traces(estimator):
    """How many times lowering one step of ``estimator`` traces the objective."""
    count = [0]

    def f(x):
        count[0] += 1
        return jnp.sum(x**2)

    params = jnp.ones(D)
    state = estimator.init(params)
    jax.jit(lambda p, s: estimator.update(None, s, p, value_fn=f)).lower(params, state)
    return count[0]


@pytest.mark.parametrize("difference", ["central", "forward"])
def test_adaptive_step_traces_the_objective_once_per_chunk_size(difference):
    """With equal chunks (k_min = k_step) the expansion loop traces the objective once.

    A fixed-K step traces it for its validation, its centre value (forward differences)
    and its one batch of directions; ZoAQ and StatZO with k_min = k_step trace no more,
    so large models compile once. With k_min != k_step the first chunk is a second shape.
    """
    fixed = _traces(zoaq_jax.fixed_estimator(k=3, difference=difference, key=0))
    for estimator, extra in [
        (zoaq_jax.zoaq_estimator(k_min=1, k_max=4, difference=difference, key=0), 0),
        (zoaq_jax.zoaq_estimator(k_min=2, k_max=6, k_step=2, difference=difference, key=0), 0),
        (zoaq_jax.zoaq_estimator(k_min=2, k_max=4, difference=difference, key=0), 1),
        (zoaq_jax.zoaq_estimator(k_min=3, k_max=3, difference=difference, key=0), 0),
        (zoaq_jax.statzo_estimator(k_min=2, k_max=6, k_step=2, difference=difference), 0),
        (zoaq_jax.statzo_estimator(k_min=2, k_max=6, difference=difference), 1),
    ]:
        assert _traces(estimator) == fixed + extra


ESTIMATORS = {
    "zoaq": lambda key: zoaq_jax.zoaq_estimator(k_max=6, key=key),
    "zoaq_forward": lambda key: zoaq_jax.zoaq_estimator(k_max=4, difference="forward", key=key),
    "statzo": lambda key: zoaq_jax.statzo_estimator(k_max=4, key=key),
    "zoar": lambda key: zoaq_jax.zoar_estimator(k=2, n_hist=3, key=key),
}


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_vmap_over_seeds_equals_per_seed_estimates(name):
    """Each lane of a vmapped estimator is its seed's estimator.

    Keys, counts, budgets and buffers must match exactly. Floats match to rounding:
    XLA may compile the batched objective differently (FMA contraction, vectorised
    transcendental kernels), and finite differences amplify a last-bit difference by
    1/mu, so bitwise equality of iterates is not a property JAX offers.
    """
    def one(seed):
        est = ESTIMATORS[name](seed)

        def step(carry, _):
            params, state = carry
            g, state = est.update(None, state, params, value_fn=separable, data=DATA)
            return (jax.tree.map(lambda p, u: p - 0.05 * u, params, g), state), g

        (_, state), estimates = jax.lax.scan(step, (PARAMS, est.init(PARAMS)), length=3)
        return estimates, state

    batched = jax.jit(jax.vmap(one))(jnp.arange(3))
    one_jit = jax.jit(one)
    for i in (0, 2):
        single = one_jit(jnp.int32(i))
        lane = jax.tree.map(lambda a: a[i], batched)
        jax.tree.map(np.testing.assert_array_equal, lane[1].ledger, single[1].ledger)
        if hasattr(single[1], "history"):
            h, hs = lane[1].history, single[1].history
            for field in ("index", "steps", "head", "size"):
                np.testing.assert_array_equal(getattr(h, field), getattr(hs, field))
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4),
                     lane, single)
    assert not np.array_equal(batched[0]["w"][0], batched[0]["w"][2])  # seeds matter


def test_vmapped_runs_make_the_same_decisions_as_per_seed_runs():
    def one(seed):
        return zoaq_jax.run(OPTIMIZERS["zoaq"](seed), wavy, jnp.ones(D), 40, log_every=10)

    batched = jax.jit(jax.vmap(one))(jnp.arange(3))
    one_jit = jax.jit(one)
    for i in (0, 2):
        single = one_jit(jnp.int32(i))
        np.testing.assert_array_equal(batched[2].num_queries[i], single[2].num_queries)
        np.testing.assert_array_equal(batched[2].last_k[i], single[2].last_k)
        np.testing.assert_allclose(batched[0][i], single[0], rtol=1e-3, atol=1e-4)


def test_sharded_params_give_the_unsharded_result():
    assert len(jax.devices()) == 8, "tests/conftest.py requests 8 fake CPU devices"
    mesh = Mesh(np.array(jax.devices()), ("x",))
    params = {"w": jnp.linspace(-1, 1, 64), "m": jnp.ones((8, 16))}

    def f(p):
        return jnp.sum(p["w"] ** 2 * (1 + p["w"] ** 2)) + jnp.sum((p["m"] - 0.5) ** 2)

    opt = zoaq_jax.zoaq(1e-2, k_max=5, n_hist=4, key=1)
    run = jax.jit(lambda p: zoaq_jax.run(opt, f, p, 20, log_every=5))
    sharded = {"w": jax.device_put(params["w"], NamedSharding(mesh, P("x"))),
               "m": jax.device_put(params["m"], NamedSharding(mesh, P("x", None)))}
    out_s, out_u = run(sharded), run(params)
    assert len(out_s[0]["w"].sharding.device_set) == 8
    np.testing.assert_array_equal(out_s[2].num_queries, out_u[2].num_queries)
    np.testing.assert_array_equal(out_s[2].last_k, out_u[2].last_k)
    # Cross-device sums add partial sums in another order: the objective's rounding,
    # amplified by 1/mu in the responses, is the only difference.
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4),
                 out_s[0], out_u[0])


def test_mixed_pytree_with_bf16_leaf_keeps_dtypes():
    params = {"w": jnp.ones((3, 4)), "h": jnp.ones(5, jnp.bfloat16), "s": jnp.zeros(())}

    def f(p):
        return (jnp.sum(p["w"] ** 2) + jnp.sum(p["h"].astype(jnp.float32) ** 2)
                + (p["s"] - 1.0) ** 2)

    opt = zoaq_jax.zoaq(5e-2, k_max=4, mu=1e-2, key=0)
    out, state, trace = zoaq_jax.run(opt, f, params, 200, log_every=100)
    assert jax.tree.map(lambda x: (x.dtype, x.shape), out) == jax.tree.map(
        lambda x: (x.dtype, x.shape), params)
    assert float(trace.value[-1]) < 0.5 * float(trace.value[0])


def test_chain_with_optax_clip_and_injected_learning_rate():
    factory = optax.inject_hyperparams(
        zoaq_jax.zoaq, static_args=("k_min", "k_max", "k_step", "n_hist"))
    opt = optax.chain(optax.clip_by_global_norm(1.0), factory(learning_rate=1e-2, k_max=4))
    step = jax.jit(lambda p, s: opt.update(None, s, p, value_fn=wavy))
    params = jnp.ones(D)
    state = opt.init(params)
    for _ in range(5):
        u, state = step(params, state)
        params = params + u
    assert diag(state, "num_queries") > 0
    state = optax.tree.set(state, learning_rate=jnp.float32(0.0))  # frozen by the schedule
    u, state = step(params, state)
    np.testing.assert_array_equal(u, jnp.zeros(D))
    assert step._cache_size() == 1


def test_chain_with_backtracking_linesearch_decreases_the_objective():
    """ZO estimate as the direction, Optax's Armijo line search picks the step.

    The line search needs the current value and a slope proxy: the caller passes its
    own f(x) (forward differences reuse it as the centre value) and ZoAQ's EMA as
    ``grad``, so the slope is -<g, m>, negative exactly when the gate's cosine is
    positive. Where a search runs out of backtracking steps Optax keeps its last step,
    which may increase f; the objective is bounded below so that such a step stays small.
    """

    def coercive(x):
        return wavy(x) + 0.1 * jnp.sum(x**4)

    opt = optax.chain(
        zoaq_jax.zoaq_estimator(k_max=6, difference="forward", key=0),
        optax.scale(-1.0),
        optax.scale_by_backtracking_linesearch(max_backtracking_steps=10, store_grad=False),
    )

    @jax.jit
    def step(params, state):
        value = coercive(params)
        updates, state = opt.update(None, state, params, value=value,
                                    grad=optax.tree.get(state, "ema"), value_fn=coercive)
        return optax.apply_updates(params, updates), state

    params = 0.5 * jnp.ones(D)
    state = opt.init(params)
    values, armijo = [float(coercive(params))], []
    for _ in range(40):
        params, state = step(params, state)
        values.append(float(coercive(params)))
        armijo.append(float(optax.tree.get(state, "decrease_error")) <= 0)
    assert values[-1] < values[0] - 10.0  # from 10.0 to about -10.5 (6 keys: -5.7 to -12.5)
    assert sum(armijo) >= 30  # the slope proxy is a descent direction most of the time
    # Where the Armijo condition held, the objective did not increase.
    assert all(b <= a + 1e-4 for a, b, ok in zip(values, values[1:], armijo) if ok)


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_state_can_be_donated(name):
    """No two state leaves share a buffer, so ``donate_argnums`` works."""
    opt = OPTIMIZERS[name](0)
    step = jax.jit(lambda s, p: opt.update(None, s, p, value_fn=separable, data=DATA)[1],
                   donate_argnums=0)
    state = opt.init(PARAMS)
    state = step(state, PARAMS)
    state = step(state, PARAMS)
    assert diag(state, "num_queries") > 0


@pytest.mark.parametrize("difference", ["central", "forward"])
def test_float64_objectives_keep_their_precision(difference):
    """Differences are taken in float64 for a float64 objective: a large constant offset
    (1e4, whose float32 spacing exceeds the differences at mu = 1e-4) changes nothing."""
    with jax.enable_x64(True):
        x = jnp.linspace(-1.0, 1.0, 5)
        est = zoaq_jax.fixed_estimator(k=4, mu=1e-4, difference=difference, key=0)
        g = [est.update(None, est.init(x), x, value_fn=lambda p, c=c: c + jnp.sum(p**2))[0]
             for c in (0.0, 1e4)]
        assert g[0].dtype == jnp.float64
        np.testing.assert_allclose(g[1], g[0], rtol=1e-5, atol=1e-6)
        assert float(jnp.max(jnp.abs(g[0]))) > 0.1
