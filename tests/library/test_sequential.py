"""zoaq_jax.sequential: vmapped calls run one at a time, with the values and memory of one."""

import jax
import jax.numpy as jnp
import numpy as np
import optax

import zoaq_jax


def _loss(w, x, y):
    h = jnp.tanh(x @ w["a"]) @ w["b"]
    return jnp.mean((h - y) ** 2)


def _data(n=64, d=16, h=32):
    k = jax.random.split(jax.random.key(0), 4)
    w = {"a": jax.random.normal(k[0], (d, h)) / 4, "b": jax.random.normal(k[1], (h,)) / 4}
    return w, jax.random.normal(k[2], (n, d)), jax.random.normal(k[3], (n,))


def test_vmap_equals_unbatched_calls_and_nests():
    w, x, y = _data()
    ws = jax.tree.map(lambda a: a + 0.1 * jnp.arange(3.0).reshape((3,) + (1,) * a.ndim), w)
    seq = zoaq_jax.sequential(_loss)
    expected = np.array([_loss(jax.tree.map(lambda a: a[i], ws), x, y) for i in range(3)])
    got = jax.jit(jax.vmap(seq, in_axes=(0, None, None)))(ws, x, y)
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-6)
    # Keyword data and a second vmap level (seeds over perturbations).
    wss = jax.tree.map(lambda a: jnp.stack([a, a]), ws)
    nested = jax.vmap(jax.vmap(lambda p: seq(p, x=x, y=y)))(wss)
    np.testing.assert_allclose(np.asarray(nested), np.stack([expected, expected]), rtol=1e-6)
    assert float(seq(w, x, y)) == float(_loss(w, x, y))  # unbatched: the function itself


def test_estimators_forward_data_keywords_and_give_the_vectorized_estimate():
    w, x, y = _data()
    opt = zoaq_jax.fixed_estimator(k=4, mu=1e-2, key=0)  # the raw estimate
    step = jax.jit(lambda p, s, f: opt.update(None, s, p, value_fn=f, x=x, y=y),
                   static_argnums=2)
    a, sa = step(w, opt.init(w), _loss)
    b, sb = step(w, opt.init(w), zoaq_jax.sequential(_loss))
    assert int(optax.tree.get(sa, "num_queries")) == int(optax.tree.get(sb, "num_queries")) == 8
    # A loop and a batch may round f differently (float32: ~1e-7 of f ~ 1), and a response
    # divides differences by 2 mu = 0.02, so estimates agree to ~1e-5 of their scale.
    scale = max(float(jnp.max(jnp.abs(u))) for u in jax.tree.leaves(a))
    for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=0, atol=1e-4 * scale)


def _temp(fn, *args):
    stats = jax.jit(fn).lower(*args).compile().memory_analysis()
    return stats.temp_size_in_bytes


def test_memory_is_one_call_whatever_the_batch_and_nothing_is_hoisted():
    w, x, y = _data(n=256, h=256)
    one = _temp(_loss, w, x, y)

    def batched(f, n):
        ws = jax.tree.map(lambda a: jnp.stack([a] * n), w)
        return _temp(jax.vmap(f, in_axes=(0, None, None)), ws, x, y)

    seq = zoaq_jax.sequential(_loss)
    # ws is an argument: the loop's extra temp is a few parameter-sized buffers at most.
    slack = 4 * sum(a.nbytes for a in jax.tree.leaves(w))
    assert batched(seq, 16) <= one + slack
    assert batched(seq, 16) == batched(seq, 2)
    assert batched(_loss, 16) > 8 * one  # vectorized: activations of every call at once

    # Work that depends on the data alone is loop-invariant: a plain lax.map hoists it and
    # keeps its result alive through the loop; the wrapper's barrier keeps it inside.
    def invariant_heavy(w, x, y):
        feats = jnp.tanh(x @ x.T)  # the data's alone: loop-invariant, (n, n)
        h = jnp.tanh(feats @ jnp.tanh(x @ w["a"]))
        h2 = jnp.tanh(h @ h.T)  # the peak, after feats is dead in one call
        return jnp.mean((h2 @ h @ w["b"] - y) ** 2)

    plain_map = _temp(lambda ws, x, y: jax.lax.map(lambda p: invariant_heavy(p, x, y), ws),
                      jax.tree.map(lambda a: jnp.stack([a] * 4), w), x, y)
    ours = batched(zoaq_jax.sequential(invariant_heavy), 4)
    # Measured: one call 786 KB, the wrapper 788 KB, a plain lax.map 1,050 KB (feats kept).
    assert ours <= _temp(invariant_heavy, w, x, y) + slack
    assert plain_map > ours + 0.8 * x.shape[0] ** 2 * 4  # the hoisted (n, n) buffer
