"""Transformations: jit, vmap, sharding, PyTrees, dtypes, Optax chains and wrappers.

The per-optimizer properties (compile once, donation, vmap over seeds, ...) are in
tests/library/test_properties.py.
"""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import zoaq_jax
from helpers import diag, wavy

D = 16


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


def test_vmapped_runs_make_the_same_decisions_as_per_seed_runs():
    def one(seed):
        return zoaq_jax.run(zoaq_jax.zoaq(1e-2, k_max=6, key=seed), wavy, jnp.ones(D), 40, log_every=10)

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
    """Clipping goes after the estimator (before it, it would receive ``updates=None``);
    ``inject_hyperparams`` of a :func:`zoaq_jax.chain` factory works like ``optax.chain``."""
    factory = optax.inject_hyperparams(
        zoaq_jax.zoaq_estimator, static_args=("k_min", "k_max", "k_step"))
    opt = optax.inject_hyperparams(
        lambda learning_rate: zoaq_jax.chain(
            factory(k_max=4, key=0), optax.clip_by_global_norm(1e-3),
            optax.scale_by_learning_rate(learning_rate)))(learning_rate=1.0)
    step = jax.jit(lambda p, s: opt.update(None, s, p, value_fn=wavy))
    params = jnp.ones(D)
    state = opt.init(params)
    queries = 0
    for _ in range(5):
        u, state = step(params, state)
        assert float(optax.tree.norm(u)) == pytest.approx(1e-3, rel=1e-4)  # clipped
        queries += 2 * diag(state, "last_k")  # central differences
        params = params + u
    assert diag(state, "num_queries") == queries
    state = optax.tree.set(state, learning_rate=jnp.float32(0.0))  # frozen by the schedule
    u, state = step(params, state)
    np.testing.assert_array_equal(u, jnp.zeros(D))
    assert step._cache_size() == 1


@pytest.mark.parametrize("misplaced, position, named", [
    ([optax.clip_by_global_norm(1.0)], 1, r"transformation 0 \(clip_by_global_norm\)"),
    ([optax.add_decayed_weights(1e-3), optax.scale(2.0)], 2,
     r"transformation 0 \(add_decayed_weights\), 1 \(scale\)"),
    ([zoaq_jax.fixed_estimator(k=2)], 1, r"transformation 0 \(adaptive_estimator\)"),
])
@pytest.mark.parametrize("led_by", ["estimator", "alias"])
def test_chain_refuses_a_transformation_before_the_estimator(misplaced, position, named,
                                                              led_by):
    """Anything before an estimator (which ignores its incoming updates) is refused at
    construction, naming its position, the estimator's and the right order; an alias
    is an estimator-led chain, so it cannot be placed after a clip either."""
    estimator = zoaq_jax.zoar_estimator(k=2) if led_by == "estimator" else zoaq_jax.zoar(1e-2)
    with pytest.raises(ValueError, match=rf"{named} is placed before the estimator at "
                                         rf"position {position}.*Put the estimator first"):
        zoaq_jax.chain(*misplaced, estimator, optax.scale_by_learning_rate(1e-2))
    with pytest.raises(TypeError, match="argument 1 is a function"):
        zoaq_jax.chain(zoaq_jax.zoar_estimator(k=2), optax.clip_by_global_norm)


def test_chain_in_the_right_order_equals_optax_chain():
    """Estimator first, then the transformations of its estimate: an :class:`Estimator`
    (nested chains, Optax wrappers after it and around it stay possible), bit for bit
    ``optax.chain``'s result."""
    x = jnp.ones(D)
    members = (zoaq_jax.fixed_estimator(k=3, key=0), optax.clip_by_global_norm(1e-3))
    backbone = zoaq_jax.chain(optax.MultiSteps(zoaq_jax.scale_by_radazo(), 1)
                              .gradient_transformation(), optax.scale_by_learning_rate(1.0))
    ours, theirs = zoaq_jax.chain(*members, backbone), optax.chain(*members, backbone)
    assert isinstance(ours, zoaq_jax.Estimator) and not isinstance(backbone, zoaq_jax.Estimator)
    assert all(isinstance(opt, zoaq_jax.Estimator) for opt in (
        zoaq_jax.zoaq(1e-2), zoaq_jax.zoar(1e-2), zoaq_jax.mezo(1e-2), zoaq_jax.auto_k(1e-2)))
    u, _ = ours.update(None, ours.init(x), x, value_fn=wavy)
    chex.assert_trees_all_equal(u, theirs.update(None, theirs.init(x), x, value_fn=wavy)[0])
    clipped = zoaq_jax.chain(*members)
    g, _ = clipped.update(None, clipped.init(x), x, value_fn=wavy)
    assert float(optax.tree.norm(g)) == pytest.approx(1e-3, rel=1e-4)
    wrapped = optax.apply_if_finite(zoaq_jax.chain(ours), 2)  # an Estimator re-chained
    u_wrapped, _ = wrapped.update(jnp.zeros(D), wrapped.init(x), x, value_fn=wavy)
    chex.assert_trees_all_close(u_wrapped, u, rtol=1e-5)  # the wrapper compiles: rounding


