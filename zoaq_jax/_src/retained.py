r"""Running sums of the retained records' contributions: O(1) direction draws a step.

ZoAQ and ZoAR pool a buffer of retained records (:mod:`zoaq_jax._src.history`) into
every estimate. Instead of regenerating all retained directions every step, the state
keeps what the estimate needs from them, the running sums

.. math:: S = \sum_{i \in \mathcal R} c_i u_i

(one per coefficient vector: ZoAQ's responses; ZoAR's centred values and ones), next to
the buffer of keys and responses. A step adds the kept fresh records' contributions
(their directions were just drawn for the candidate), subtracts the contributions of the
records it evicts, drawing only those directions (:func:`leaving_sums`), and every
``refresh`` steps replaces the sums by their exact recomputation from the keys
(:func:`refreshed`), so that rounding cannot accumulate: after :math:`N \le` ``refresh``
running updates of at most :math:`K` added and :math:`K` evicted records, a float32
sum is within :math:`N (K + 3) u B` of the exact one, per component, with
:math:`u = 2^{-24}` and :math:`B` the largest :math:`\sum |c_i| |u_i|` over two
consecutive buffers (``docs/design.md``, ``tests/library/test_retained.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from zoaq_jax._src import checks
from zoaq_jax._src import directions as dirs
from zoaq_jax._src import history, ledger

REFRESH = 1000  # default steps between exact recomputations


def check_refresh(refresh: Any) -> None:
    """Raises unless ``refresh`` is an int ``>= 1`` (a traced hyperparameter is accepted)."""
    checks.count("refresh", refresh, 1)


def _keys(schedule: ledger.KeySchedule, book: ledger.QueryLedger, steps: jax.Array,
          index: jax.Array) -> Callable[[jax.Array, int], jax.Array]:
    """``keys(first, size)``: the keys of records ``first .. first + size - 1`` of the
    ``(steps, index)`` arrays, derived only when :func:`directions.regenerate_sums` draws."""
    def keys(first, size):
        return schedule.record_keys(book, jax.lax.dynamic_slice_in_dim(steps, first, size),
                                    jax.lax.dynamic_slice_in_dim(index, first, size))

    return keys


def leaving_sums(
    kind: dirs.Family, schedule: ledger.KeySchedule, book: ledger.QueryLedger, like: Any,
    buffer: history.History, keep: jax.Array, responses: jax.Array,
    coeffs: Callable[[jax.Array], tuple[jax.Array, ...]], drawn: Any = None,
) -> tuple[Any, ...]:
    """Sums of ``c * u`` over the records that the step's kept records evict.

    Args:
      kind: the directions' distribution.
      schedule: the key schedule; ``book`` the ledger of the current step.
      like: the params.
      buffer: the buffer before the step's push (capacity >= 1).
      keep: ``[slots]`` the step's fresh records that are kept.
      responses: ``[slots]`` their responses, as the buffer stores them.
      coeffs: maps the leaving records' stored responses ``[slots]`` to the coefficient
        vectors of the sums.
      drawn: ``(fresh, oldest)``, the step's fresh directions and those of the buffer's
        oldest records (:func:`history.oldest`), when the step drew them in advance;
        else the leaving directions are regenerated, one vectorised batch or one at a
        time (:func:`directions.regenerate_sums`), only as many as leave.

    Returns:
      One sum per coefficient vector.
    """
    slots = keep.shape[0]
    steps, index, values, live = history.leaving(
        buffer, jnp.arange(slots, dtype=jnp.int32), responses, book.step, keep, slots)
    vectors = tuple(jnp.where(live, c, 0.0) for c in coeffs(values))
    if drawn is None:
        count = jnp.sum(live, dtype=jnp.int32)
        return dirs.regenerate_sums(kind, _keys(schedule, book, steps, index), vectors, like,
                                    count)
    # The buffer's j-th oldest record is row j, fresh record i row n_old + i (the order
    # of the step's batch). The rows are picked by a one-hot product, exact for finite
    # directions (one product by 1, the others by 0): XLA's CPU gather of a few rows cost
    # more than the rest of ZoAQ's history bookkeeping (docs/results/overhead.md).
    fresh, old = drawn
    n_old = jax.tree.leaves(old)[0].shape[0]
    row = jnp.where(steps == book.step, n_old + index, jnp.arange(slots))
    row = jnp.minimum(row, slots + n_old - 1)  # past the live prefix: any row, weight 0
    pick = (row[:, None] == jnp.arange(slots + n_old)).astype(jnp.float32)
    u = jax.tree.map(lambda f, o: jnp.tensordot(
        pick.astype(f.dtype), jnp.concatenate([o, f]), axes=1,
        precision=jax.lax.Precision.HIGHEST), fresh, old)
    return tuple(dirs.weighted_sum(c, u) for c in vectors)


def running(sums: tuple[Any, ...], added: tuple[Any, ...], left: tuple[Any, ...],
            restart: jax.Array) -> tuple[Any, ...]:
    """``sums + added - left``, or ``added`` alone when ``restart``: when the new records
    fill the whole buffer, the sums start again from their contributions, without any
    rounding carried over (so ZoAR without history is exactly the fixed estimator)."""
    return tuple(jax.tree.map(lambda s, a, r: jnp.where(restart, a, s + a - r), *terms)
                 for terms in zip(sums, added, left))


def refreshed(
    sums: tuple[Any, ...], kind: dirs.Family, schedule: ledger.KeySchedule, book: ledger.QueryLedger,
    like: Any, buffer: history.History, exact: tuple[jax.Array, ...], refresh: Any,
) -> tuple[Any, ...]:
    """``sums``, or their exact recomputation from ``buffer`` when one is due.

    A recomputation is due after every ``refresh``-th step (``book.step + 1`` a multiple
    of ``refresh``) and whenever a running sum is not finite (an overflow would
    otherwise stay until the next refresh). It regenerates every retained direction in
    a dynamic-trip-count loop (:func:`directions.regenerate_sums`), so steps without
    one draw nothing, also under ``vmap``.

    Args:
      sums: the running sums after the step.
      kind, schedule, book, like: as in :func:`leaving_sums`.
      buffer: the buffer after the step's push.
      exact: ``[capacity]`` coefficient vectors, one per sum, zero on empty slots.
      refresh: steps between recomputations.
    """
    finite = jnp.stack([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(sums)])
    due = ((book.step + 1) % refresh == 0) | ~jnp.all(finite)
    count = jnp.where(due, buffer.responses.shape[0], 0)
    recomputed = dirs.regenerate_sums(kind, _keys(schedule, book, buffer.steps, buffer.index),
                                      exact, like, count)
    return tuple(jax.tree.map(lambda a, b: jnp.where(due, b, a), s, r)
                 for s, r in zip(sums, recomputed))
