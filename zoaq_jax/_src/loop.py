"""The research loop: a whole optimization run as one jit-compiled ``lax.scan``."""

from __future__ import annotations

import functools
import itertools
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from zoaq_jax._src import checks, configs, host, ledger, oracle
from zoaq_jax._src.alias import apply_updates

STATUSES = ("running", "budget_spent", "diverged")
"""``Trace.status`` codes: 0 running (all steps so far taken), 1 the ``max_queries``
budget could not afford the next step, 2 the free value estimate diverged."""
RUNNING, BUDGET_SPENT, DIVERGED = range(3)


class Trace(NamedTuple):
    """Diagnostics at the logged steps ``0, log_every, 2 log_every, ..., num_steps``.

    ``value`` is the objective at the logged iterate, evaluated for monitoring: these
    evaluations are not oracle calls of the method and are not in ``num_queries``; they
    are counted in ``num_log_evaluations`` (0 with ``log_values=False``, ``value`` is
    then NaN). Diagnostics that the optimizer does not have are NaN (``last_score``,
    ``tau``) or 0. Every field has one row per log point except ``best_params``.
    """

    step: jax.Array  # int32
    value: jax.Array  # float32
    num_queries: jax.Array  # int32, cumulative oracle calls of the estimator
    last_k: jax.Array  # int32, fresh directions at the last step before the log point
    last_score: jax.Array  # float32
    tau: jax.Array  # float32
    extras: dict  # name -> float32 array, the diagnostics requested with ``extras=``
    num_log_evaluations: jax.Array  # int32, cumulative value_fn calls made for ``value``
    best_value: jax.Array  # float32, lowest free value estimate so far (inf: none yet)
    status: jax.Array  # int32, a code of STATUSES (the run stops at the first non-zero)
    best_params: Any  # the iterate with the lowest free value estimate (final only)


def _diagnostic(state: Any, name: str, default: Any, dtype) -> jax.Array:
    return jnp.asarray(optax.tree.get(state, name, default), dtype)


def _required(state: Any, name: str) -> jax.Array:
    value = optax.tree.get(state, name)
    if value is None:
        raise KeyError(f"extras: no diagnostic named {name!r} in the optimizer state.")
    return jnp.asarray(value, jnp.float32)


_STATIC_TYPES = (bool, int, str, type(None))
_LISTENERS: dict[int, Callable[[int, int], Any]] = {}  # progress callbacks by token
_TOKENS = itertools.count(1)


def _report(token, step, num_queries):
    """Host side of the progress callback: calls the listener registered under ``token``."""
    listener = _LISTENERS.get(int(token))
    if listener is not None:
        listener(int(step), int(num_queries))