@pytest.mark.parametrize("incoming", ["none", "zeros"])
def test_optax_chain_cannot_see_a_clip_before_the_estimator(incoming):
    """Why :func:`zoaq_jax.chain` refuses the order at construction: in ``optax.chain`` a
    clip before the estimator sees the caller's updates (``None`` or zeros), maps them to
    themselves and the estimator ignores them, so the step equals the estimator alone,
    bit for bit, and nothing at run time tells the two apart."""
    x = jnp.ones(D)
    est = zoaq_jax.fixed_estimator(k=3, key=0)
    wrong = optax.chain(optax.clip_by_global_norm(1e-6), est)
    updates = None if incoming == "none" else jnp.zeros(D)
    g, _ = est.update(None, est.init(x), x, value_fn=wavy)
    u, _ = wrong.update(updates, wrong.init(x), x, value_fn=wavy)
    chex.assert_trees_all_equal(u, g)
    assert float(optax.tree.norm(u)) > 1e-3  # not clipped


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
        # Armijo's condition to the objective's float32 resolution (8 ulps of f): near the
        # minimum the decrease it asks for is rounding, whose sign depends on the compiler.
        armijo.append(float(optax.tree.get(state, "decrease_error")) <= 1e-6 * abs(values[-2]))
    assert values[-1] < values[0] - 10.0  # from 10.0 to about -10.5 (6 keys: -5.7 to -12.5)
    # The slope proxy is a descent direction most of the time (keys 0-7: 30 to 36 steps).
    assert sum(armijo) >= 30
    # Where the Armijo condition held, the objective did not increase.
    assert all(b <= a + 1e-4 for a, b, ok in zip(values, values[1:], armijo) if ok)


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


def test_bf16_parameters_keep_their_perturbation():
    """x + mu u is evaluated in float32: rounded to bf16 (spacing 1/16 at 8) it was x."""
    f = lambda x: 0.5 * jnp.sum(x.astype(jnp.float32) ** 2)  # noqa: E731
    x = jnp.full(100, 8.0, jnp.bfloat16)
    params, _, trace = zoaq_jax.run(zoaq_jax.mezo(1e-2, k=4), f, x, 100, log_every=100)
    assert params.dtype == jnp.bfloat16
    assert float(trace.value[-1]) < 0.3 * float(trace.value[0])  # float32: 3200 -> 667


def test_masked_estimators_are_refused_with_the_composition_to_use():
    params = {"a": jnp.ones(3), "frozen": jnp.ones(2)}
    for opt in (optax.masked(zoaq_jax.zoaq(1e-2), {"a": True, "frozen": False}),
                optax.multi_transform({"zo": zoaq_jax.zoaq(1e-2), "off": optax.set_to_zero()},
                                      {"a": "zo", "frozen": "off"})):
        with pytest.raises(ValueError, match="Put the estimator first"):
            opt.init(params)


def test_wrappers_around_a_whole_optimizer_work_with_params_shaped_updates():
    """MultiSteps/apply_if_finite around an alias: pass zeros as updates (design notes)."""
    f = lambda p: jnp.sum(p ** 2)  # noqa: E731
    x = jnp.ones(3)
    zeros = jnp.zeros_like(x)
    def step(opt):  # compiled once per wrapper (op-by-op dispatch is several times slower)
        return jax.jit(lambda u, s, p: opt.update(u, s, p, value_fn=f))

    plain = zoaq_jax.zoaq(1e-2, k_max=3, n_hist=2, key=0)
    u_plain, _ = step(plain)(None, plain.init(x), x)
    guarded = optax.apply_if_finite(plain, 3)
    u, state = step(guarded)(zeros, guarded.init(x), x)
    chex.assert_trees_all_equal(u, u_plain)
    assert int(optax.tree.get(state, "num_queries")) == 2 * int(optax.tree.get(state, "last_k"))
    multi = optax.MultiSteps(plain, 2)
    state, multi_step = multi.init(x), step(multi)
    u1, state = multi_step(zeros, state, x)
    u2, state = multi_step(zeros, state, x)
    chex.assert_trees_all_equal(u1, zeros)  # the first micro-step only accumulates
    assert np.all(np.asarray(u2) != 0)


def test_estimator_first_composes_with_multisteps_and_apply_if_finite():
    """Wrappers that transform incoming updates go after the estimator.

    ``MultiSteps`` then accumulates estimates: with every_k = 2 the first call emits
    nothing and the second applies the backbone to the mean of the two estimates.
    """
    f = lambda p: jnp.sum(p["a"] ** 2) + jnp.sum(p["b"] ** 2)  # noqa: E731
    params = {"a": jnp.ones(3), "b": jnp.ones(2)}
    def step(opt):  # compiled once per chain
        return jax.jit(lambda s, p: opt.update(None, s, p, value_fn=f))

    est = zoaq_jax.fixed_estimator(k=2, key=0)
    opt = optax.chain(est, optax.MultiSteps(optax.sgd(0.1), 2).gradient_transformation())
    state, opt_step = opt.init(params), step(opt)
    u1, state = opt_step(state, params)
    u2, state = opt_step(state, params)
    s, est_step = est.init(params), step(est)
    g1, s = est_step(s, params)
    g2, s = est_step(s, params)
    chex.assert_trees_all_equal(u1, jax.tree.map(jnp.zeros_like, params))
    chex.assert_trees_all_close(u2, jax.tree.map(lambda a, b: -0.05 * (a + b), g1, g2),
                                rtol=1e-6)
    guarded = optax.chain(est, optax.apply_if_finite(optax.sgd(0.1), 3))
    u, state = step(guarded)(guarded.init(params), params)
    chex.assert_trees_all_close(u, jax.tree.map(lambda g: -0.1 * g, g1), rtol=1e-6)
    assert int(optax.tree.get(state, "num_queries")) == 4
