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
consecutive buffers (``docs/design/retained.md``, ``tests/library/test_retained.py``).
:func:`retain` is that call sequence, written once for every estimator that retains
records (the FIFO retention policy of :mod:`zoaq_jax._src.retention` and ZoAR).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp

from zoaq_jax._src import checks
from zoaq_jax._src import directions as dirs
from zoaq_jax._src import history, ledger

REFRESH = 1000  # default steps between exact recomputations


class Source(NamedTuple):
    """Where a step's directions come from: what regenerates a record's direction."""

    family: dirs.Family  # the directions' distribution (static)
    schedule: ledger.KeySchedule  # the run's key schedule (static)
    book: ledger.QueryLedger  # the ledger of the current step (before it advances)
    like: chex.ArrayTree  # the params
    # the directions of the buffer's oldest records, then the fresh ones, if predrawn
    drawn: chex.ArrayTree | None = None
    # (fresh [slots, L], buffer [capacity, L] oldest first): the directions' per-leaf keys
    # the step derived in one batch (ledger.KeySchedule.step_and_record_keys), if it did
    # (also where the directions themselves are not drawn in advance)
    keys: tuple[jax.Array, jax.Array] | None = None


def check_refresh(refresh: int | jax.Array) -> None:
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


def _picked_keys(source: Source, steps: jax.Array, index: jax.Array, age: jax.Array
                 ) -> Callable[[jax.Array, int], jax.Array]:
    """``keys(first, size)``: the per-leaf keys of records ``(steps, index)``, picked from
    those the step derived (``source.keys``) instead of derived again: a record of this
    step is fresh record ``index``, any other the buffer's record at position ``age``
    oldest first. The same integers (an empty slot names record ``(0, 0)``, which at
    step 0 is fresh record 0), without derivations of their own, which XLA compiles as
    three more threefry loops."""
    assert source.keys is not None  # callers pass a source whose step derived them
    fresh, old = source.keys
    picked = jnp.where((steps == source.book.step)[:, None],
                       fresh[jnp.minimum(index, fresh.shape[0] - 1)],
                       old[jnp.minimum(age, old.shape[0] - 1)])

    def keys(first, size):
        return jax.lax.dynamic_slice_in_dim(picked, first, size)

    return keys


def _pushed_keys(source: Source, buffer: history.History, records: history.History
                 ) -> Callable[[jax.Array, int], jax.Array]:
    """:func:`_picked_keys` of the slots of ``records``, ``buffer`` after the step's push."""
    capacity = buffer.responses.shape[0]
    age = (jnp.arange(capacity, dtype=jnp.int32) - buffer.head + buffer.size) % capacity
    return _picked_keys(source, records.steps, records.index, age)


def old_rows(drawn: chex.ArrayTree | None, slots: int) -> int:
    """How many rows of a step's batch of directions ``drawn`` (the buffer's oldest
    records, then the step's ``slots`` fresh ones: :attr:`Source.drawn`) hold retained
    records; 0 without a batch."""
    return 0 if drawn is None else jax.tree.leaves(drawn)[0].shape[0] - slots


def leaving_sums(
    source: Source, buffer: history.History, keep: jax.Array, responses: jax.Array,
    coeffs: Callable[[jax.Array], tuple[jax.Array, ...]],
) -> tuple[chex.ArrayTree, ...]:
    """Sums of ``c * u`` over the records that the step's kept records evict.

    Args:
      source: the step's :class:`Source`; with ``source.drawn`` (the directions of the
        buffer's oldest records, :func:`history.oldest`, then the step's fresh ones,
        drawn in advance) the leaving directions are picked from them, else they are
        regenerated, one vectorised batch or one at a time
        (:func:`directions.regenerate_sums`), only as many as leave.
      buffer: the buffer before the step's push (capacity >= 1).
      keep: ``[slots]`` the step's fresh records that are kept.
      responses: ``[slots]`` their responses, as the buffer stores them.
      coeffs: maps the leaving records' stored responses ``[slots]`` to the coefficient
        vectors of the sums.

    Returns:
      One sum per coefficient vector.
    """
    slots = keep.shape[0]
    book = source.book
    steps, index, values, live = history.leaving(
        buffer, jnp.arange(slots, dtype=jnp.int32), responses, book.step, keep, slots)
    vectors = tuple(jnp.where(live, c, 0.0) for c in coeffs(values))
    if source.drawn is None:
        count = jnp.sum(live, dtype=jnp.int32)
        if source.keys is None:
            keys = _keys(source.schedule, book, steps, index)
        else:  # the sequence's first positions: the buffer's records oldest first
            keys = _picked_keys(source, steps, index, jnp.arange(slots, dtype=jnp.int32))
        return dirs.regenerate_sums(source.family, keys, vectors, source.like, count)
    # The buffer's j-th oldest record is row j, fresh record i row n_old + i (the order
    # of the step's batch), picked by a one-hot product (:func:`directions.pick_rows`).
    n_old = old_rows(source.drawn, slots)
    row = jnp.where(steps == book.step, n_old + index, jnp.arange(slots))
    row = jnp.minimum(row, slots + n_old - 1)  # past the live prefix: any row, weight 0
    u = dirs.pick_rows(source.drawn, row)
    return tuple(dirs.weighted_sum(c, u) for c in vectors)


