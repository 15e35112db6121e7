"""Per-estimator bookkeeping shared by every estimator: keys, step count, query count.

Every estimator state holds a :class:`QueryLedger`. Its fields are the diagnostics that
exist for all estimators and are found with ``optax.tree.get(state, name)`` from any
chained state:

* ``num_queries``: cumulative oracle calls made by the estimator, centre values included.
* ``num_nonfinite``: cumulative responses discarded because they were NaN or inf.
* ``num_zero_responses``: cumulative finite fresh responses that were exactly 0 at steps
  where a perturbation of size ``mu`` rounds away at some coordinate (all of them when
  ``mu`` is below the parameters' float resolution: ``x + mu u`` rounds back to ``x``;
  zeros of the objective itself, e.g. sparse directions whose support misses what it
  reads, are not counted); :func:`zoaq_jax.check_responses` turns it into a host
  warning.
* ``last_k``: fresh directions acquired at the last step.
* ``value_estimate``: the last step's free estimate of ``f(x_t)`` (no extra query).
* ``first_value``, ``best_value``: the first finite and the lowest finite of these estimates
  over the state's life (NaN and inf until a step gives one): the baseline against
  which :func:`zoaq_jax.run` measures divergence, carried by the state so that a
  resumed run stops where the uninterrupted one would.
* ``blind_steps``: how many steps in a row ended without a finite ``value_estimate``
  (0 after a step with one), which :func:`zoaq_jax.run` stops at
  (:data:`zoaq_jax.BLIND_STEPS`), carried by the state for the same reason.
* ``query_limit``: None (no limit, the default), or the calls the estimator may make in
  all: a step that cannot afford its smallest budget is not taken, and adaptive steps cap
  their budget by the calls left (:func:`limit_queries`; :func:`zoaq_jax.run` sets it
  from ``max_queries``). It is static whether a state has a limit: a state without one
  compiles to the unlimited step.

The counters are int32 scalars (per lane under ``vmap``) that **saturate** at
:data:`COUNT_MAX` ``= 2**31 - 1`` instead of wrapping to negative values: a count below
``COUNT_MAX`` is exact, a count equal to it means "at least that many".

Keys follow one schedule: the direction with index ``i`` at step ``t`` is drawn from
``fold_in(fold_in(key, t), i)``, so a record is reproducible from ``(t, i)`` alone.

The run key is stored as its raw ``uint32`` data (``jax.random.key_data``, a private
copy) and wrapped again at use with the key implementation fixed when the estimator
was built (:class:`KeySchedule`). States therefore hold plain numeric arrays only: they
can be donated to ``jit`` (the user's key is never aliased), serialised by
``flax.serialization`` and mapped over by Optax wrappers.
"""

from __future__ import annotations

from collections.abc import Callable
import warnings
from typing import Any, NamedTuple

import jax
from jax.typing import ArrayLike
import jax.numpy as jnp
import numpy as np
import optax

from zoaq_jax._src import checks, oracle
from zoaq_jax._src import directions as dirs


COUNT_MAX = 2**31 - 1
"""Where the int32 counters of a :class:`QueryLedger` saturate (and the default limit)."""


class QueryLedger(NamedTuple):
    """Keys and counters of a zeroth-order estimator (counters saturate at ``COUNT_MAX``)."""

    key_data: jax.Array  # uint32 raw data of the run's typed PRNG key
    step: jax.Array  # int32, steps taken (the per-step key index)
    num_queries: jax.Array  # int32, cumulative oracle calls (saturating)
    num_nonfinite: jax.Array  # int32, cumulative discarded (NaN/inf) responses (saturating)
    num_zero_responses: jax.Array  # int32, cumulative finite responses exactly 0 (saturating)
    last_k: jax.Array  # int32, fresh directions acquired at the last step
    value_estimate: jax.Array  # float32, the last step's free estimate of f(x_t) (NaN: none)
    first_value: jax.Array  # float32, the first finite value_estimate (NaN: none yet)
    best_value: jax.Array  # float32, the lowest value_estimate (inf: none yet)
    blind_steps: jax.Array  # int32, steps in a row without a finite value_estimate
    query_limit: jax.Array | None = None  # int32, calls allowed in all (None: no limit)


