"""Fixed-capacity FIFO ring buffer of query records.

A record is what ZoAQ and ZoAR retain from an oracle call: where its direction came
from (the acquisition step ``t`` and the direction's index ``i`` within that step), the
scalar response observed at acquisition, nothing else. The direction's key is
``fold_in(fold_in(run_key, t), i)`` (the schedule of :mod:`zoaq_jax._src.ledger`) and the
direction is regenerated from it (:mod:`zoaq_jax._src.directions`), so the buffer holds
``3 * capacity`` numbers, never ``capacity * d``, and only plain integer and float arrays.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp


class History(NamedTuple):
    """Ring buffer of records; slot ``(head - 1) % capacity`` holds the newest."""

    index: jax.Array  # [capacity] int32 direction index of each record within its step
    responses: jax.Array  # [capacity] float32 responses at acquisition
    steps: jax.Array  # [capacity] int32 acquisition steps
    head: jax.Array  # int32, the slot the next record is written to
    size: jax.Array  # int32, number of valid records (<= capacity)


def init(capacity: int) -> History:
    """An empty buffer of ``capacity >= 1`` slots (estimators without a buffer hold
    ``None`` instead: zero-size arrays cannot be checkpointed by Orbax)."""
    return History(
        index=jnp.zeros((capacity,), jnp.int32),
        responses=jnp.zeros((capacity,), jnp.float32),
        steps=jnp.zeros((capacity,), jnp.int32),
        head=jnp.zeros((), jnp.int32),
        size=jnp.zeros((), jnp.int32),
    )


def valid(history: History) -> jax.Array:
    """Boolean mask of the slots that hold a record."""
    capacity = history.responses.shape[0]
    age = (history.head - 1 - jnp.arange(capacity, dtype=jnp.int32)) % capacity
    return age < history.size


def push(history: History, index: jax.Array, responses: jax.Array, step: jax.Array,
         keep: jax.Array) -> History:
    """Appends the records with ``keep[j]`` in order, evicting the oldest ones.

    Args:
      history: the buffer.
      index: ``[n]`` int32 direction indices (within ``step``) of candidate records,
        oldest first.
      responses: ``[n]`` their responses (stored as float32).
      step: the acquisition step shared by all of them.
      keep: ``[n]`` mask of the records to append (acquired and finite).

    Returns:
      The buffer holding the newest ``capacity`` records of (old records, kept ones).
      Every field keeps its dtype (int32 counters also under ``jax_enable_x64``).
    """
    capacity = history.responses.shape[0]
    keep = keep.astype(bool)
    rank = jnp.cumsum(keep, dtype=jnp.int32) - 1  # position among the kept records
    total = jnp.sum(keep, dtype=jnp.int32)
    write = keep & (rank >= total - capacity)  # only the newest `capacity` survive
    slot = jnp.where(write, (history.head + rank) % capacity, capacity)  # capacity: dropped
    return History(
        index=history.index.at[slot].set(jnp.asarray(index, jnp.int32), mode="drop"),
        responses=history.responses.at[slot].set(
            jnp.asarray(responses, jnp.float32), mode="drop"),
        steps=history.steps.at[slot].set(
            jnp.broadcast_to(jnp.asarray(step, jnp.int32), slot.shape), mode="drop"),
        head=jnp.asarray((history.head + total) % capacity, jnp.int32),
        size=jnp.asarray(jnp.minimum(history.size + total, capacity), jnp.int32),
    )


def oldest(history: History, size: int) -> tuple[jax.Array, jax.Array]:
    """``(steps, index)`` of the ``size`` oldest slots, oldest first (past ``history.size``
    they name no record)."""
    capacity = history.responses.shape[0]
    slot = (history.head - history.size + jnp.arange(size, dtype=jnp.int32)) % capacity
    return history.steps[slot], history.index[slot]


_COMPARE_ALL = 1 << 12


def leaving(
    history: History, index: jax.Array, responses: jax.Array, step: jax.Array,
    keep: jax.Array, size: int,
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """The records that pushing the kept new records (:func:`push`) evicts.

    The buffer's records (oldest first) followed by the kept new records (``keep[j]``,
    in order) form one sequence; pushing ``n`` kept records evicts its first
    ``e = max(0, history.size + n - capacity)`` elements: old records first, then, when
    ``n`` exceeds the capacity, the earliest new ones. Each kept record evicts at most
    one, so ``size = len(keep)`` positions hold them all.

    Args:
      history: the buffer before the push (capacity >= 1).
      index, responses, step, keep: the new records, as given to :func:`push`.
      size: static number of positions returned (at least the number of kept records).

    Returns:
      ``(steps, index, responses, live)``, each ``[size]``, of the sequence's first
      ``size`` positions; ``live[j]`` marks the ``e`` records that leave (a prefix).
    """
    capacity = history.responses.shape[0]
    n = jnp.sum(keep, dtype=jnp.int32)
    position = jnp.arange(size, dtype=jnp.int32)
    old = position < history.size
    old_steps, old_index = oldest(history, size)
    slot = (history.head - history.size + position) % capacity
    # The (position - size)-th kept new record: the first j with cumsum(keep)[j] beyond it.
    # (compare_all: the same integers as the default binary search, which XLA compiles as
    # one more while loop; at most _COMPARE_ALL comparisons)
    method = "compare_all" if size * keep.shape[0] <= _COMPARE_ALL else "scan"
    new = jnp.searchsorted(jnp.cumsum(keep, dtype=jnp.int32), position - history.size,
                           side="right", method=method)
    new = jnp.minimum(new, keep.shape[0] - 1)
    return (
        jnp.where(old, old_steps, jnp.asarray(step, jnp.int32)),
        jnp.where(old, old_index, jnp.asarray(index, jnp.int32)[new]),
        jnp.where(old, history.responses[slot], jnp.asarray(responses, jnp.float32)[new]),
        position < jnp.maximum(history.size + n - capacity, 0),
    )
