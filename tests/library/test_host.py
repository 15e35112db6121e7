"""host_oracle: objectives outside JAX, with exact call accounting."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import zoaq_jax
from zoaq_jax.retention import fifo


class Counter:
    def __init__(self):
        self.calls = 0

    def __call__(self, x, shift):
        self.calls += 1
        x = np.asarray(x, np.float64)
        return float(np.sum(np.cos(x) * (x - shift) ** 2))


@pytest.mark.parametrize("difference", ["central", "forward"])
def test_host_calls_equal_num_queries(difference):
    host = Counter()
    f = zoaq_jax.host_oracle(host)
    est = zoaq_jax.zoaq_estimator(k_min=1, k_max=5, retention=fifo(3), difference=difference,
                                     key=0)
    step = jax.jit(lambda s, p: est.update(None, s, p, value_fn=f, shift=jnp.ones(6)))
    params, state = jnp.zeros(6), est.init(jnp.zeros(6))
    ks = []
    for _ in range(12):
        g, state = step(state, params)
        params = params - 0.05 * g
        ks.append(int(optax.tree.get(state, "last_k")))
    assert max(ks) > 1  # the loop expanded at least once
    assert host.calls == int(optax.tree.get(state, "num_queries"))


def test_a_k_step_past_the_budget_evaluates_nothing_uncounted():
    """k_step > k_max - k_min gives the grid {k_min, k_max}: a retry evaluates exactly
    the directions it counts."""
    host = Counter()
    est = zoaq_jax.zoaq_estimator(k_min=1, k_max=3, k_step=100, retention=fifo(2), key=0)
    step = jax.jit(lambda s, p: est.update(None, s, p, value_fn=zoaq_jax.host_oracle(host),
                                           shift=jnp.ones(6)))
    params, state = jnp.zeros(6), est.init(jnp.zeros(6))
    ks = set()
    for _ in range(6):
        g, state = step(state, params)
        params = params - 0.05 * g
        ks.add(int(optax.tree.get(state, "last_k")))
    assert ks == {1, 3}
    assert host.calls == int(optax.tree.get(state, "num_queries"))


def test_vectorized_host_oracle_gets_batches_and_matches():
    batches = []

    def batched(x, shift):
        x = np.asarray(x, np.float64)
        batches.append(x.shape)
        return np.sum(np.cos(x) * (x - shift) ** 2, axis=-1)

    f_vec = zoaq_jax.host_oracle(batched, vectorized=True)
    f_seq = zoaq_jax.host_oracle(Counter())
    est = zoaq_jax.fixed_estimator(k=3, key=1)
    x = jnp.linspace(-1, 1, 6)
    g_vec, _ = est.update(None, est.init(x), x, value_fn=f_vec, shift=jnp.ones(6))
    g_seq, _ = est.update(None, est.init(x), x, value_fn=f_seq, shift=jnp.ones(6))
    np.testing.assert_allclose(g_vec, g_seq, rtol=1e-5)
    assert (6, 6) in batches  # 3 directions x (+, -) in one host call


def test_vectorized_host_oracle_under_vmap_over_seeds():
    """Seeds x directions reach the host as one flat batch (two vmap levels); results
    equal the sequential oracle per seed."""
    batches = []

    def batched(x, shift):
        assert x.ndim == 2 and shift.shape == x.shape
        batches.append(x.shape[0])
        return np.sum(np.cos(x) * (x - shift) ** 2, axis=1)

    x = jnp.linspace(-1, 1, 6)

    def one_seed(seed, f):
        est = zoaq_jax.zoaq_estimator(k_min=2, k_max=2, retention=fifo(2), difference="forward",
                                      key=seed)
        state = est.init(x)
        for _ in range(2):
            g, state = est.update(None, state, x, value_fn=f, shift=jnp.ones(6))
        return g, optax.tree.get(state, "num_queries")

    g_vec, q_vec = jax.vmap(lambda s: one_seed(s, zoaq_jax.host_oracle(batched, vectorized=True)))(
        jnp.arange(4))
    sequential = jax.jit(lambda s: one_seed(s, zoaq_jax.host_oracle(Counter())))  # one trace
    seq = [sequential(s) for s in range(4)]
    # Batched and unbatched float32 perturbations may round differently; a forward
    # difference divides that by mu, hence the tolerance.
    np.testing.assert_allclose(g_vec, np.stack([g for g, _ in seq]), rtol=5e-3, atol=1e-4)
    np.testing.assert_array_equal(q_vec, [int(q) for _, q in seq])
    assert batches == [1, 8, 1, 8]  # the shared centre value once; 4 seeds x 2 directions


def test_host_oracle_keeps_the_signature_for_keyword_matching():
    f = zoaq_jax.host_oracle(Counter())
    est = zoaq_jax.fixed_estimator()
    with pytest.raises(TypeError, match="shift"):
        est.update(None, est.init(jnp.zeros(3)), jnp.zeros(3), value_fn=f)


def test_pytorch_objective_through_host_oracle():
    torch = pytest.importorskip("torch")  # a dev dependency; skipped only without it
    target = torch.linspace(-1.0, 1.0, 5, dtype=torch.float64)
    calls = []

    def torch_loss(x):
        calls.append(1)
        return float(torch.sum((torch.from_numpy(np.asarray(x, np.float64)) - target) ** 2))

    opt = zoaq_jax.zoaq(1e-2, k_max=4, key=0)
    f = zoaq_jax.host_oracle(torch_loss)
    step = jax.jit(lambda p, s: opt.update(None, s, p, value_fn=f))
    params, state = jnp.zeros(5), opt.init(jnp.zeros(5))
    for _ in range(200):
        u, state = step(params, state)
        params = optax.apply_updates(params, u)
    assert float(np.sum((np.asarray(params) - target.numpy()) ** 2)) < 0.05 * float(
        np.sum(target.numpy() ** 2))
    assert len(calls) == int(optax.tree.get(state, "num_queries"))


def test_a_host_function_returning_none_is_an_error_not_a_zero_update():
    def forgot_return(x):
        float(np.sum(x**2))

    est = zoaq_jax.fixed_estimator(k=2)
    params = jnp.ones(3)
    with pytest.raises(Exception, match="returned None"):
        g, _ = est.update(None, est.init(params), params,
                          value_fn=zoaq_jax.host_oracle(forgot_return))
        jax.block_until_ready(g)


def test_string_keywords_reach_the_host_function_unchanged():
    """``run`` keeps ``str`` keywords static; the host function receives them as given."""
    def loss(x, scale, mode):
        values = np.asarray(x) ** 2 * np.asarray(scale)
        return float(values.mean() if mode == "mean" else values.sum())

    f = zoaq_jax.host_oracle(loss)
    for mode, expected in (("mean", 2.0), ("sum", 8.0)):
        _, _, trace = zoaq_jax.run(zoaq_jax.zo_sgd(1e-2, k=1, key=0), f, jnp.ones(4), 1,
                                   scale=jnp.float32(2.0), mode=mode)
        assert float(trace.value[0]) == expected


class SimulatorError(RuntimeError):
    pass


def _raising(x):
    raise SimulatorError("simulator failed")


@pytest.fixture
def async_dispatch(monkeypatch):
    """GPU-style dispatch on the CPU: a host function's exception does not stop the
    computation; it surfaces as JAX's runtime error only when the result is waited for
    (as an un-jitted GPU update returns before its callback runs)."""
    pending, pure_callback, block = [], jax.pure_callback, jax.block_until_ready

    def deferred_callback(callback, result, *args, **kwargs):
        def later(*a, **kw):
            try:
                return callback(*a, **kw)
            except Exception:  # noqa: BLE001 - surfaces at the wait, as on a GPU
                pending.append(1)
                return np.zeros(result.shape, result.dtype)
        return pure_callback(later, result, *args, **kwargs)

    def waiting(tree):
        if pending:
            pending.clear()
            raise jax.errors.JaxRuntimeError("INTERNAL: CpuCallback error")
        return block(tree)

    monkeypatch.setattr(jax, "pure_callback", deferred_callback)
    monkeypatch.setattr(jax, "block_until_ready", waiting)
    return pending


@pytest.mark.parametrize("make", [
    lambda: zoaq_jax.zoaq(1e-2, k_max=3, n_hist=2, key=0),
    lambda: zoaq_jax.zoar(1e-2, k=2, n_hist=1, key=0),
])
def test_an_unjitted_update_raises_the_host_exception_under_async_dispatch(
        async_dispatch, make):
    opt, x = make(), jnp.ones(3)
    with pytest.raises(SimulatorError, match="simulator failed"):
        opt.update(None, opt.init(x), x, value_fn=zoaq_jax.host_oracle(_raising))
    assert not async_dispatch  # raised by update itself, nothing left to surface later
    with pytest.raises(SimulatorError, match="simulator failed"):
        zoaq_jax.run(make(), zoaq_jax.host_oracle(_raising), x, 2)