def run(
    opt: optax.GradientTransformationExtraArgs,
    value_fn,
    params: Any,
    num_steps: int,
    *,
    log_every: int = 1,
    init_state: Any = None,
    extras: tuple[str, ...] = (),
    max_queries: int | None = None,
    seed: Any = None,
    progress: Callable[[int, int], Any] | None = None,
    divergence: float | None = 1e3,
    log_values: bool = True,
    **fn_kwargs: Any,
) -> tuple[Any, Any, Trace]:
    r"""Runs up to ``num_steps`` updates of ``opt`` on ``value_fn`` as one compiled program.

    .. math:: x_{t+1} = x_t + \mathrm{opt.update}(x_t), \qquad t = 0, \dots, T - 1

    ``fn_kwargs`` are passed to every update (and to ``value_fn``) unchanged, so this
    loop suits fixed-data objectives; write your own loop for minibatches. Array
    keywords are data; ``int``, ``bool``, ``str`` and ``None`` keywords (a count, a
    mode) are static. The program is compiled once per optimizer *configuration*
    (optimizers built with equal arguments share it), objective, static keywords,
    lengths and shapes; neither ``opt`` nor ``value_fn`` is kept alive by the cache.

    The run stops early (the remaining rows repeat its last iterate, ``status`` says
    why) when ``max_queries`` cannot afford another step (the estimators cap the last
    step's budget by the calls left, so ``num_queries <= max_queries`` always), or when
    the steps' free estimate of ``f(x_t)`` (no extra query: central midpoints or the
    forward centre) exceeds its best by ``divergence`` times the progress scale, becomes
    ``+inf``, or the iterate becomes non-finite (later steps are then computed and
    discarded, uncounted, as under ``vmap``). The iterate with the lowest estimate is
    returned as ``trace.best_params``. Called outside ``jit``/``vmap``, ``run`` warns on
    the host about divergence (naming the learning rate) and about exactly-zero
    responses (:func:`zoaq_jax.check_responses`, naming ``mu``).

    The function is pure: to run many seeds, ``jax.vmap`` over ``seed`` with one
    optimizer object built outside (no tracer is captured in any cache), or build the
    optimizer inside the mapped function from the mapped seed. Map ``seed`` also when
    only the starting points differ: the optimizer's ``key`` (default 0) is the same in
    every lane, so without ``seed`` all lanes draw the same directions (64 lanes from
    one start end at one value), e.g.
    ``jax.vmap(lambda x0, s: run(opt, f, x0, n, seed=s))(starts, jnp.arange(len(starts)))``.

    Args:
      opt: an optimizer from :mod:`zoaq_jax` or any Optax transformation taking
        ``value_fn`` as a keyword.
      value_fn: the objective ``value_fn(params, **fn_kwargs) -> scalar``.
      params: initial parameters (any PyTree).
      num_steps: number of updates (at most, with a budget), a multiple of ``log_every``.
      log_every: trace period in steps.
      init_state: optimizer state to continue from (default ``opt.init(params)``), e.g.
        the state returned by an earlier ``run`` when the objective changes.
      extras: further diagnostics to trace, by the name ``optax.tree.get`` finds them
        under (e.g. ``"consistency"`` from :func:`monitor_consistency`).
      max_queries: oracle calls this run may make (int, may be traced; at most
        ``2**31 - 1``); None: no budget. Needs an optimizer with a query ledger.
      seed: integer seed or typed key replacing the optimizer's ``key`` (may be traced:
        the vmap idiom); None keeps the key of ``opt`` (or of ``init_state``).
      progress: ``progress(step, num_queries)`` called on the host at every log point
        (e.g. ``lambda t, n: bar.update(log_every)`` for a tqdm bar).
      divergence: the growth factor over the best estimate that stops the run, None
        never stops on divergence.
      log_values: evaluate ``value_fn`` at the log points for ``Trace.value``.
      **fn_kwargs: data for ``value_fn``.

    Returns:
      ``(params, state, trace)``: final parameters, final optimizer state and a
      :class:`Trace` with ``num_steps // log_every + 1`` rows (step 0 first).

    Example:
      >>> import jax, jax.numpy as jnp, zoaq_jax
      >>> f = lambda x, a: 0.5 * jnp.sum((x - a) ** 2)
      >>> opt = zoaq_jax.zoaq(learning_rate=1e-2)
      >>> def one_seed(seed):
      ...     return zoaq_jax.run(opt, f, jnp.zeros(8), 100, log_every=50, seed=seed,
      ...                         max_queries=2000, a=jnp.ones(8))
      >>> params, state, trace = jax.vmap(one_seed)(jnp.arange(4))
      >>> trace.value.shape, bool((trace.num_queries <= 2000).all())
      ((4, 3), True)

    References:
      ZoAQ paper, Appendix "Algorithm and Cost Accounting" (what ``num_queries`` counts).
    """
    num_steps = checks.static_int("num_steps", num_steps, 0)
    log_every = checks.static_int("log_every", log_every, 1)
    if num_steps % log_every:
        raise ValueError(
            f"num_steps ({num_steps}) must be a multiple of log_every ({log_every})."
        )
    if divergence is not None:
        checks.positive("divergence", divergence)
    if max_queries is not None and not isinstance(max_queries, jax.Array):
        max_queries = checks.static_int("max_queries", max_queries, 0)
        if max_queries > ledger.COUNT_MAX:
            raise ValueError(f"max_queries ({max_queries}) must be at most 2**31 - 1, "
                             "where the query counters saturate.")
    static = {k: v for k, v in fn_kwargs.items() if isinstance(v, _STATIC_TYPES)}
    data = {k: v for k, v in fn_kwargs.items() if k not in static}
    token = None
    if progress is not None:
        token = next(_TOKENS)
        _LISTENERS[token] = progress
    traced = True  # until the outputs show otherwise (an optimizer may close over tracers)
    try:
        with host.host_errors():  # a host_oracle objective's own exception, not JAX's
            out = _run(params, data, init_state, seed, max_queries, token,
                       init=configs.Static(opt.init), update=configs.Static(opt.update),
                       value_fn=configs.Static(value_fn), static=tuple(sorted(static.items())),
                       num_steps=num_steps, log_every=log_every, extras=tuple(extras),
                       divergence=divergence, log_values=bool(log_values))
            traced = any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(out))
            if not traced:
                jax.block_until_ready(out)
                jax.effects_barrier()  # every progress callback has run
    finally:  # under an outer transformation the callback runs later: it stays registered
        if not traced and token is not None:
            _LISTENERS.pop(token, None)
    if not traced:
        _warn(out[1], out[2], divergence)
    return out


def _warn(state: Any, trace: Trace, divergence: float | None) -> None:
    """Host warnings about a finished (concrete) run: divergence, zero responses."""
    status = np.asarray(trace.status).reshape(-1, trace.status.shape[-1])
    if (status == DIVERGED).any():
        row = int(np.argmax((status == DIVERGED).any(axis=0)))
        step = int(np.asarray(trace.step).reshape(-1, status.shape[-1])[0, row])
        warnings.warn(
            f"zoaq_jax.run: diverged by step {step} and stopped: the free value estimate "
            f"grew over {divergence:g} times its best progress, or became non-finite. The "
            "learning rate is too large for this objective: lower learning_rate (e.g. "
            "10x) or clip the updates; trace.best_params holds the best iterate.",
            RuntimeWarning, stacklevel=3)
    ledger.check_responses(state, stacklevel=4)