class KeySchedule(NamedTuple):
    """The run key of an estimator and its implementation, fixed at construction.

    ``seed`` is the ``key`` argument as given (an integer seed or a typed key, possibly
    traced); ``impl`` the name of its PRNG implementation (static).
    """

    seed: int | jax.Array
    impl: str

    @classmethod
    def of(cls, key: int | jax.Array) -> "KeySchedule":
        """Validates ``key`` (see :func:`checks.check_key`) and records its implementation."""
        checks.check_key(key)
        if checks.is_typed_key(key):
            impl = str(jax.random.key_impl(key))
        else:
            impl = str(jax.config.jax_default_prng_impl)  # type: ignore[attr-defined]
        dirs.check_impl(impl)
        return cls(key, impl)

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

    def step_and_record_keys(self, ledger: QueryLedger, size: int, steps: jax.Array,
                             index: jax.Array, like: Any = None) -> tuple[jax.Array, jax.Array]:
        """``(direction_keys(step_key(ledger), 0, size), record_keys(ledger, steps, index))``
        derived in one batch: the same keys (``fold_in`` is exact under ``vmap``), from one
        threefry loop per ``fold_in`` instead of two each, which XLA compiles separately.
        With ``like`` (the params), the directions' per-leaf keys of both
        (:func:`directions.leaf_keys`: one more loop for all of them)."""
        fresh = jnp.arange(size, dtype=jnp.int32)
        keys = self.record_keys(
            ledger, jnp.concatenate([jnp.full((size,), ledger.step, jnp.int32),
                                     jnp.asarray(steps, jnp.int32)]),
            jnp.concatenate([fresh, jnp.asarray(index, jnp.int32)]))
        if like is not None:
            keys = dirs.leaf_keys(keys, like)
        return keys[:size], keys[size:]

    def init(self, params: optax.Params) -> QueryLedger:
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
                           num_nonfinite=zero(), num_zero_responses=zero(), last_k=zero(),
                           value_estimate=jnp.full((), jnp.nan, jnp.float32),
                           first_value=jnp.full((), jnp.nan, jnp.float32),
                           best_value=jnp.full((), jnp.inf, jnp.float32),
                           blind_steps=zero())


def direction_keys(key: jax.Array, first: jax.Array | int, size: int) -> jax.Array:
    """Keys of directions ``first, ..., first + size - 1`` of the step keyed by ``key``."""
    index = jnp.asarray(first, jnp.int32) + jnp.arange(size, dtype=jnp.int32)
    return jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, index)


def _add(count: jax.Array, n: Any) -> jax.Array:
    """``count + n`` for ``n >= 0``, saturating at ``COUNT_MAX`` instead of wrapping."""
    n = jnp.asarray(n, jnp.int32)
    return jnp.where(count > COUNT_MAX - n, COUNT_MAX, count + n).astype(jnp.int32)


def calls_left(ledger: QueryLedger) -> jax.Array | None:
    """Oracle calls the estimator may still make under its ``query_limit`` (int32; None
    without a limit)."""
    if ledger.query_limit is None:
        return None
    return jnp.maximum(ledger.query_limit - ledger.num_queries, 0)


def advance(ledger: QueryLedger, *, k: jax.Array, calls: ArrayLike, nonfinite: jax.Array,
            zero: jax.Array, value: jax.Array):
    """The ledger after a step that acquired ``k`` directions with ``calls`` oracle calls,
    ``nonfinite`` discarded and ``zero`` exactly-zero responses, estimating ``f(x)`` as
    ``value``."""
    value = jnp.asarray(value, jnp.float32)
    return ledger._replace(
        step=jnp.asarray(ledger.step + 1, jnp.int32),
        num_queries=_add(ledger.num_queries, calls),
        num_nonfinite=_add(ledger.num_nonfinite, nonfinite),
        num_zero_responses=_add(ledger.num_zero_responses, zero),
        last_k=jnp.asarray(k, jnp.int32),
        value_estimate=value,
        first_value=jnp.where(jnp.isfinite(ledger.first_value), ledger.first_value, value),
        best_value=jnp.where(jnp.isfinite(value) & (value < ledger.best_value), value,
                             ledger.best_value),
        blind_steps=jnp.where(jnp.isfinite(value), 0, _add(ledger.blind_steps, 1)),
    )


def skip_unaffordable(state: optax.OptState, params: optax.Params, min_calls: int | jax.Array,
                      take: Callable[[], tuple[optax.Updates, optax.OptState]]
                      ) -> tuple[optax.Updates, optax.OptState]:
    """``take()`` (an estimator's ``(update, state)``) if ``state.ledger`` can afford a
    step's ``min_calls``, else the skipped step: a zero update and ``state`` unchanged.

    A skipped step makes no oracle call (a ``lax.cond``; under ``vmap`` both branches
    run, and the skipped lanes' evaluations are uncounted compute, not queries). Without
    a limit this is ``take()`` alone, the same program as before limits existed.
    """
    left = calls_left(state.ledger)
    if left is None:  # no limit
        return take()

    def skip():  # zeros like the step's update (None on carried leaves such as keys)
        return dirs.cast_like(dirs.zeros(params), params), state

    return jax.lax.cond(left >= min_calls, take, skip)


