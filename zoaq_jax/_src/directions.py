"""Random search directions, regenerated from PRNG keys instead of stored.

A direction is a PyTree shaped like the parameters. Leaf ``i`` of the direction drawn
from key ``k`` is drawn from ``fold_in(k, i)``, so a record needs only its key: the full
direction is recomputed whenever it is needed, and no state array ever holds
``n_hist * d`` numbers. Directions are drawn in at least float32, whatever the leaf
dtype, so that bf16 parameters still get well-resolved directions. Only real
floating-point leaves are optimised (Python floats included); PRNG key leaves are
carried: their direction, estimate and update components are ``None`` (an empty
subtree, which Optax's transformations skip), and the objective receives them unchanged.

Every estimator takes the distribution as ``directions=``, a string parsed at
construction by :func:`family`:

* ``"gaussian"`` (default): :math:`u \\sim \\mathcal N(0, I_d)`, so
  :math:`E[u u^\\top] = I`; leaf ``i`` is ``normal(fold_in(k, i))``.
* ``"sphere"``: :math:`u` uniform on the unit sphere, so :math:`E[u u^\\top] = I/d`; the
  estimators multiply by :func:`estimator_scale` ``= d`` to stay unbiased (the R-AdaZO
  paper's form).
* ``"rademacher"``: i.i.d. entries :math:`u_j = \\pm 1` with probability 1/2 each (the
  perturbations of FZOO), so :math:`E[u u^\\top] = I` and :math:`E[u_j^4] = 1`. Each
  entry takes one random bit (32 entries per generated 32-bit word), so drawing is far
  cheaper than a Gaussian draw, which takes a word per entry.
* ``"sparse:P"`` (:math:`0 < p \\le 1`): :math:`u = (m \\odot z) / \\sqrt p` with
  :math:`z \\sim \\mathcal N(0, I_d)` and an independent mask
  :math:`m_j \\sim \\mathrm{Bernoulli}(p)`: :math:`E[u_j^2] = p \\cdot 1 / p = 1` and
  :math:`E[u_j u_l] = 0` for :math:`j \\ne l`, so :math:`E[u u^\\top] = I`; about
  :math:`p d` coordinates are perturbed per direction, and :math:`E[u_j^4] = 3/p`.
  Sparse MeZO perturbs a subset of the parameters chosen by magnitude; here the subset
  is drawn at random, fresh for every direction (unbiased for any objective).
* ``"lowrank:R"`` (integer :math:`r \\ge 1`): a 2-D leaf of shape :math:`(m, n)` gets
  :math:`u = U V^\\top / \\sqrt r` with :math:`U \\in \\mathbb R^{m \\times r}`,
  :math:`V \\in \\mathbb R^{n \\times r}` of i.i.d. standard normals;
  :math:`E[u_{ij} u_{kl}] = \\frac1r \\sum_{a, b} E[U_{ia} U_{kb}] E[V_{ja} V_{lb}]
  = \\frac1r \\sum_{a,b} \\delta_{ik} \\delta_{ab} \\delta_{jl} \\delta_{ab}
  = \\delta_{ik} \\delta_{jl}`, so :math:`E[\\mathrm{vec}(u) \\mathrm{vec}(u)^\\top] = I`
  (entries are uncorrelated but not independent; :math:`E[u_{ij}^4] = 3 + 6 / r`).
  Leaves that are not 2-D get Gaussian directions. The estimate
  :math:`r_\\mu(x, u) u = \\langle \\nabla f, U V^\\top\\rangle U V^\\top / r` (as
  :math:`\\mu \\to 0`) is LOZO's, which perturbs by :math:`\\epsilon U V^\\top` and
  divides by :math:`r` (LOZO also keeps :math:`V` for several steps; here both factors
  are fresh for every direction).

With :math:`E[u u^\\top] = I` the estimate :math:`r_\\mu(x, u)\\, u` is unbiased for the
gradient up to smoothing: on a quadratic, central differences are exact,
:math:`r = g^\\top u`, and :math:`E[(g^\\top u) u] = E[u u^\\top] g = g` for every family.
For i.i.d. zero-mean, unit-variance entries with fourth moment :math:`\\kappa`,

.. math:: \\mathrm{Var}[(g^\\top u) u_j] = \\|g\\|^2 + (\\kappa - 2) g_j^2

(Gaussian :math:`\\kappa = 3`; Rademacher :math:`\\kappa = 1`, always lower;
sparse :math:`\\kappa = 3/p`, higher as :math:`p` falls).

Key implementations. A typed key's implementation (``jax.random.key(seed, impl=...)``)
fixes the random stream; the estimators accept any implementation whose draws and key
derivation are exact under ``vmap``, so that a direction drawn in a batch equals the same
key's direction drawn alone (records are regenerated from their keys, and ``vmap`` over
seeds equals unbatched runs):

* ``"threefry2x32"`` (the default) and ``"philox4x32"``: counter-based, the same numbers
  on CPU, GPU and TPU and under any sharding.
* ``"rbg"`` (XLA's RngBitGenerator; key derivation as threefry): its numbers may differ
  across backends and XLA versions, and JAX draws a vmapped batch of rbg keys from the
  batch's first key. :func:`sample` therefore draws batched rbg keys one at a time
  (a batching rule that maps over the keys), which restores the equalities above.
* ``"unsafe_rbg"`` is refused at construction: its ``fold_in`` under ``vmap`` differs
  from ``fold_in`` alone, so a record's key could not be derived again.

On a CPU a threefry Gaussian costs several times less than an rbg one; the speed page
(``docs/results/overhead_large_d.md``, parts table) has the measured costs of one
direction drawn alone with each implementation.

References:
  Dang et al., FZOO: Fast Zeroth-Order Optimizer for Fine-Tuning Large Language Models
  towards Adam-Scale Speed, arXiv:2506.09034, 2025 (``"rademacher"``).
  Liu et al., Sparse MeZO: Less Parameters for Better Performance in Zeroth-Order LLM
  Fine-Tuning, arXiv:2402.15751, 2024 (``"sparse"``).
  Chen et al., Enhancing Zeroth-order Fine-tuning for Language Models with Low-rank
  Structures (LOZO), ICLR 2025, arXiv:2410.07698 (``"lowrank"``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.extend.random
import jax.numpy as jnp
import numpy as np

KINDS = ("gaussian", "sphere", "rademacher", "sparse", "lowrank")
_SPECS = "'gaussian', 'sphere', 'rademacher', 'sparse:P' (0 < P <= 1) or 'lowrank:R' (int R >= 1)"

# Up to this many numbers (128 Ki, 512 KiB in float32) a batch of directions is drawn in
# one vectorised call; above it, directions are drawn when and where they are used, in
# chunks of at most this many numbers (at least one direction; `batch_size`). On a CPU a
# vectorised draw of more than about 10^5 numbers costs more per number than separate
# draws (it leaves the caches), and predrawing would buy unused directions.
_BATCH_LIMIT = 1 << 17


def compute_dtype(leaf: Any) -> jnp.dtype:
    """The dtype directions and estimates use for a parameter leaf (>= float32)."""
    return jnp.promote_types(jnp.result_type(leaf), jnp.float32)


def optimised(leaf: Any) -> bool:
    """Whether a parameter leaf is optimised: real floating point (PRNG keys are carried)."""
    return bool(jnp.issubdtype(jnp.result_type(leaf), jnp.floating))


def is_key(leaf: Any) -> bool:
    """Whether a parameter leaf is an array of typed PRNG keys (carried unchanged)."""
    return bool(jnp.issubdtype(jnp.result_type(leaf), jax.dtypes.prng_key))


def dimension(like: Any) -> int:
    """Number of optimised scalars in the PyTree ``like`` (the paper's ``d``)."""
    return int(sum(np.prod(jnp.shape(x), dtype=np.int64) for x in jax.tree.leaves(like)
                   if optimised(x)))


@dataclasses.dataclass(frozen=True)
class Family:
    """A parsed ``directions=`` spec (static and hashable): see the module docstring."""

    name: str  # one of KINDS
    density: float = 1.0  # "sparse": the mask's probability p of keeping a coordinate
    rank: int = 0  # "lowrank": the rank r of a 2-D leaf's direction


def family(spec: Any) -> Family:
    """Parses a ``directions=`` spec: ``NAME`` or ``NAME:VALUE``, e.g. ``"sparse:0.1"``.

    Args:
      spec: ``"gaussian"``, ``"sphere"``, ``"rademacher"``, ``"sparse:P"`` with
        :math:`0 < P \\le 1` or ``"lowrank:R"`` with an integer :math:`R \\ge 1`.

    Returns:
      The :class:`Family` that :func:`sample` draws from.

    Example:
      >>> from zoaq_jax._src import directions
      >>> directions.family("sparse:0.1")
      Family(name='sparse', density=0.1, rank=0)

    Raises:
      ValueError: an unknown name, a missing or malformed value, a density outside
        ``(0, 1]`` or a rank below 1 (at construction, naming ``directions``).
    """
    if not isinstance(spec, str):
        raise TypeError(f"directions must be a string, one of {_SPECS}; got {spec!r}.")
    name, colon, value = spec.partition(":")
    if name not in KINDS:
        raise ValueError(f"directions must be one of {_SPECS}; got {spec!r}.")
    if name in ("sparse", "lowrank") and not colon:
        example = "'sparse:0.1'" if name == "sparse" else "'lowrank:4'"
        raise ValueError(f"directions={spec!r} needs a value after ':', e.g. {example}.")
    if name == "sparse":
        try:
            density = float(value)
        except ValueError:
            density = float("nan")
        if not 0 < density <= 1:
            raise ValueError(f"directions={spec!r}: the mask density P of 'sparse:P' must be "
                             "a number with 0 < P <= 1, e.g. 'sparse:0.1'.")
        return Family(name, density=density)
    if name == "lowrank":
        if not (value.isdigit() and int(value) >= 1):
            raise ValueError(f"directions={spec!r}: the rank R of 'lowrank:R' must be an "
                             "integer >= 1, e.g. 'lowrank:4'.")
        return Family(name, rank=int(value))
    if colon:
        raise ValueError(f"directions={spec!r}: {name!r} takes no ':' value.")
    return Family(name)


def estimator_scale(kind: Family, like: Any) -> float:
    """Factor that makes ``mean(r_i u_i)`` unbiased: ``d`` for sphere, else 1."""
    return float(dimension(like)) if kind.name == "sphere" else 1.0


def fits_in_batch(n: int, like: Any) -> bool:
    """Whether ``n`` directions shaped like ``like`` may be drawn in one batch."""
    return n * dimension(like) <= _BATCH_LIMIT


def batch_size(like: Any) -> int:
    """The most directions shaped like ``like`` that :func:`fits_in_batch` allows (at least 1).

    Drawn where they are used, larger batches go in chunks of this size: one vectorised
    draw of many large directions costs more per number than several smaller draws
    (``docs/results/overhead_large_d.md``).
    """
    return max(1, _BATCH_LIMIT // max(dimension(like), 1))


def _signs(key: jax.Array, shape: tuple[int, ...], dtype) -> jax.Array:
    """I.i.d. +-1 entries, one random bit each: 32 entries per 32-bit draw (the generator's
    cost is per word, so this is about 32 times fewer words than ``random.rademacher``)."""
    size = int(np.prod(shape, dtype=np.int64))
    words = jax.random.bits(key, (-(-size // 32),), jnp.uint32)
    bits = (words[:, None] >> jnp.arange(32, dtype=jnp.uint32)) & 1
    return (2 * bits.reshape(-1)[:size].astype(dtype) - 1).reshape(shape)


# A direction's random bits: Threefry-2x32's 20 rounds written out (:func:`_threefry2x32`)
# instead of JAX's CPU lowering of the hash, a loop of 5 iterations of 4 rounds. Under
# ``vmap`` that loop runs its kernels one after the other, 5 times per draw, and its body
# is a kernel over ``[batch, size]`` on which XLA's CPU compiler (LLVM) took up to seconds
# (docs/results/overhead_compile.md); written out, the rounds fuse with the conversion
# to floats: fewer kernels to compile and to run. The bits are JAX's, bit for bit
# (partitionable threefry: number ``n`` of a draw hashes the counter words ``(0, n)``),
# so are the directions; a step that uses them may still round a sum differently in the
# last bit, where XLA fuses the draw into it otherwise (docs/results/overhead_compile.md).
# The keys' own derivations (``fold_in``, ``split``) keep JAX's loop.
_THREEFRY = jax.extend.random.threefry_prng_impl
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))  # Threefry-2x32's, alternating by 4 rounds
_PARITY = 0x1BD11BDA  # its key schedule's constant


def _threefry2x32(key: jax.Array, x: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
    """Threefry-2x32, 20 rounds (Salmon et al., 2011; the hash of ``jax.random``'s default
    keys), of the counter words ``x`` under the two-word ``key``."""
    ks = (key[0], key[1], key[0] ^ key[1] ^ np.uint32(_PARITY))
    x0, x1 = x[0] + ks[0], x[1] + ks[1]
    for i in range(5):
        for r in _ROTATIONS[i % 2]:
            x0 = x0 + x1
            x1 = ((x1 << np.uint32(r)) | (x1 >> np.uint32(32 - r))) ^ x0
        x0 = x0 + ks[(i + 1) % 3]
        x1 = x1 + ks[(i + 2) % 3] + np.uint32(i + 1)
    return x0, x1


def _straight_bits(key_data: jax.Array, bit_width: int, shape: tuple[int, ...]) -> jax.Array:
    """``jax.random.bits`` of a partitionable threefry key, the hash written out."""
    size = int(np.prod(shape, dtype=np.int64))
    if size >= 1 << 32:  # counters beyond one word: JAX's own
        return _THREEFRY.random_bits(key_data, bit_width, shape)
    count = jax.lax.iota(jnp.uint32, size).reshape(shape)
    hi, lo = _threefry2x32(key_data, (jnp.zeros_like(count), count))
    dtype = jnp.dtype(f"uint{bit_width}")
    if bit_width == 64:
        return (hi.astype(dtype) << np.uint64(32)) | lo.astype(dtype)
    return (hi ^ lo).astype(dtype)


_STRAIGHT_THREEFRY = jax.extend.random.define_prng_impl(
    key_shape=_THREEFRY.key_shape, seed=_THREEFRY.seed, split=_THREEFRY.split,
    random_bits=_straight_bits, fold_in=_THREEFRY.fold_in,
    name="threefry2x32_straight", tag="fry20")


def _straight(key: jax.Array) -> jax.Array:
    """``key`` as a key whose draws compute their bits with :func:`_straight_bits` (a
    partitionable threefry key: the same numbers); any other key unchanged."""
    if (str(jax.random.key_impl(key)) != _THREEFRY.name
            or not jax.config.jax_threefry_partitionable):  # type: ignore[attr-defined]
        return key
    return jax.random.wrap_key_data(jax.random.key_data(key), impl=_STRAIGHT_THREEFRY)


def _draw_leaf(kind: Family, key: jax.Array, shape: tuple[int, ...], dtype) -> jax.Array:
    """One leaf of a direction of ``kind`` (before the sphere's normalisation)."""
    key = _straight(key)
    if kind.name == "rademacher":
        return _signs(key, shape, dtype)
    if kind.name == "sparse":
        key, mask_key = jax.random.split(key)
        keep = jax.random.bernoulli(mask_key, kind.density, shape)
        return jnp.where(keep, jax.random.normal(key, shape, dtype) / np.sqrt(kind.density), 0)
    if kind.name == "lowrank" and len(shape) == 2:
        u_key, v_key = jax.random.split(key)
        u = jax.random.normal(u_key, (shape[0], kind.rank), dtype)
        v = jax.random.normal(v_key, (shape[1], kind.rank), dtype)
        return jnp.matmul(u, v.T, precision=jax.lax.Precision.HIGHEST) / np.sqrt(kind.rank)
    return jax.random.normal(key, shape, dtype)


def check_impl(impl: str) -> None:
    """Raises unless keys of the PRNG implementation ``impl`` can regenerate directions.

    ``"unsafe_rbg"`` is refused: its ``fold_in`` is not exact under ``vmap`` (the keys of
    a step's directions derived in one batch differ from the same keys derived one at a
    time), so a record's direction could not be regenerated from its key.
    """
    if impl == "unsafe_rbg":
        raise ValueError(
            "key: 'unsafe_rbg' keys cannot be used: their fold_in is not exact under vmap, "
            "so the directions the estimators regenerate from record keys would differ from "
            "the ones they drew. Use jax.random.key(seed) (threefry2x32, the default), or "
            "impl='rbg' or 'philox4x32' (see zoaq_jax._src.directions).")


def _leaf_index(like: Any) -> list[int]:
    """The indices of the optimised leaves of ``like`` among all its leaves."""
    return [j for j, x in enumerate(jax.tree.leaves(like)) if optimised(x)]


def leaf_keys(keys: jax.Array, like: Any) -> jax.Array:
    """The keys of the optimised leaves of the directions of ``keys``: shape
    ``keys.shape + (L,)``, entry ``i`` being ``fold_in(key, j)`` for the ``i``-th of the
    ``L`` optimised leaves, leaf ``j`` of ``like``.

    Derived in one batch (one generator loop, which XLA compiles once, however many keys
    and leaves): the integers that derivations one at a time give.
    """
    index = np.asarray(_leaf_index(like), np.uint32)
    if len(index) == 1:  # one leaf: no axis to batch over (fewer kernels)
        def fold(key, index):
            return jax.random.fold_in(key, index[0])[None]
    else:
        fold = jax.vmap(jax.random.fold_in, (None, 0))
    for _ in range(jnp.ndim(keys)):
        fold = jax.vmap(fold, (0, None))
    return fold(keys, index)


def sample(kind: Family, key: jax.Array, like: Any) -> Any:
    """Draws one direction shaped like ``like`` from ``key`` (one ``fold_in`` a leaf: on a
    tree of 32 leaves R-AdaZO's step compiled faster so than with :func:`leaf_keys`,
    ``docs/results/overhead_compile.md``)."""
    return sample_leaves(kind, [jax.random.fold_in(key, j) for j in _leaf_index(like)], like)


def sample_leaves(kind: Family, keys: Any, like: Any) -> Any:
    """Draws the direction whose per-leaf keys are ``keys`` (``[L]``, :func:`leaf_keys`,
    or a list of ``L`` keys)."""
    if len(keys) and str(jax.random.key_impl(keys[0])) in _INEXACT_UNDER_VMAP:
        return _sample_exact(kind, like, jnp.stack(list(keys)))
    return _sample(kind, keys, like)


# XLA's RngBitGenerator keys: under vmap, JAX draws the whole batch from the first key of
# the batch, so these draws go through a batching rule that maps over the keys instead.
_INEXACT_UNDER_VMAP = ("rbg",)


def _sample_exact(kind: Family, like: Any, keys: jax.Array) -> Any:
    """:func:`_sample` with a batching rule that draws batched keys one at a time
    (``lax.map``), so that a batched draw equals the unbatched draws of its keys."""
    impl = jax.random.key_impl(keys)

    @jax.custom_batching.custom_vmap
    def draw(data):
        return _sample(kind, jax.random.wrap_key_data(data, impl=impl), like)

    @draw.def_vmap
    def draw_batched(axis_size, in_batched, data):
        del axis_size
        (batched,) = in_batched
        out = jax.lax.map(draw, data) if batched else draw(data)
        return out, jax.tree.map(lambda _: batched, out)

    return draw(jax.random.key_data(keys))


def _sample(kind: Family, keys: jax.Array, like: Any) -> Any:
    leaves, treedef = jax.tree.flatten(like)
    z: list[jax.Array | None] = [None] * len(leaves)
    for row, j in enumerate(_leaf_index(like)):
        z[j] = _draw_leaf(kind, keys[row], jnp.shape(leaves[j]), compute_dtype(leaves[j]))
    if kind.name == "sphere":
        norm = jnp.sqrt(sum(jnp.sum(jnp.square(zi)) for zi in z if zi is not None))
        z = [None if zi is None else zi / norm.astype(zi.dtype) for zi in z]
    return jax.tree.unflatten(treedef, z)


def sample_many(kind: Family, keys: jax.Array, like: Any) -> Any:
    """Draws one direction per key; every leaf gains a leading axis of ``len(keys)``.
    ``keys`` may also be the directions' per-leaf keys, ``[n, L]`` (:func:`leaf_keys`)."""
    if jnp.ndim(keys) == 1:
        return jax.vmap(lambda k: sample(kind, k, like))(keys)
    return jax.vmap(lambda k: sample_leaves(kind, k, like))(keys)


def pick_rows(batch: Any, rows: jax.Array) -> Any:
    """Rows ``rows`` of every leaf of ``batch`` (its leading axis), by a one-hot product.

    Exact for finite directions (one product by 1, the others by 0). XLA fuses a slice or
    a gather with the computation of what it reads, so a drawn batch that several uses
    slice would be drawn again in each (its keys hashed again); a product reads the batch
    once it is computed, and costs less on CPU than a gather of a few rows
    (``docs/results/overhead.md``).
    """
    n = jax.tree.leaves(batch)[0].shape[0]
    pick = (jnp.asarray(rows)[:, None] == jnp.arange(n)).astype(jnp.float32)
    return jax.tree.map(lambda x: jnp.tensordot(
        pick.astype(x.dtype), x, axes=1, precision=jax.lax.Precision.HIGHEST), batch)


def weighted_sum(coeffs: jax.Array, directions: Any) -> Any:
    """Returns ``sum_i coeffs[i] * directions[i]`` over the leading axis.

    Written as a product and a reduction (not a ``dot``): XLA then adds in the same order
    whether or not the computation is batched, so these sums do not change under
    ``vmap`` (the objective itself may still round differently when batched; see the
    design notes). The same holds for :func:`dot` and :func:`norm`.
    """

    def one(u):
        c = coeffs.astype(u.dtype).reshape(coeffs.shape + (1,) * (u.ndim - 1))
        return jnp.sum(c * u, axis=0)

    return jax.tree.map(one, directions)


def dot(a: Any, b: Any) -> jax.Array:
    """Inner product of two PyTrees of the same structure."""
    total = sum(jnp.sum(x * y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))
    return total  # type: ignore[return-value]  # (the int 0 for a tree without leaves)


def norm(a: Any) -> jax.Array:
    """Euclidean norm of a PyTree."""
    return jnp.sqrt(dot(a, a))


def regenerate_sums(
    kind: Family, keys: Callable[[jax.Array, int], jax.Array], coeffs: tuple[jax.Array, ...],
    like: Any, count: jax.Array,
) -> tuple[Any, ...]:
    """Returns ``sum_{i < count} c[i] * u(key_i)`` for each ``c`` in ``coeffs``.

    ``keys(first, size)`` returns the keys of records ``first .. first + size - 1``, or
    their per-leaf keys (:func:`sample_many`), so they are derived only when drawn. Each
    direction is regenerated from its key once and serves every coefficient vector. The
    records are drawn in chunks inside a ``lax.while_loop`` whose trip count follows
    ``count`` (traced): all of them in one vectorised call when :func:`fits_in_batch`
    says so, else one at a time (memory ``O(d)`` for any number of records).
    ``count = 0`` draws nothing and returns zeros; under ``vmap`` the loop runs for the
    largest ``count`` of the batch, so a ``count`` that is zero in every lane costs no
    draw (unlike a ``lax.cond`` on a batched predicate, which evaluates both branches).
    """
    n = coeffs[0].shape[0]
    chunk = n if fits_in_batch(n, like) else 1

    def add_chunk(carry):
        first, sums = carry
        live = first + jnp.arange(chunk) < count
        # Tied to the loop counter: else XLA hoists a whole-buffer draw (chunk == n) out of
        # the loop and pays for it on every call, whatever the count.
        _, chunk_keys = jax.lax.optimization_barrier((first, keys(first, chunk)))
        u = sample_many(kind, chunk_keys, like)
        return first + chunk, tuple(
            jax.tree.map(jnp.add, s, weighted_sum(
                jnp.where(live, jax.lax.dynamic_slice_in_dim(c, first, chunk), 0), u))
            for s, c in zip(sums, coeffs))

    start = (jnp.zeros((), jnp.int32), tuple(zeros(like) for _ in coeffs))
    return jax.lax.while_loop(lambda carry: carry[0] < count, add_chunk, start)[1]


def perturb(params: Any, directions: Any, step: float | jax.Array) -> Any:
    """Returns ``params + step * directions`` in the compute dtypes (>= float32).

    The perturbed point is not rounded back to a low-precision leaf dtype: rounding
    ``x + mu u`` to bfloat16 (8 significant bits) loses every perturbation below half
    the spacing at ``x`` (``|x| / 256``), so the differences would be zero. Carried
    leaves (PRNG keys, whose direction is ``None``) are passed unchanged.
    ``directions`` may carry extra leading (batch) axes; ``step`` broadcasts against them.
    """
    flat, treedef = jax.tree.flatten(params)
    flat_u = treedef.flatten_up_to(directions)  # type: ignore[attr-defined]
    batch = next((u.shape[: u.ndim - jnp.ndim(p)] for p, u in zip(flat, flat_u)
                  if u is not None), ())
    return jax.tree.unflatten(treedef, [
        jnp.broadcast_to(p, batch + jnp.shape(p)) if u is None
        else (jnp.asarray(p).astype(u.dtype) + step * u).astype(u.dtype)
        for p, u in zip(flat, flat_u)])


def promote(params: Any) -> Any:
    """``params`` with optimised leaves in their compute dtypes (the perturbed points' dtypes)."""
    return jax.tree.map(
        lambda p: jnp.asarray(p, compute_dtype(p)) if optimised(p) else p, params)


def zeros(like: Any) -> Any:
    """A zero estimate shaped like ``like`` in the compute dtypes (``None`` on carried leaves)."""
    return jax.tree.map(
        lambda x: jnp.zeros(jnp.shape(x), compute_dtype(x)) if optimised(x) else None, like)


def tree_max(tree: Any) -> jax.Array:
    """The largest entry of ``tree``'s leaves that are not empty."""
    return jnp.max(jnp.stack([jnp.max(x) for x in jax.tree.leaves(tree) if jnp.size(x)]))


def cast_like(tree: Any, params: Any) -> Any:
    """``tree`` (compute dtypes, ``None`` on carried leaves) cast to the params' dtypes.

    A value beyond the range of a narrower dtype saturates at its largest finite value
    instead of becoming ``inf`` (float16 tops out at 65504, while an estimate in float32
    easily exceeds it); within range the cast is an ordinary rounding.
    """
    def one(p, t):
        if t is None:
            return None
        dtype = jnp.result_type(p)
        if jnp.finfo(dtype).max < jnp.finfo(t.dtype).max:
            t = jnp.clip(t, jnp.finfo(dtype).min, jnp.finfo(dtype).max)
        return t.astype(dtype)

    return jax.tree.map(one, params, tree)