def running(sums: tuple[chex.ArrayTree, ...], added: tuple[chex.ArrayTree, ...],
            left: tuple[chex.ArrayTree, ...], restart: jax.Array) -> tuple[chex.ArrayTree, ...]:
    """``sums + added - left``, or ``added`` alone when ``restart``: when the new records
    fill the whole buffer, the sums start again from their contributions, without any
    rounding carried over (so ZoAR without history is exactly the fixed estimator)."""
    return tuple(jax.tree.map(lambda s, a, r: jnp.where(restart, a, s + a - r), *terms)
                 for terms in zip(sums, added, left))


def refreshed(
    sums: tuple[chex.ArrayTree, ...], source: Source, buffer: history.History,
    exact: tuple[jax.Array, ...], refresh: int | jax.Array,
    keys: Callable[[jax.Array, int], jax.Array] | None = None,
) -> tuple[chex.ArrayTree, ...]:
    """``sums``, or their exact recomputation from ``buffer`` when one is due.

    A recomputation is due after every ``refresh``-th step (``book.step + 1`` a multiple
    of ``refresh``) and whenever a running sum is not finite (an overflow would
    otherwise stay until the next refresh). It regenerates every retained direction in
    a dynamic-trip-count loop (:func:`directions.regenerate_sums`), so steps without
    one draw nothing, also under ``vmap``.

    Args:
      sums: the running sums after the step.
      source: the step's :class:`Source` (its ``drawn`` is not used).
      buffer: the buffer after the step's push.
      exact: ``[capacity]`` coefficient vectors, one per sum, zero on empty slots.
      refresh: steps between recomputations.
      keys: ``keys(first, size)``, the keys of ``buffer``'s slots; None: derived from
        their ``(steps, index)``.
    """
    finite = jnp.stack([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(sums)])
    due = ((source.book.step + 1) % refresh == 0) | ~jnp.all(finite)
    count = jnp.where(due, buffer.responses.shape[0], 0)
    if keys is None:
        keys = _keys(source.schedule, source.book, buffer.steps, buffer.index)
    recomputed = dirs.regenerate_sums(source.family, keys, exact, source.like, count)
    return tuple(jax.tree.map(lambda a, b: jnp.where(due, b, a), s, r)
                 for s, r in zip(sums, recomputed))


def retain(
    source: Source, buffer: history.History, sums: tuple[chex.ArrayTree, ...],
    added: tuple[chex.ArrayTree, ...], responses: jax.Array, keep: jax.Array,
    coeffs: Callable[[jax.Array], tuple[jax.Array, ...]],
    exact: Callable[[history.History], tuple[jax.Array, ...]], refresh: int | jax.Array,
    adjust: Callable[[tuple[chex.ArrayTree, ...], history.History],
                     tuple[chex.ArrayTree, ...]] | None = None,
) -> tuple[history.History, tuple[chex.ArrayTree, ...]]:
    """Keeps a step's records: push, evict, add, adjust, refresh (the one call sequence).

    .. math:: S \\leftarrow S + \\sum_{i\\ \\mathrm{kept}} c_i u_i
      - \\sum_{i\\ \\mathrm{evicted}} c_i u_i

    (restarting from the kept records alone when they fill the buffer), then
    ``adjust(sums, records)`` (ZoAR re-centres at its new baseline, ZoAQ keeps the old
    sums after an unusable step), then :func:`refreshed` when a recomputation is due.

    Args:
      source: the step's :class:`Source`.
      buffer: the buffer before the step.
      sums: the running sums before the step.
      added: the kept fresh records' contributions to each sum.
      responses: ``[slots]`` the step's fresh responses as the buffer stores them.
      keep: ``[slots]`` which of them the buffer keeps.
      coeffs: a leaving record's coefficient vectors from its stored responses
        (:func:`leaving_sums`).
      exact: the coefficient vectors of the buffer after the push, zero on empty slots
        (:func:`refreshed`).
      refresh: steps between exact recomputations.
      adjust: optional ``adjust(sums, records) -> sums`` before the refresh.

    Returns:
      ``(records, sums)``: the buffer and the running sums after the step.
    """
    slots = keep.shape[0]
    records = history.push(buffer, jnp.arange(slots, dtype=jnp.int32), responses,
                           source.book.step, keep)
    left = leaving_sums(source, buffer, keep, responses, coeffs)
    capacity = buffer.responses.shape[0]
    sums = running(sums, added, left, jnp.sum(keep, dtype=jnp.int32) == capacity)
    if adjust is not None:
        sums = adjust(sums, records)
    keys = None if source.keys is None else _pushed_keys(source, buffer, records)
    return records, refreshed(sums, source, records, exact(records), refresh, keys)
