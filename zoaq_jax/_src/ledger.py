"""Per-estimator bookkeeping shared by every estimator: keys, step count, query count.

Every estimator state holds a :class:`QueryLedger`. Its fields are the diagnostics that
exist for all estimators and are found with ``optax.tree.get(state, name)`` from any
chained state:

* ``num_queries``: cumulative oracle calls made by the estimator, centre values included.
* ``num_nonfinite``: cumulative responses discarded because they were NaN or inf.
* ``last_k``: fresh directions acquired at the last step.

Keys follow one schedule: the direction with index ``i`` at step ``t`` is drawn from
``fold_in(fold_in(key, t), i)``, so a record is reproducible from ``(t, i)`` alone.

The run key is stored as its raw ``uint32`` data (``jax.random.key_data``, a private
copy) and wrapped again at use with the key implementation fixed when the estimator
was built (:class:`KeySchedule`). States therefore hold plain numeric arrays only: they
can be donated to ``jit`` (the user's key is never aliased), serialised by
``flax.serialization`` and mapped over by Optax wrappers.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from zoaq_jax._src import checks, oracle


class QueryLedger(NamedTuple):
    """Keys and counters of a zeroth-order estimator."""

    key_data: jax.Array  # uint32 raw data of the run's typed PRNG key
    step: jax.Array  # int32, steps taken (the per-step key index)
    num_queries: jax.Array  # int32, cumulative oracle calls
    num_nonfinite: jax.Array  # int32, cumulative discarded (NaN/inf) responses
    last_k: jax.Array  # int32, fresh directions acquired at the last step


class KeySchedule(NamedTuple):
    """The run key of an estimator and its implementation, fixed at construction.

    ``seed`` is the ``key`` argument as given (an integer seed or a typed key, possibly
    traced); ``impl`` the name of its PRNG implementation (static).
    """

    seed: Any
    impl: str

    @classmethod
    def of(cls, key: Any) -> "KeySchedule":
        """Validates ``key`` (see :func:`checks.check_key`) and records its implementation."""
        checks.check_key(key)
        if checks.is_typed_key(key):
            return cls(key, str(jax.random.key_impl(key)))
        return cls(key, str(jax.config.jax_default_prng_impl))

    def run_key(self, ledger: QueryLedger) -> jax.Array:
        """The run's typed key, rebuilt from the ledger's key data."""
        return jax.random.wrap_key_data(ledger.key_data, impl=self.impl)

    def step_key(self, ledger: QueryLedger) -> jax.Array:
        """The key of the current step, ``fold_in(key, step)``."""
        return jax.random.fold_in(self.run_key(ledger), ledger.step)

    def record_keys(self, ledger: QueryLedger, steps: jax.Array, index: jax.Array) -> jax.Array:
        """Keys of the records acquired at ``steps[j]`` with direction index ``index[j]``."""
        run_key = self.run_key(ledger)
        return jax.vmap(lambda t, i: jax.random.fold_in(jax.random.fold_in(run_key, t), i))(
            steps, index)

    def init(self, params: Any) -> QueryLedger:
        """A fresh ledger for ``params`` (checked by :func:`oracle.check_params`).

        The key data is a new buffer, never the user's key.
        """
        oracle.check_params(params)
        key = self.seed if checks.is_typed_key(self.seed) else jax.random.key(
            self.seed, impl=self.impl)
        data = jnp.array(jax.random.key_data(key), jnp.uint32, copy=True)

        def zero():  # one buffer each, so that the state can be donated to jit
            return jnp.zeros((), jnp.int32)

        return QueryLedger(key_data=data, step=zero(), num_queries=zero(),
                           num_nonfinite=zero(), last_k=zero())


def direction_keys(key: jax.Array, first: jax.Array | int, size: int) -> jax.Array:
    """Keys of directions ``first, ..., first + size - 1`` of the step keyed by ``key``."""
    index = jnp.asarray(first, jnp.int32) + jnp.arange(size, dtype=jnp.int32)
    return jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, index)


def advance(ledger: QueryLedger, *, k: jax.Array, calls: jax.Array, nonfinite: jax.Array):
    """The ledger after a step that acquired ``k`` directions with ``calls`` oracle calls."""
    return ledger._replace(
        step=jnp.asarray(ledger.step + 1, jnp.int32),
        num_queries=jnp.asarray(ledger.num_queries + jnp.asarray(calls, jnp.int32), jnp.int32),
        num_nonfinite=jnp.asarray(
            ledger.num_nonfinite + jnp.asarray(nonfinite, jnp.int32), jnp.int32),
        last_k=jnp.asarray(k, jnp.int32),
    )
