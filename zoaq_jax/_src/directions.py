"""Random search directions, regenerated from PRNG keys instead of stored.

A direction is a PyTree shaped like the parameters. Leaf ``i`` of the direction drawn
from key ``k`` is ``normal(fold_in(k, i), leaf.shape)``, so a record needs only its key:
the full direction is recomputed whenever it is needed, and no state array ever holds
``n_hist * d`` numbers. Directions are drawn in at least float32, whatever the leaf
dtype, so that bf16 parameters still get well-resolved directions. Only real
floating-point leaves are optimised (Python floats included); PRNG key leaves are
carried: their direction, estimate and update components are ``None`` (an empty
subtree, which Optax's transformations skip), and the objective receives them unchanged.

Two distributions are offered:

* ``"gaussian"``: :math:`u \\sim \\mathcal N(0, I_d)`, so :math:`E[u u^\\top] = I`.
* ``"sphere"``: :math:`u` uniform on the unit sphere, so :math:`E[u u^\\top] = I/d`; the
  estimators multiply by :func:`estimator_scale` ``= d`` to stay unbiased (the R-AdaZO
  paper's form).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

KINDS = ("gaussian", "sphere")

# Up to this many numbers (128 Ki, 512 KiB in float32) a batch of directions is drawn in
# one vectorised call; above it, directions are drawn when and where they are used. On a
# CPU a vectorised draw of more than about 10^5 numbers costs more per number than
# separate draws (it leaves the caches), and predrawing would buy unused directions.
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


def estimator_scale(kind: str, like: Any) -> float:
    """Factor that makes ``mean(r_i u_i)`` unbiased: ``d`` for sphere, 1 for gaussian."""
    return float(dimension(like)) if kind == "sphere" else 1.0


def fits_in_batch(n: int, like: Any) -> bool:
    """Whether ``n`` directions shaped like ``like`` may be drawn in one batch."""
    return n * dimension(like) <= _BATCH_LIMIT


def sample(kind: str, key: jax.Array, like: Any) -> Any:
    """Draws one direction shaped like ``like`` from ``key``."""
    leaves, treedef = jax.tree.flatten(like)
    z = [
        jax.random.normal(jax.random.fold_in(key, i), jnp.shape(x), compute_dtype(x))
        if optimised(x) else None
        for i, x in enumerate(leaves)
    ]
    if kind == "sphere":
        norm = jnp.sqrt(sum(jnp.sum(jnp.square(zi)) for zi in z if zi is not None))
        z = [None if zi is None else zi / norm.astype(zi.dtype) for zi in z]
    return jax.tree.unflatten(treedef, z)


def sample_many(kind: str, keys: jax.Array, like: Any) -> Any:
    """Draws one direction per key; every leaf gains a leading axis of ``len(keys)``."""
    return jax.vmap(lambda k: sample(kind, k, like))(keys)


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
    return sum(jnp.sum(x * y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def norm(a: Any) -> jax.Array:
    """Euclidean norm of a PyTree."""
    return jnp.sqrt(dot(a, a))


def regenerate_sums(
    kind: str, keys: Callable[[jax.Array, int], jax.Array], coeffs: tuple[jax.Array, ...],
    like: Any, count: jax.Array,
) -> tuple[Any, ...]:
    """Returns ``sum_{i < count} c[i] * u(key_i)`` for each ``c`` in ``coeffs``.

    ``keys(first, size)`` returns the keys of records ``first .. first + size - 1`` (so
    they are derived only when drawn). Each direction is regenerated from its key once
    and serves every coefficient vector. The records are drawn in chunks inside a
    ``lax.while_loop`` whose trip count follows ``count`` (traced): all of them in one
    vectorised call when :func:`fits_in_batch` says so, else one at a time (memory
    ``O(d)`` for any number of records). ``count = 0`` draws nothing and returns
    zeros; under ``vmap`` the loop runs for the largest ``count`` of the batch, so a
    ``count`` that is zero in every lane costs no draw (unlike a ``lax.cond`` on a
    batched predicate, which evaluates both branches).
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


def perturb(params: Any, directions: Any, step: jax.Array) -> Any:
    """Returns ``params + step * directions`` in the compute dtypes (>= float32).

    The perturbed point is not rounded back to a low-precision leaf dtype: rounding
    ``x + mu u`` to bfloat16 (8 significant bits) loses every perturbation below half
    the spacing at ``x`` (``|x| / 256``), so the differences would be zero. Carried
    leaves (PRNG keys, whose direction is ``None``) are passed unchanged.
    ``directions`` may carry extra leading (batch) axes; ``step`` broadcasts against them.
    """
    flat, treedef = jax.tree.flatten(params)
    flat_u = treedef.flatten_up_to(directions)
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