@functools.partial(jax.jit, static_argnames=(
    "init", "update", "value_fn", "static", "num_steps", "log_every", "extras", "divergence",
    "log_values"))
def _run(params, kwargs, init_state, seed, max_queries, token, *, init, update, value_fn,
         static, num_steps, log_every, extras, divergence, log_values):
    """:func:`run`, compiled once per configuration, objective, length and shapes."""
    value_fn, kwargs = value_fn(), {**kwargs, **dict(static)}
    opt = optax.GradientTransformationExtraArgs(init(), update())
    f = oracle.bind(value_fn, params, kwargs) if log_values else None
    state = opt.init(params) if init_state is None else init_state
    has_ledger = optax.tree.get(state, "num_queries") is not None
    if seed is not None:
        state = ledger.with_key(state, seed)
    if max_queries is not None:
        if not has_ledger:
            raise ValueError("max_queries: the optimizer has no query ledger (num_queries); "
                             "use a zoaq_jax estimator or drop max_queries.")
        state = ledger.limit_queries(state, max_queries)

    class Carry(NamedTuple):
        params: Any
        state: Any
        best_params: Any
        best_value: jax.Array  # float32
        first_value: jax.Array  # float32, the first finite estimate
        status: jax.Array  # int32

    def record(step, carry, logs):
        row = Trace(
            step=jnp.asarray(step, jnp.int32),
            value=(f(carry.params).astype(jnp.float32) if log_values
                   else jnp.full((), jnp.nan, jnp.float32)),
            num_queries=_diagnostic(carry.state, "num_queries", 0, jnp.int32),
            last_k=_diagnostic(carry.state, "last_k", 0, jnp.int32),
            last_score=_diagnostic(carry.state, "last_score", jnp.nan, jnp.float32),
            tau=_diagnostic(carry.state, "tau", jnp.nan, jnp.float32),
            extras={name: _required(carry.state, name) for name in extras},
            num_log_evaluations=jnp.asarray(logs, jnp.int32),
            best_value=carry.best_value,
            status=carry.status,
            best_params=None,
        )
        if token is not None:
            jax.debug.callback(_report, token, row.step, row.num_queries)
        return row

    def take(carry: Carry) -> Carry:
        updates, state = opt.update(None, carry.state, carry.params, value_fn=value_fn,
                                    **kwargs)
        params = apply_updates(carry.params, updates)
        if not has_ledger:
            return carry._replace(params=params, state=state)
        spent = optax.tree.get(state, "num_queries") != optax.tree.get(
            carry.state, "num_queries")
        estimate = optax.tree.get(state, "value_estimate")
        better = spent & (estimate < carry.best_value)
        best_value = jnp.where(better, estimate, carry.best_value)
        first = jnp.where(jnp.isfinite(carry.first_value), carry.first_value, estimate)
        status = jnp.where(spent, RUNNING, BUDGET_SPENT)
        if divergence is not None:
            scale = jnp.maximum(jnp.abs(first - best_value), jnp.abs(best_value))
            grew = (scale > 0) & (estimate - best_value > divergence * scale)
            finite = jnp.stack([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(params)])
            blown = (estimate == jnp.inf) | grew | ~jnp.all(finite)
            status = jnp.where(spent & blown, DIVERGED, status)
        stepped = Carry(params, state, carry.best_params, best_value, first,
                        jnp.asarray(status, jnp.int32))
        stepped = stepped._replace(best_params=jax.tree.map(
            lambda a, b: jnp.where(better, a, b), carry.params, carry.best_params))
        if max_queries is None:
            return stepped
        # A step the budget could not afford is undone (later transforms, e.g. momentum,
        # would still move the parameters on its zero estimate).
        return jax.tree.map(lambda a, b: jnp.where(spent, a, b), stepped,
                            carry._replace(status=stepped.status))

    def one_step(carry: Carry, _):
        if max_queries is None and divergence is None:
            return take(carry), None
        # a select, not a cond: the program is the same batched or not, so a vmapped run
        # rounds as the unbatched one (steps after a stop are computed and discarded)
        going = carry.status == RUNNING
        return jax.tree.map(lambda a, b: jnp.where(going, a, b), take(carry), carry), None

    def one_period(carry, i):
        carry, _ = jax.lax.scan(one_step, carry, None, length=log_every)
        return carry, record((i + 1) * log_every, carry, (i + 2) * int(log_values))

    carry = Carry(params, state, params, jnp.full((), jnp.inf, jnp.float32),
                  jnp.full((), jnp.nan, jnp.float32), jnp.zeros((), jnp.int32))
    first = record(0, carry, int(log_values))
    carry, rest = jax.lax.scan(one_period, carry, jnp.arange(num_steps // log_every))
    trace = jax.tree.map(lambda a, b: jnp.concatenate([a[None], b]), first, rest)
    best = carry.best_params if has_ledger else carry.params  # no estimates to rank by
    return carry.params, carry.state, trace._replace(best_params=best)
