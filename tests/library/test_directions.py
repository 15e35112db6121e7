"""Direction families (``directions=``): moments, unbiasedness, variance, every estimator.

Statistical checks use fixed keys and a tolerance of 5 standard errors per entry,
estimated from the same samples (a false failure has probability below 1e-6 per entry),
or a stated relative tolerance on variances.
"""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import zoaq_jax
from zoaq_jax.retention import fifo
from helpers import zoaq_chain
from zoaq_jax._src import directions as dirs

NEW = ("rademacher", "sparse:0.25", "lowrank:2")
FAMILIES = ("gaussian", "sphere") + NEW
# A matrix leaf (low-rank directions apply) and a vector leaf (Gaussian fallback): d = 16.
LIKE = {"w": jnp.zeros((3, 4)), "b": jnp.zeros(4)}
D = 16


def _flat(tree):
    """``[n, d]``: a batch of PyTrees (leading axis n) as rows."""
    return np.concatenate([np.asarray(x, np.float64).reshape(x.shape[0], -1)
                           for x in jax.tree.leaves(tree)], axis=1)


@functools.cache
def _draws(spec, n=8000):
    """``n`` directions shaped like LIKE, as rows ``[n, d]``."""
    keys = jax.random.split(jax.random.key(0), n)
    return _flat(jax.jit(lambda k: dirs.sample_many(dirs.family(spec), k, LIKE))(keys))


def _assert_mean(samples, expected):
    se = samples.std(0, ddof=1) / np.sqrt(len(samples))
    assert np.all(np.abs(samples.mean(0) - expected) <= 5 * se + 1e-12), (
        samples.mean(0), expected, se)


@pytest.mark.parametrize("spec", FAMILIES)
def test_second_moment_is_the_identity(spec):
    """E[u u'] = I (sphere: I / d), entry by entry, from 8000 draws."""
    u = _draws(spec)
    outer = (u[:, :, None] * u[:, None, :]).reshape(len(u), -1)
    expected = np.eye(D) / (D if spec == "sphere" else 1)
    _assert_mean(outer, expected.ravel())


def test_each_family_has_its_support():
    """Rademacher entries are +-1; sparse keeps a fraction p (binomial 5-sigma); low-rank
    matrix leaves have rank <= r and its vector leaves are the Gaussian ones."""
    assert set(np.unique(_draws("rademacher"))) == {-1.0, 1.0}
    kept = _draws("sparse:0.25") != 0
    assert abs(kept.mean() - 0.25) <= 5 * np.sqrt(0.25 * 0.75 / kept.size)
    keys = jax.random.split(jax.random.key(1), 50)
    like = {**LIKE, "t": jnp.zeros((3, 4, 1))}  # a 3-D leaf: Gaussian too
    draw = jax.jit(lambda spec_keys, spec: dirs.sample_many(dirs.family(spec), spec_keys, like),
                   static_argnums=1)
    low, gauss = draw(keys, "lowrank:2"), draw(keys, "gaussian")
    singular = np.linalg.svd(np.asarray(low["w"], np.float64), compute_uv=False)  # [50, 3]
    assert np.all(singular[:, 1] > 1e-3 * singular[:, 0])
    assert np.all(singular[:, 2] < 1e-5 * singular[:, 0])  # rank 2 up to float32 rounding
    np.testing.assert_array_equal(low["b"], gauss["b"])
    np.testing.assert_array_equal(low["t"], gauss["t"])


# f(W, b) = 0.5 x'Ax + c'x over x = (b, vec W): central differences are exact.
_M = jax.random.normal(jax.random.key(42), (D, D))
A_MAT = _M @ _M.T / D + jnp.eye(D)
C_VEC = jnp.linspace(-1.0, 1.0, D)
X = {"w": jnp.linspace(0.5, -0.5, 12).reshape(3, 4), "b": jnp.linspace(-0.3, 0.3, 4)}


def _vec(p):
    """A PyTree as one vector, leaves in ``jax.tree.leaves`` order (as :func:`_flat`)."""
    return jnp.concatenate([x.ravel() for x in jax.tree.leaves(p)])


def quad(p):
    x = _vec(p)
    return 0.5 * x @ A_MAT @ x + C_VEC @ x


GRAD = np.asarray(A_MAT @ _vec(X) + C_VEC, np.float64)


