r"""Running sums of the retained records' contributions: O(1) direction draws a step.

ZoAQ and ZoAR pool a buffer of retained records (:mod:`zoaq_jax._src.history`) into
every estimate. Instead of regenerating all retained directions every step, the state
keeps what the estimate needs from them, the running sums

.. math:: S = \sum_{i \in \mathcal R} c_i u_i

(one per coefficient vector: ZoAQ's responses; ZoAR's centred values and ones), next to
the buffer of keys and responses. A step adds the kept fresh records' contributions
(their directions were just drawn for the candidate), subtracts the contributions of the
records it evicts, regenerating only those directions (:func:`leaving_sums`), and every
``refresh`` steps replaces the sums by their exact recomputation from the keys
(:func:`refreshed`), so that rounding cannot accumulate: in float32 the running sums
stay within :math:`2 (N + 1) \epsilon \sum_i |c_i| \|u_i\|` of the exact sums after
:math:`N \le` ``refresh`` updates (see ``docs/design.md`` and ``tests/test_retained.py``).
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


def leaving_sums(
    kind: str, schedule: ledger.KeySchedule, book: ledger.QueryLedger, like: Any,
    buffer: history.History, keep: jax.Array, responses: jax.Array,
    n_before: jax.Array, n_after: jax.Array, size: int,
    coeffs: Callable[[jax.Array], tuple[jax.Array, ...]],
) -> tuple[Any, ...]:
    """Sums of ``c * u`` over the records that kept fresh records evict (:func:`history.leaving`).

    Args:
      kind: the directions' distribution.
      schedule: the key schedule; ``book`` the ledger of the current step.
      like: the params.
      buffer: the buffer before the step's push (capacity >= 1).
      keep: ``[slots]`` the step's fresh records that will be kept (finite so far).
      responses: ``[slots]`` their responses, as they will be stored.
      n_before, n_after, size: see :func:`history.leaving`.
      coeffs: maps the leaving records' stored responses ``[size]`` to the coefficient
        vectors of the sums.

    Returns:
      One sum per coefficient vector, each regenerating the ``size`` directions once.
    """
    steps, index, values, live = history.leaving(
        buffer, jnp.arange(keep.shape[0], dtype=jnp.int32), responses, book.step, keep,
        n_before, n_after, size)
    u = dirs.sample_many(kind, schedule.record_keys(book, steps, index), like)
    return tuple(dirs.weighted_sum(jnp.where(live, c, 0.0), u) for c in coeffs(values))


def running(sums: tuple[Any, ...], added: tuple[Any, ...], left: tuple[Any, ...],
            restart: jax.Array) -> tuple[Any, ...]:
    """``sums + added - left``, or ``added`` alone when ``restart``: when the new records
    fill the whole buffer, the sums start again from their contributions, without any
    rounding carried over (so ZoAR without history is exactly the fixed estimator)."""
    return tuple(jax.tree.map(lambda s, a, r: jnp.where(restart, a, s + a - r), *terms)
                 for terms in zip(sums, added, left))


def refreshed(
    sums: tuple[Any, ...], kind: str, schedule: ledger.KeySchedule, book: ledger.QueryLedger,
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
    def keys(first, size):
        return schedule.record_keys(
            book, jax.lax.dynamic_slice_in_dim(buffer.steps, first, size),
            jax.lax.dynamic_slice_in_dim(buffer.index, first, size))

    count = jnp.where(due, buffer.responses.shape[0], 0)
    recomputed = dirs.regenerate_sums(kind, keys, exact, like, count)
    return tuple(jax.tree.map(lambda a, b: jnp.where(due, b, a), s, r)
                 for s, r in zip(sums, recomputed))
