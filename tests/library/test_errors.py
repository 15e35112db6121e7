"""Bad input fails early and clearly; NaN/inf responses never poison the state."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import zoaq_jax
from zoaq_jax.retention import fifo
from helpers import diag, jitted_update, wavy

D = 8


@pytest.mark.parametrize(
    "factory, kwargs, error, match",
    [
        (zoaq_jax.zoaq_estimator, dict(k_min=5, k_max=2), ValueError, "k_min must be <= k_max"),
        (zoaq_jax.zoaq_estimator, dict(k_min=0), ValueError, "k_min must be >= 1"),
        (zoaq_jax.zoaq_estimator, dict(k_step=0), ValueError, "k_step"),
        (zoaq_jax.retention.fifo, dict(n_hist=-1), ValueError, "n_hist"),
        (zoaq_jax.zoaq, dict(learning_rate=1e-3, n_hist=-1), ValueError, "n_hist"),
        (zoaq_jax.zoaq_estimator, dict(k_max=2.5), TypeError, "k_max must be an int"),
        (zoaq_jax.zoaq_estimator, dict(mu=0.0), ValueError, "mu must be a finite number > 0"),
        (zoaq_jax.zoaq_estimator, dict(mu=-1e-3), ValueError, "mu"),
        (zoaq_jax.zoaq_estimator, dict(mu=float("nan")), ValueError, "mu"),
        (zoaq_jax.gates.momentum, dict(tau0=1.5), ValueError, "tau0"),
        (zoaq_jax.gates.momentum, dict(beta_tau=1.0), ValueError, "beta_tau"),
        (zoaq_jax.gates.momentum, dict(b1=-0.1), ValueError, "b1"),
        (zoaq_jax.zoaq, dict(learning_rate=1e-3, tau0=1.5), ValueError, "tau0"),
        (zoaq_jax.budgets.reset, dict(kind="max"), ValueError, "reset must be one of"),
        (zoaq_jax.zoaq_estimator, dict(difference="backward"), ValueError, "difference"),
        (zoaq_jax.zoaq_estimator, dict(directions="uniform"), ValueError, "directions"),
        (zoaq_jax.gates.momentum, dict(tau_band=(0.6, 0.2)), ValueError, "lo <= hi"),
        (zoaq_jax.gates.momentum, dict(tau_band=(0.0, 1.5)), ValueError, "tau_band"),
        (zoaq_jax.gates.momentum, dict(eps_anc=-1.0), ValueError, "eps_anc"),
        (zoaq_jax.zoaq_estimator, dict(gate=zoaq_jax.gates.momentum), TypeError, "gate"),
        (zoaq_jax.zoaq_estimator, dict(retention=4), TypeError, "retention"),
        (zoaq_jax.gates.momentum_norm, dict(c_norm=0.0), ValueError, "c_norm"),
        (zoaq_jax.retention.fifo, dict(n_hist=2, refresh=0), ValueError, "refresh"),
        (zoaq_jax.fixed_estimator, dict(k=0), ValueError, "k must be >= 1"),
        (zoaq_jax.zoar_estimator, dict(n_hist=-2), ValueError, "n_hist"),
        (zoaq_jax.statzo_estimator, dict(theta=0.0), ValueError, "theta"),
        (zoaq_jax.statzo_estimator, dict(k_min=3, k_max=1), ValueError, "k_min must be <= k_max"),
        (zoaq_jax.scale_by_radazo, dict(b2=1.0), ValueError, "b2"),
        (zoaq_jax.scale_by_zo_adamm, dict(eps=-1.0), ValueError, "eps"),
        (zoaq_jax.monitor_consistency, dict(b1=2.0), ValueError, "b1"),
        (zoaq_jax.zoaq, dict(learning_rate=-1e-3), ValueError, "learning_rate"),
        (zoaq_jax.zoar, dict(learning_rate=1e-3, backbone="adam"), ValueError, "backbone"),
        (zoaq_jax.radazo, dict(learning_rate=0.0), ValueError, "learning_rate"),
        (zoaq_jax.mezo, dict(learning_rate=1e-3, weight_decay=-1.0), ValueError, "weight_decay"),
    ],
)
def test_invalid_hyperparameters_fail_at_construction(factory, kwargs, error, match):
    with pytest.raises(error, match=match):
        factory(**kwargs)


@pytest.mark.parametrize("factory", [zoaq_jax.zoaq_estimator, zoaq_jax.fixed_estimator,
                                     zoaq_jax.statzo_estimator, zoaq_jax.zoar_estimator])
def test_bad_keys_are_refused_when_the_estimator_is_built(factory):
    with pytest.raises(TypeError, match="wrap_key_data"):
        factory(key=jnp.zeros(2, jnp.uint32))
    with pytest.raises(ValueError, match="single key"):
        factory(key=jax.random.split(jax.random.key(0), 2))
    with pytest.raises(ValueError, match="unsafe_rbg"):  # fold_in is not exact under vmap
        factory(key=jax.random.key(0, impl="unsafe_rbg"))
    for bad in ("abc", 1.5, True):
        with pytest.raises(TypeError, match="integer seed"):
            factory(key=bad)
    for good in (3, np.int32(3), jnp.int32(3), jax.random.key(3)):  # all build and init
        factory(key=good).init(jnp.zeros(D))


def test_structural_args_must_be_static_under_inject_hyperparams():
    factory = optax.inject_hyperparams(zoaq_jax.zoaq)  # k_max etc. not declared static
    opt = factory(learning_rate=1e-2)
    state = opt.init(jnp.zeros(D))
    with pytest.raises(TypeError, match="static_args"):
        jax.jit(lambda s, p: opt.update(None, s, p, value_fn=wavy))(state, jnp.zeros(D))


def test_non_scalar_objective_fails_at_first_call():
    est = zoaq_jax.zoaq_estimator()
    with pytest.raises(ValueError, match="scalar"):
        est.update(None, est.init(jnp.zeros(D)), jnp.zeros(D), value_fn=lambda x: x**2)
    with pytest.raises(ValueError, match="floating-point"):
        est.update(None, est.init(jnp.zeros(D)), jnp.zeros(D),
                   value_fn=lambda x: jnp.sum(x > 0))


def test_objective_missing_its_data_fails_clearly():
    def loss(params, batch):
        return jnp.sum((params - batch) ** 2)

    est = zoaq_jax.fixed_estimator()
    with pytest.raises(TypeError, match="batch"):
        est.update(None, est.init(jnp.zeros(D)), jnp.zeros(D), value_fn=loss)
    with pytest.raises(TypeError, match="batch"):  # a misspelt keyword is not forwarded
        est.update(None, est.init(jnp.zeros(D)), jnp.zeros(D), value_fn=loss, bach=jnp.ones(D))
    with pytest.raises(TypeError, match="callable"):
        est.update(None, est.init(jnp.zeros(D)), jnp.zeros(D), value_fn=3.0)


def test_run_validates_its_schedule():
    opt = zoaq_jax.zo_sgd(1e-3)
    with pytest.raises(ValueError, match="multiple of log_every"):
        zoaq_jax.run(opt, wavy, jnp.zeros(D), 10, log_every=3)
    with pytest.raises(ValueError, match="log_every"):
        zoaq_jax.run(opt, wavy, jnp.zeros(D), 10, log_every=0)


def holey(x):
    """NaN wherever the first coordinate exceeds 0.3: a simulator that crashes."""
    return jnp.where(x[0] > 0.3, jnp.nan, jnp.sum(jnp.cos(x) * x**2))


@pytest.mark.parametrize("difference", ["central", "forward"])
def test_nonfinite_responses_are_discarded_and_counted(difference):
    est = zoaq_jax.zoaq_estimator(k_min=2, k_max=6, retention=fifo(4), mu=0.5,
                                  difference=difference,
                                  key=0)
    update = jitted_update(est, holey)
    x = jnp.zeros(D)
    state = est.init(x)
    for _ in range(30):
        g, state = update(state, x)
        assert np.all(np.isfinite(g))
        x = x - 0.05 * g
        for leaf in (state.gate.ema, state.gate.tau, state.retention.history.responses):
            assert np.all(np.isfinite(leaf))
    assert diag(state, "num_nonfinite") > 0  # mu = 0.5 reaches into the NaN region
    assert diag(state, "num_queries") > diag(state, "num_nonfinite")


def test_a_step_without_any_finite_response_changes_nothing():
    est = zoaq_jax.zoaq_estimator(k_min=1, k_max=3, retention=fifo(4), key=0)
    update = jitted_update(est, wavy)
    x = jnp.ones(D)
    state = est.init(x)
    for _ in range(3):
        _, state = update(state, x)
    broken = jitted_update(est, lambda x: jnp.float32(jnp.inf) * jnp.sum(x))
    g, after = broken(state, x)
    np.testing.assert_array_equal(g, jnp.zeros(D))
    np.testing.assert_array_equal(after.gate.ema, state.gate.ema)
    assert float(after.gate.tau) == float(state.gate.tau)
    np.testing.assert_array_equal(after.retention.history.responses,
                                  state.retention.history.responses)
    assert diag(after, "last_k") == 3  # the zero candidate scores -inf: expands to k_max
    assert diag(after, "num_queries") == diag(state, "num_queries") + 6
    assert diag(after, "num_nonfinite") == diag(state, "num_nonfinite") + 3


@pytest.mark.parametrize("reset", ["min", "linear"])
def test_nonfinite_forward_centre_ends_the_step_at_once(reset):
    est = zoaq_jax.zoaq_estimator(k_min=2, k_max=8, difference="forward",
                                  budget=zoaq_jax.budgets.reset(reset), key=0)
    x = jnp.ones(D)
    state = est.init(x)
    update = jitted_update(est, wavy)
    for _ in range(3):
        _, state = update(state, x)
    assert reset == "min" or int(state.budget.next_k) > 2  # linear: the next step starts higher
    g, after = jitted_update(est, lambda x: jnp.float32(jnp.nan) + jnp.sum(x))(state, x)
    np.testing.assert_array_equal(g, jnp.zeros(D))
    assert diag(after, "last_k") == 2  # k_min, even where the reset policy starts higher
    assert diag(after, "num_queries") == diag(state, "num_queries") + 3
    assert int(after.budget.next_k) == int(state.budget.next_k)


def test_warm_start_without_a_finite_response_expands():
    """At warm start (m = 0) the gate passes any candidate, but not an empty one."""
    est = zoaq_jax.zoaq_estimator(k_min=1, k_max=3, retention=fifo(4), key=0)
    x = jnp.ones(D)
    state = est.init(x)
    g, after = jitted_update(est, lambda x: jnp.float32(jnp.inf) * jnp.sum(x))(state, x)
    np.testing.assert_array_equal(g, jnp.zeros(D))
    assert diag(after, "last_k") == 3 and diag(after, "num_nonfinite") == 3
    assert float(after.last_score) == -np.inf
    _, warm = jitted_update(est, wavy)(state, x)
    assert diag(warm, "last_k") == 1  # a finite warm-start candidate is accepted at k_min


def test_optimizers_survive_a_nan_region_end_to_end():
    for opt in (zoaq_jax.zoaq(1e-2, mu=0.5, key=1), zoaq_jax.radazo(1e-2, k=4, mu=0.5, key=1),
                zoaq_jax.statzo(1e-2, k_max=4, mu=0.5, key=1)):
        params, state, trace = zoaq_jax.run(opt, holey, -jnp.ones(D), 60)
        assert np.all(np.isfinite(params))


@pytest.mark.parametrize("params", [{}, [None], {"e": jnp.zeros((0, 4))}])
def test_params_without_float_leaves_are_refused_clearly(params):
    for opt in (zoaq_jax.zoaq(1e-2), zoaq_jax.zoar_estimator(), zoaq_jax.statzo(1e-2)):
        with pytest.raises(ValueError, match="no floating-point scalar to optimise"):
            opt.init(params)


def test_objects_that_are_not_arrays_are_refused_by_path():
    with pytest.raises(TypeError, match=r"params\['name'\] is a str, not an array"):
        zoaq_jax.zoaq(1e-2).init({"w": jnp.ones(2), "name": "layer"})


class _UserError(Exception):
    pass


def _failing(x):
    raise _UserError(f"simulator failed at {float(np.sum(x)):.1f}")


@pytest.mark.parametrize("jitted", [False, True])
def test_a_host_function_s_own_exception_reaches_the_user(jitted):
    """Type, message and traceback: un-jitted updates re-raise it by themselves,
    jitted code inside ``zoaq_jax.host_errors()``."""
    import traceback

    est = zoaq_jax.zoar_estimator(k=2)
    params = jnp.ones(3)
    f = zoaq_jax.host_oracle(_failing)
    update = lambda s, p: est.update(None, s, p, value_fn=f)  # noqa: E731
    with pytest.raises(_UserError, match="simulator failed") as info:
        if jitted:
            with zoaq_jax.host_errors():
                jax.block_until_ready(jax.jit(update)(est.init(params), params))
        else:
            jax.block_until_ready(update(est.init(params), params))
    assert "_failing" in "".join(traceback.format_tb(info.value.__traceback__))
    assert isinstance(info.value.__cause__, jax.errors.JaxRuntimeError)
    with pytest.raises(jax.errors.JaxRuntimeError, match="_UserError"):  # outside: JAX's
        jax.block_until_ready(jax.jit(update)(est.init(params), params))


def test_run_under_x64_keeps_int32_counters_and_does_not_warn():
    """The ring buffer's counters stayed int32 and ZoAR's scatter float32 under x64."""
    import warnings

    with jax.enable_x64(True), warnings.catch_warnings():
        warnings.simplefilter("error")
        for opt in (zoaq_jax.zoaq(1e-2, k_max=3, n_hist=2), zoaq_jax.zoar(1e-2, n_hist=2)):
            _, state, trace = zoaq_jax.run(opt, wavy, jnp.ones(D), 4)
            assert optax.tree.get(state, "head").dtype == jnp.int32
            assert np.all(np.isfinite(trace.value))