def _estimates(make, n, steps=1):
    """The estimate of the last of ``steps`` updates at X, one per key 0..n-1: [n, d]."""

    def one(seed):
        est = make(seed)

        def step(state, _):
            g, state = est.update(None, state, X, value_fn=quad)
            return state, g

        return jax.tree.map(lambda g: g[-1], jax.lax.scan(step, est.init(X), None,
                                                          length=steps)[1])

    return _flat(jax.jit(jax.vmap(one))(jnp.arange(n)))


@pytest.mark.parametrize("spec, difference", [*((s, "central") for s in NEW),
                                              ("lowrank:2", "forward")])
def test_fixed_estimator_is_unbiased(spec, difference):
    g = _estimates(lambda s: zoaq_jax.fixed_estimator(
        k=2, mu=0.05, difference=difference, directions=spec, key=s), 4000)
    _assert_mean(g, GRAD)


def test_zoar_pools_unbiased_low_rank_records():
    """ZoAR (central, history averaged at one point) draws the family's directions for
    fresh, evicted and refreshed records (refresh=2: an exact recomputation in 3 steps)."""
    g = _estimates(lambda s: zoaq_jax.zoar_estimator(
        k=2, n_hist=1, mu=0.05, difference="central", directions="lowrank:2", refresh=2,
        key=s), 2000, steps=3)
    _assert_mean(g, GRAD)


def test_zoaq_pools_unbiased_sparse_records():
    """ZoAQ with k_min = k_max (the gate never selects) pools retained records."""
    g = _estimates(lambda s: zoaq_jax.zoaq_estimator(
        k_min=2, k_max=2, retention=fifo(2), mu=0.05, directions="sparse:0.25",
        key=s), 2000, steps=3)
    _assert_mean(g, GRAD)


@functools.cache
def _single(spec):
    """8000 central estimates with one direction (k = 1) at X."""
    return _estimates(lambda s: zoaq_jax.fixed_estimator(k=1, mu=0.05, directions=spec, key=s),
                      8000)


@pytest.mark.parametrize("spec, kappa", [("gaussian", 3.0), ("rademacher", 1.0),
                                         ("sparse:0.5", 6.0)])
def test_single_direction_variance_follows_the_fourth_moment(spec, kappa):
    """Central, k = 1: Var[(g'u) u_j] = |g|^2 + (kappa - 2) g_j^2 with kappa = E[u_j^4]
    (Gaussian 3, Rademacher 1, sparse 3/p), within 5 standard errors of the sample
    variance, sqrt((m4 - s^4) / n) from the same 8000 keys."""
    g = _single(spec)
    expected = np.sum(GRAD**2) + (kappa - 2) * GRAD**2
    dev = g - g.mean(0)
    var, m4 = np.mean(dev**2, 0), np.mean(dev**4, 0)
    assert np.all(np.abs(var - expected) <= 5 * np.sqrt((m4 - var**2) / len(g))), (var, expected)


def test_rademacher_estimates_vary_less_than_gaussian_ones():
    """Total variance (d + kappa - 2)|g|^2: Rademacher's is below Gaussian's by 2|g|^2."""
    total = {spec: _single(spec).var(0).sum() for spec in ("gaussian", "rademacher")}
    assert total["rademacher"] < total["gaussian"]
    norm2 = np.sum(GRAD**2)
    np.testing.assert_allclose(total["rademacher"], (D - 1) * norm2, rtol=0.1)


ALIASES = {  # every public optimizer that draws directions
    "zoaq": lambda d: zoaq_chain(1e-2, k_max=3, retention=fifo(2), directions=d, key=1),
    "radazo": lambda d: zoaq_jax.radazo(1e-2, k=2, directions=d, key=1),
    "zo_adamm": lambda d: zoaq_jax.zo_adamm(1e-2, k=2, directions=d, key=1),
    "zo_sgd": lambda d: zoaq_jax.zo_sgd(1e-2, k=2, difference="forward", directions=d, key=1),
    "mezo": lambda d: zoaq_jax.mezo(1e-2, k=2, directions=d, key=1),
    "statzo": lambda d: zoaq_jax.statzo(1e-2, k_max=3, directions=d, key=1),
    "zoar": lambda d: zoaq_jax.zoar(1e-2, k=2, n_hist=2, directions=d, key=1),
    "auto_k": lambda d: zoaq_jax.auto_k(1e-2, k_max=3, window=2, directions=d, key=1),
}


# Each alias compiled with one new family in turn, each family with two or three aliases
# (the Gaussian and sphere ones are in the property matrix; every family is drawn by the
# same function); test_every_alias_takes_every_family builds all the pairs.
PAIRS = [(name, NEW[i % 3]) for i, name in enumerate(sorted(ALIASES))]