def is_ledger(node: Any) -> bool:
    """Whether a node of a state's tree is a :class:`QueryLedger` (``is_leaf`` of the
    functions that set its fields throughout a state)."""
    return isinstance(node, QueryLedger)


def limit_queries(state: optax.OptState, max_queries: int | jax.Array | None,
                  start: jax.Array | None = None) -> optax.OptState:
    """``state`` allowed ``max_queries`` more oracle calls by every :class:`QueryLedger` in it.

    Args:
      state: an optimizer state (any PyTree holding ledgers, e.g. a chain's state).
      max_queries: calls allowed from ``start`` on (non-negative int, may be traced); the
        ``query_limit`` becomes ``start + max_queries`` (saturating). None removes the
        limit.
      start: the count the allowance starts from (int32, may be traced); None: the
        ledger's ``num_queries`` now.

    Returns:
      The state with the limit set; its estimators then never exceed it.
    """
    def set_limit(node):
        if isinstance(node, QueryLedger):
            if max_queries is None:
                return node._replace(query_limit=None)
            base = node.num_queries if start is None else jnp.asarray(start, jnp.int32)
            return node._replace(query_limit=_add(base, max_queries))
        return node

    return jax.tree.map(set_limit, state, is_leaf=is_ledger)


def with_key(state: optax.OptState, key: int | jax.Array) -> optax.OptState:
    """``state`` with the run key of every :class:`QueryLedger` replaced by ``key``.

    ``key`` is an integer seed (a key of the default implementation) or a typed key of
    the estimators' implementation, possibly traced: this is how one optimizer object
    runs many seeds under ``vmap``.
    """
    def set_key(node):
        if isinstance(node, QueryLedger):
            typed = key if checks.is_typed_key(key) else jax.random.key(key)
            data = jnp.asarray(jax.random.key_data(typed), jnp.uint32)
            if data.shape != node.key_data.shape:
                raise ValueError(
                    f"key: a key of shape {data.shape} cannot replace the estimator's "
                    f"{node.key_data.shape} key data; pass a typed key of the estimator's "
                    "PRNG implementation.")
            return node._replace(key_data=data)
        return node

    return jax.tree.map(set_key, state, is_leaf=is_ledger)


def check_responses(state: optax.OptState, *, share: float = 0.1, stacklevel: int = 2) -> None:
    """Warns on the host when many of a state's responses were exactly 0.

    Every response is exactly 0 when ``x + mu u`` rounds back to ``x``: ``mu`` below the
    float resolution of the parameters (about ``1e-7 |x|`` in float32). The estimates
    are then zero and adaptive estimators spend their whole budget on them. Call it on a
    concrete state (outside ``jit``); :func:`zoaq_jax.run` and the benchmarks do.

    Args:
      state: an optimizer state (lanes of a ``vmap`` are summed).
      share: warn when ``num_zero_responses`` is at least this share of ``num_queries``.
      stacklevel: passed to :func:`warnings.warn`.

    Example:
      >>> import jax.numpy as jnp, zoaq_jax
      >>> opt = zoaq_jax.zo_sgd(1e-2, mu=1e-12)
      >>> x = jnp.ones(3)
      >>> _, state = opt.update(None, opt.init(x), x, value_fn=lambda x: x @ x)
      >>> zoaq_jax.check_responses(state)  # doctest: +SKIP
      RuntimeWarning: 2 of 2 oracle calls gave exactly-zero responses ...
    """
    zeros = optax.tree.get(state, "num_zero_responses")
    calls = optax.tree.get(state, "num_queries")
    if zeros is None or calls is None:
        return
    zeros, calls = (int(np.sum(np.asarray(x, np.int64))) for x in (zeros, calls))
    if zeros and zeros >= share * calls:
        warnings.warn(
            f"{zeros} responses in {calls} oracle calls were exactly 0: the perturbation "
            "mu * u is probably below the float resolution of the parameters, so x + mu u "
            "rounds back to x and the estimates are zero. Increase mu (e.g. to 1e-3 times "
            "the parameters' scale) or use float64 parameters.",
            RuntimeWarning, stacklevel=stacklevel)
