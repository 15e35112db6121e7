"""The research loop: a whole optimization run as one jit-compiled ``lax.scan``."""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from zoaq_jax._src import checks, oracle


class Trace(NamedTuple):
    """Diagnostics at the logged steps ``0, log_every, 2 log_every, ..., num_steps``.

    ``value`` is the objective at the logged iterate, evaluated for monitoring: these
    evaluations are not oracle calls of the method and are not in ``num_queries``.
    Diagnostics that the optimizer does not have are NaN (``last_score``, ``tau``) or 0.
    """

    step: jax.Array  # int32
    value: jax.Array  # float32
    num_queries: jax.Array  # int32, cumulative oracle calls of the estimator
    last_k: jax.Array  # int32, fresh directions at the last step before the log point
    last_score: jax.Array  # float32
    tau: jax.Array  # float32
    extras: dict  # name -> float32 array, the diagnostics requested with ``extras=``


def _diagnostic(state: Any, name: str, default: Any, dtype) -> jax.Array:
    return jnp.asarray(optax.tree.get(state, name, default), dtype)


def _required(state: Any, name: str) -> jax.Array:
    value = optax.tree.get(state, name)
    if value is None:
        raise KeyError(f"extras: no diagnostic named {name!r} in the optimizer state.")
    return jnp.asarray(value, jnp.float32)


def run(
    opt: optax.GradientTransformationExtraArgs,
    value_fn,
    params: Any,
    num_steps: int,
    *,
    log_every: int = 1,
    init_state: Any = None,
    extras: tuple[str, ...] = (),
    **fn_kwargs: Any,
) -> tuple[Any, Any, Trace]:
    r"""Runs ``num_steps`` updates of ``opt`` on ``value_fn`` as one compiled program.

    .. math:: x_{t+1} = x_t + \mathrm{opt.update}(x_t), \qquad t = 0, \dots, T - 1

    ``fn_kwargs`` are passed to every update (and to ``value_fn``) unchanged, so this
    loop suits fixed-data objectives; write your own loop for minibatches. The function
    is pure: wrap it in ``jax.vmap`` to run many seeds (build ``opt`` inside the mapped
    function from the mapped seed) or many initial points at once.

    Args:
      opt: an optimizer from :mod:`zoaq_jax` or any Optax transformation taking
        ``value_fn`` as a keyword.
      value_fn: the objective ``value_fn(params, **fn_kwargs) -> scalar``.
      params: initial parameters (any PyTree).
      num_steps: number of updates, a multiple of ``log_every``.
      log_every: trace period in steps.
      init_state: optimizer state to continue from (default ``opt.init(params)``), e.g.
        the state returned by an earlier ``run`` when the objective changes.
      extras: further diagnostics to trace, by the name ``optax.tree.get`` finds them
        under (e.g. ``"consistency"`` from :func:`monitor_consistency`).
      **fn_kwargs: data for ``value_fn``.

    Returns:
      ``(params, state, trace)``: final parameters, final optimizer state and a
      :class:`Trace` with ``num_steps // log_every + 1`` rows (step 0 first).

    Example:
      >>> import jax, jax.numpy as jnp, zoaq_jax
      >>> f = lambda x, a: 0.5 * jnp.sum((x - a) ** 2)
      >>> def one_seed(seed):
      ...     opt = zoaq_jax.zoaq(learning_rate=1e-2, key=seed)
      ...     return zoaq_jax.run(opt, f, jnp.zeros(8), 100, log_every=50, a=jnp.ones(8))
      >>> params, state, trace = jax.vmap(one_seed)(jnp.arange(4))
      >>> trace.value.shape, trace.num_queries.shape
      ((4, 3), (4, 3))

    References:
      ZoAQ paper, Appendix "Algorithm and Cost Accounting" (what ``num_queries`` counts).
    """
    num_steps = checks.static_int("num_steps", num_steps, 0)
    log_every = checks.static_int("log_every", log_every, 1)
    if num_steps % log_every:
        raise ValueError(
            f"num_steps ({num_steps}) must be a multiple of log_every ({log_every})."
        )

    return _run(params, fn_kwargs, init_state, opt=opt, value_fn=value_fn,
                num_steps=num_steps, log_every=log_every, extras=tuple(extras))


@functools.partial(
    jax.jit, static_argnames=("opt", "value_fn", "num_steps", "log_every", "extras"))
def _run(params, kwargs, init_state, *, opt, value_fn, num_steps, log_every, extras):
    """:func:`run`, compiled once per optimizer, objective, length and shapes."""
    f = oracle.bind(value_fn, params, kwargs)

    def record(step, params, state):
        return Trace(
            step=jnp.asarray(step, jnp.int32),
            value=f(params).astype(jnp.float32),
            num_queries=_diagnostic(state, "num_queries", 0, jnp.int32),
            last_k=_diagnostic(state, "last_k", 0, jnp.int32),
            last_score=_diagnostic(state, "last_score", jnp.nan, jnp.float32),
            tau=_diagnostic(state, "tau", jnp.nan, jnp.float32),
            extras={name: _required(state, name) for name in extras},
        )

    def one_step(carry, _):
        params, state = carry
        updates, state = opt.update(None, state, params, value_fn=value_fn, **kwargs)
        return (optax.apply_updates(params, updates), state), None

    def one_period(carry, i):
        carry, _ = jax.lax.scan(one_step, carry, None, length=log_every)
        return carry, record((i + 1) * log_every, *carry)

    state = opt.init(params) if init_state is None else init_state
    first = record(0, params, state)
    (params, state), rest = jax.lax.scan(
        one_period, (params, state), jnp.arange(num_steps // log_every)
    )
    trace = jax.tree.map(lambda a, b: jnp.concatenate([a[None], b]), first, rest)
    return params, state, trace