@pytest.mark.parametrize("name, spec", PAIRS)
def test_every_alias_compiles_once_and_counts_exactly_with_the_family(name, spec):
    """One trace for 3 steps, num_queries equal to a host-side call count, finite
    parameters that moved."""
    calls, traces = [], []

    def f(p):
        calls.append(1)
        return float(np.sum((np.asarray(p["w"], np.float64) - 0.3) ** 2)
                     + np.sum(np.asarray(p["b"], np.float64) ** 2))

    value_fn = zoaq_jax.host_oracle(f)
    opt = ALIASES[name](spec)

    @jax.jit
    def step(p, s):
        traces.append(1)
        u, s = opt.update(None, s, p, value_fn=value_fn)
        return optax.apply_updates(p, u), s

    params = {"w": jnp.ones((3, 4)), "b": jnp.ones(4)}
    p, s = params, opt.init(params)
    for _ in range(3):
        p, s = step(p, s)
    jax.block_until_ready(p)
    assert len(traces) == 1
    assert int(optax.tree.get(s, "num_queries")) == len(calls) > 0
    moved = _flat(jax.tree.map(lambda a, b: (a - b)[None], p, params))
    assert np.all(np.isfinite(moved)) and np.any(moved != 0)


BAD = [("uniform", ValueError, "directions must be one of"),
       ("sparse", ValueError, "needs a value after ':'"),
       ("sparse:0", ValueError, "0 < P <= 1"),
       ("sparse:1.5", ValueError, "0 < P <= 1"),
       ("sparse:often", ValueError, "0 < P <= 1"),
       ("lowrank:0", ValueError, "integer >= 1"),
       ("lowrank:2.5", ValueError, "integer >= 1"),
       ("rademacher:2", ValueError, "takes no ':' value"),
       (None, TypeError, "directions must be a string")]


def test_every_alias_takes_every_family():
    for name, make in ALIASES.items():
        for spec in FAMILIES + ("sparse:1", "lowrank:7"):
            assert isinstance(make(spec), optax.GradientTransformationExtraArgs), (name, spec)


@pytest.mark.parametrize("name", sorted(ALIASES))
def test_bad_specs_are_refused_at_construction(name):
    for spec, error, match in BAD:
        with pytest.raises(error, match=match):
            ALIASES[name](spec)


def separable(p):
    """An elementwise polynomial (no dot products): vmap reproduces it bit for bit."""
    return sum(jnp.sum(x**2 * (1 + 0.1 * x)) for x in jax.tree.leaves(p))


@pytest.mark.parametrize("spec, impl", [("sparse:0.25", "threefry2x32"),
                                        ("lowrank:2", "threefry2x32"), ("gaussian", "rbg")])
def test_vmap_over_seeds_equals_unbatched_runs(spec, impl):
    """Lane s of a vmapped update is the update with key s, bit for bit (rbg keys too:
    see test_rbg_keys_draw_the_same_direction_batched_or_alone)."""
    def one(seed):
        est = zoaq_jax.fixed_estimator(k=3, mu=0.05, directions=spec,
                                       key=jax.random.key(seed, impl=impl))
        return est.update(None, est.init(X), X, value_fn=separable)[0]

    batched = jax.jit(jax.vmap(one))(jnp.arange(3))
    for seed in range(3):
        lane = jax.tree.map(lambda x, seed=seed: x[seed], batched)
        chex.assert_trees_all_equal(lane, jax.jit(one)(seed))


def test_rbg_keys_draw_the_same_direction_batched_or_alone():
    """rbg keys: JAX draws a vmapped batch from its first key; sample's batching rule
    maps over the keys instead, so a batch equals its keys' single draws, bit for bit."""
    keys = jax.random.split(jax.random.key(0, impl="rbg"), 3)
    fam = dirs.family("rademacher")
    batch = jax.jit(lambda k: dirs.sample_many(fam, k, LIKE))(keys)
    one = jax.jit(lambda k: dirs.sample(fam, k, LIKE))
    for i in range(3):
        chex.assert_trees_all_equal(jax.tree.map(lambda x, i=i: x[i], batch), one(keys[i]))


