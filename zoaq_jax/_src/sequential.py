"""Objectives evaluated one perturbation at a time, at the memory of one forward pass.

An estimator evaluates its ``2K`` (or ``K + 1``) perturbed points as one ``jax.vmap``
of the objective, so a vectorized model holds the activations of every perturbation at
once: memory grows with ``K``. :func:`sequential` wraps the objective so that any
``vmap`` of it runs as a loop (``lax.map``), one point after another, the way MeZO
evaluates ``f(x + mu u)`` and ``f(x - mu u)`` in place.

A plain loop is not enough: XLA hoists every computation of the loop body that does not
depend on the iteration (loop-invariant code motion) out of the loop, and keeps its
results alive for the whole loop. For a language model with adapters on some layers,
that is everything the adapters do not touch (token embeddings, the frozen layers' keys
and values, ...), so the loop's memory exceeds a forward pass's. The wrapper passes the
loop-invariant arguments through ``lax.optimization_barrier`` together with each
iteration's slice, so they look iteration-dependent, nothing is hoisted, and the
activations held stay those of one pass whatever ``K`` is
(``tests/library/test_sequential.py``; ``docs/results/llm.md`` measures a step's memory
on the benchmark's model). The price is that invariant work is recomputed in
every iteration, as a forward pass recomputes it anyway.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax


def sequential(value_fn: Callable[..., jax.Array]) -> Callable[..., jax.Array]:
    """``value_fn``, but any ``jax.vmap`` of it runs one mapped slice at a time.

    .. math::

      \\mathrm{vmap}(f)(x_1, \\dots, x_n) = (f(x_1), \\dots, f(x_n))
      \\text{, computed as a loop over } i

    Compiled temp memory of a vmapped call is that of one call (plus the stacked
    outputs), instead of ``n`` times it; time is ``n`` calls in sequence. Every level of
    nested ``vmap`` (perturbations, seeds) runs as a loop. Values equal the vectorized
    ones up to floating-point reassociation. Positional and keyword arguments must be
    arrays (or PyTrees of arrays); the wrapper keeps ``value_fn``'s signature, so an
    estimator forwards the same data keywords to it. Reverse-mode differentiation
    through the wrapper is not supported (``custom_vmap``); differentiate ``value_fn``
    itself.

    Args:
      value_fn: the objective, ``value_fn(params, **data) -> scalar``.

    Returns:
      The wrapped objective, to pass as ``value_fn=`` to any estimator.

    Example:
      >>> import jax, jax.numpy as jnp, zoaq_jax
      >>> def loss(w, x):
      ...     return jnp.sum(jnp.tanh(x @ w) ** 2)
      >>> x = jnp.ones((4, 3))
      >>> batched = jax.vmap(zoaq_jax.sequential(loss), in_axes=(0, None))
      >>> ws = jnp.stack([jnp.zeros(3), jnp.ones(3)])
      >>> print([round(float(v), 3) for v in batched(ws, x)])
      [0.0, 3.961]

    References:
      Malladi et al., Fine-Tuning Language Models with Just Forward Passes (MeZO),
      NeurIPS 2023 (in-place perturbations, inference-level memory).
    """

    @jax.custom_batching.custom_vmap
    def call(args, kwargs):
        return value_fn(*args, **kwargs)

    @call.def_vmap
    def rule(axis_size, in_batched, args, kwargs):
        del axis_size
        leaves, treedef = jax.tree.flatten((args, kwargs))
        flags = jax.tree.leaves(tuple(in_batched))
        mapped = [x for x, b in zip(leaves, flags) if b]
        fixed = [x for x, b in zip(leaves, flags) if not b]

        def one(sliced):
            # The barrier ties the invariant inputs to this iteration's slice, so XLA
            # cannot hoist (and keep alive) the work that depends on them alone.
            sliced, invariant = jax.lax.optimization_barrier((sliced, fixed))
            parts, rest = iter(sliced), iter(invariant)
            full = [next(parts) if b else next(rest) for b in flags]
            return call(*jax.tree.unflatten(treedef, full))

        out = jax.lax.map(one, mapped)
        return out, jax.tree.map(lambda _: True, out)

    @functools.wraps(value_fn)
    def wrapped(*args, **kwargs):
        return call(args, kwargs)

    return wrapped
