"""Fixed-capacity FIFO ring buffer of query records.

A record is what ZoAQ and ZoAR retain from an oracle call: the PRNG key of its
direction, the scalar response observed at acquisition, and the acquisition step. The
direction itself is regenerated from the key (:mod:`zoaq_jax._src.directions`), so the
buffer holds ``capacity`` keys and scalars, never ``capacity * d`` numbers.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp


class History(NamedTuple):
    """Ring buffer of records; slot ``(head - 1) % capacity`` holds the newest."""

    keys: jax.Array  # [capacity] typed PRNG keys of the directions
    responses: jax.Array  # [capacity] float32 responses at acquisition
    steps: jax.Array  # [capacity] int32 acquisition steps
    head: jax.Array  # int32, the slot the next record is written to
    size: jax.Array  # int32, number of valid records (<= capacity)


def init(capacity: int, key: jax.Array) -> History:
    """An empty buffer of ``capacity`` slots for keys of the same kind as ``key``."""
    return History(
        keys=jax.random.split(key, capacity),
        responses=jnp.zeros((capacity,), jnp.float32),
        steps=jnp.zeros((capacity,), jnp.int32),
        head=jnp.zeros((), jnp.int32),
        size=jnp.zeros((), jnp.int32),
    )


def valid(history: History) -> jax.Array:
    """Boolean mask of the slots that hold a record."""
    capacity = history.responses.shape[0]
    age = (history.head - 1 - jnp.arange(capacity, dtype=jnp.int32)) % max(capacity, 1)
    return age < history.size


def push(history: History, keys: jax.Array, responses: jax.Array, step: jax.Array,
         keep: jax.Array) -> History:
    """Appends the records with ``keep[j]`` in order, evicting the oldest ones.

    Args:
      history: the buffer.
      keys: ``[n]`` typed keys of candidate records, oldest first.
      responses: ``[n]`` their responses.
      step: the acquisition step shared by all of them.
      keep: ``[n]`` mask of the records to append (acquired and finite).

    Returns:
      The buffer holding the newest ``capacity`` records of (old records, kept ones).
    """
    capacity = history.responses.shape[0]
    if capacity == 0:
        return history
    keep = keep.astype(bool)
    rank = jnp.cumsum(keep.astype(jnp.int32)) - 1  # position among the kept records
    total = jnp.sum(keep.astype(jnp.int32))
    write = keep & (rank >= total - capacity)  # only the newest `capacity` survive
    slot = jnp.where(write, (history.head + rank) % capacity, capacity)  # capacity: dropped
    return History(
        keys=history.keys.at[slot].set(keys, mode="drop"),
        responses=history.responses.at[slot].set(responses, mode="drop"),
        steps=history.steps.at[slot].set(jnp.broadcast_to(step, slot.shape), mode="drop"),
        head=(history.head + total) % capacity,
        size=jnp.minimum(history.size + total, capacity),
    )