def test_directions_over_the_batch_limit_are_drawn_in_chunks(monkeypatch):
    """k = 5 directions with room for 2 at a time (2 + 2 + 1): the same directions and
    calls as one predrawn batch, so the estimate agrees up to float32 rounding (the
    chunks' sums are added in another order)."""
    def estimate():
        est = zoaq_jax.fixed_estimator(k=5, mu=0.05, key=3)
        return jax.jit(lambda s: est.update(None, s, X, value_fn=separable))(est.init(X))

    g_one, s_one = estimate()
    monkeypatch.setattr(dirs, "_BATCH_LIMIT", 2 * dirs.dimension(X))
    assert dirs.batch_size(X) == 2
    g_chunked, s_chunked = estimate()
    chex.assert_trees_all_close(g_chunked, g_one, rtol=1e-6, atol=1e-6)
    assert int(optax.tree.get(s_chunked, "num_queries")) == 10
    assert optax.tree.get(s_chunked, "num_queries") == optax.tree.get(s_one, "num_queries")


@pytest.mark.parametrize("size", [0, 1, 10, 100])
def test_draws_take_straight_line_threefry_bits_and_draw_the_same_numbers(monkeypatch, size):
    """A direction's threefry bits come from the 20 rounds written out: a vmapped draw
    compiles without a while loop (JAX's CPU lowering loops over the rounds), and gets
    the numbers of JAX's own threefry, bit for bit, batched over keys (raw 32- and 8-bit
    draws; sparse: a split, a normal and a Bernoulli draw; lowrank: two normal factors)."""
    keys = jax.random.split(jax.random.key(4), 3)
    like = {"w": jnp.zeros((2, size))}
    families = [dirs.family(s) for s in ("sparse:0.25", "lowrank:2")]

    def loops(wrap):
        draw = jax.vmap(lambda k: jax.random.normal(wrap(k), (size,)))
        return jax.jit(draw).lower(keys).compile().as_text().count(" while(")

    def draw(k):
        return (jax.random.bits(dirs._straight(k), (size,), jnp.uint32),
                jax.random.bits(dirs._straight(k), (size,), jnp.uint8),
                jax.random.bits(dirs._straight(k), (size,), jnp.uint16),
                [dirs.sample(f, k, like) for f in families])

    straight = jax.jit(jax.vmap(draw))(keys)
    if jax.default_backend() == "cpu" and size:  # JAX's CPU lowering loops over the rounds
        assert loops(dirs._straight) == 0 < loops(lambda k: k)
    monkeypatch.setattr(dirs, "_straight", lambda key: key)
    chex.assert_trees_all_equal(straight, jax.jit(jax.vmap(draw))(keys))


def test_straight_line_bits_of_64_bits_are_jax_own():
    """64-bit draws (float64 directions under ``jax_enable_x64``): the two hashed words
    joined, as JAX's threefry joins them."""
    key = jax.random.key(2)
    with jax.enable_x64(True):
        got = jax.random.bits(dirs._straight(key), (37,), jnp.uint64)
        chex.assert_trees_all_equal(got, jax.random.bits(key, (37,), jnp.uint64))


def test_leaf_keys_are_each_leaf_own_fold_in_derived_in_one_loop():
    """A tree's per-leaf keys (``fold_in(key, j)`` for leaf ``j``) derived in one batch:
    the keys of one derivation per leaf, bit for bit (a carried PRNG-key leaf has none
    and shifts no index), drawing the same directions; the draw of 8 leaves from them
    compiles one generator loop for their keys, not 8."""
    like = {f"l{i}": jnp.zeros(s) for i, s in enumerate([(4, 3)] * 4 + [(30,)] * 3 + [(7,)])}
    like["l2k"] = jax.random.key(0)  # carried: leaf 3 of the flattened tree
    keys = jax.random.split(jax.random.key(5), 2)
    index = [j for j, x in enumerate(jax.tree.leaves(like)) if dirs.optimised(x)]
    assert index == [0, 1, 2, 4, 5, 6, 7, 8]
    chex.assert_trees_all_equal(
        jax.random.key_data(jax.jit(lambda k: dirs.leaf_keys(k, like))(keys)),
        jax.random.key_data(jnp.stack([jnp.stack([jax.random.fold_in(k, j) for j in index])
                                       for k in keys])))
    fam = dirs.family("gaussian")

    def reference(key):  # one derivation per leaf, as before the batch
        leaves, treedef = jax.tree.flatten(like)
        return jax.tree.unflatten(treedef, [
            dirs._draw_leaf(fam, jax.random.fold_in(key, j), jnp.shape(x), jnp.float32)
            if dirs.optimised(x) else None for j, x in enumerate(leaves)])

    batch = jax.jit(lambda k: dirs.sample_many(fam, dirs.leaf_keys(k, like), like)
                    ).lower(keys).compile()
    chex.assert_trees_all_equal(batch(keys), jax.jit(jax.vmap(reference))(keys))
    assert batch.as_text().count(" while(") == 1
