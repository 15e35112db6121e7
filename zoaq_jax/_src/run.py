"""``zoaq_jax.run``: a whole optimization run as one compiled program, called from Python.

``run`` checks its arguments, registers a progress callback (:mod:`callbacks`), calls
the cached program of the optimizer and objective (:mod:`programs`, :mod:`loop`), waits
for it, re-raises a host function's or callback's exception as itself and warns about
a run that diverged or got exactly-zero responses.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
import optax

from zoaq_jax._src import callbacks, checks, host, ledger, loop, oracle, programs

_STATIC_TYPES = (bool, int, str, type(None))


def _check_optimizer(opt: Any, value_fn: Any) -> None:
    """Clear errors for objects ``run`` cannot drive (before anything is traced)."""
    if not (callable(getattr(opt, "init", None)) and callable(getattr(opt, "update", None))):
        raise TypeError(
            f"run: opt must be an optimizer from zoaq_jax (e.g. zoaq_jax.zoaq(1e-2)), got "
            f"{type(opt).__name__}.")
    if not callable(value_fn):
        raise TypeError(f"run: value_fn must be callable, got {type(value_fn).__name__}.")


def _check_data_names(value_fn: Callable[..., Any], options: dict[str, Any]) -> None:
    """Refuses a data parameter of ``value_fn`` named after a parameter of ``run`` itself
    (``options``: ``run``'s arguments by name), which ``run`` would take for its own: one
    without a default could never be passed (the error would say it is missing), one with
    a default would silently keep it while ``run`` took a value given under its name. A
    keyword that ``functools.partial`` binds, and one of ``run``'s options left at its
    default (``run`` then only takes what it takes anyway), are left alone."""
    signature = oracle.signature_of(value_fn)
    if signature is None:
        return
    bound = value_fn.keywords if isinstance(value_fn, functools.partial) else {}
    defaults = inspect.signature(run).parameters
    for name, parameter in oracle.data_parameters(signature).items():
        if name not in options or name in bound:
            continue
        if not _is_default(options[name], defaults[name].default) or (
                parameter.default is parameter.empty):
            raise TypeError(
                f"value_fn{signature} has a data parameter named {name!r}, a parameter "
                f"of run itself: run({name}=...) sets run's option, never value_fn's "
                f"data. Rename that parameter of value_fn (e.g. to 'data_{name}') and "
                "pass the data under the new name.")


def _is_default(value: Any, default: Any) -> bool:
    """Whether an argument equals its parameter's default (an array never does)."""
    try:
        return value is default or bool(value == default)
    except Exception:  # noqa: BLE001 - an array, or a type without a plain ==
        return False


def run(
    opt: optax.GradientTransformationExtraArgs,
    value_fn,
    params: optax.Params,
    num_steps: int,
    *,
    log_every: int = 1,
    init_state: optax.OptState | None = None,
    extras: tuple[str, ...] = (),
    max_queries: int | None = None,
    seed: int | jax.Array | None = None,
    progress: Callable[[int, int], Any] | None = None,
    divergence: float | None = 1e3,
    log_values: bool = True,
    **fn_kwargs: Any,
) -> tuple[optax.Params, optax.OptState, loop.Trace]:
    r"""Runs up to ``num_steps`` updates of ``opt`` on ``value_fn`` as one compiled program.

    .. math:: x_{t+1} = x_t + \mathrm{opt.update}(x_t), \qquad t = 0, \dots, T - 1

    ``fn_kwargs`` are passed to every update (and to ``value_fn``) unchanged, so this
    loop suits fixed-data objectives; write your own loop for minibatches. Array
    keywords are data; ``int``, ``bool``, ``str`` and ``None`` keywords (a count, a
    mode) are static. The program is cached as ``jax.jit`` caches a function: by the
    identity of ``opt`` and ``value_fn`` (another closure, schedule or closed-over value
    is another program, never a cached one), static keywords, lengths and shapes; the
    cache keeps neither ``opt`` nor ``value_fn`` (nor what they close over) alive.

    The run stops early (the remaining rows repeat its last iterate, ``status`` says
    why; the remaining steps make no oracle call outside ``vmap``) when ``max_queries``
    cannot afford another step (the estimators cap the last step's budget by the calls
    left), when the steps' free estimate of ``f(x_t)`` (no extra query: central
    midpoints or the forward centre) exceeds its best by ``divergence`` times the
    progress scale (both kept in the optimizer state, so a resumed run stops where the
    uninterrupted one would), when that estimate is NaN or infinite at
    :data:`zoaq_jax.BLIND_STEPS` steps in a row (the run left the objective's domain; one
    such step may be a radius reaching over its edge, which :func:`zoaq_jax.tuning_free`
    shrinks, or a simulation failing at a scattered point; the streak is kept in the state
    too) or the iterate becomes non-finite, or when ``progress`` raises.
    The iterate with the lowest estimate is returned as ``trace.best_params``. Called
    outside ``jit``/``vmap``, ``run`` warns on the host about a divergent or non-finite
    run (naming the learning rate) and about exactly-zero responses
    (:func:`zoaq_jax.check_responses`, naming ``mu``), and re-raises the exception of a
    ``progress`` callback or of a :func:`zoaq_jax.host_oracle` objective as itself.

    **Budgets.** With ``max_queries``, every call of ``value_fn`` counts: the
    estimators' oracle calls (``num_queries``) and the logging evaluations
    (``num_log_evaluations``) together never exceed it. One call is kept back for the
    next log point's evaluation; a log point whose iterate has not moved since the last
    evaluation (the run stopped, or its steps left the iterate in place) repeats that
    value without a call. Pass
    ``log_values=False`` to give the whole budget to the estimator. An optimizer's own
    budget (``tuning_free(budget=B)``: ``B`` calls over its state's life) holds as well:
    ``max_queries`` never raises it, and a resumed ``init_state`` keeps it.

    The function is pure: to run many seeds, ``jax.vmap`` over ``seed`` with one
    optimizer object built outside, or build the optimizer inside the mapped function
    from the mapped seed (no tracer is kept by the cache in either case; under ``vmap``
    stopped lanes are computed and discarded, uncounted). Map ``seed`` also when only the
    starting points differ: the optimizer's ``key`` (default 0) is the same in every lane,
    so without ``seed`` all lanes draw the same directions (64 lanes from one start end at
    one value), e.g.
    ``jax.vmap(lambda x0, s: run(opt, f, x0, n, seed=s))(starts, jnp.arange(len(starts)))``.

    Args:
      opt: an optimizer from :mod:`zoaq_jax` or any Optax transformation whose update
        computes its updates from the keyword ``value_fn`` (``run`` passes no gradient).
      value_fn: the objective ``value_fn(params, **fn_kwargs) -> scalar``, a JAX
        function (wrap NumPy, PyTorch or simulator code in
        :func:`zoaq_jax.host_oracle`).
      params: initial parameters (any PyTree).
      num_steps: number of updates (at most, with a budget), a multiple of ``log_every``.
      log_every: trace period in steps.
      init_state: optimizer state to continue from (default ``opt.init(params)``), e.g.
        the state returned by an earlier ``run`` of the same optimizer; a state of
        another configuration is refused, naming the first field that differs.
      extras: further diagnostics to trace, by the name ``optax.tree.get`` finds them
        under (e.g. ``"consistency"`` from :func:`monitor_consistency`).
      max_queries: calls of ``value_fn`` this run may make, logging included (int, may
        be traced; at most ``2**31 - 1``); None: no budget. Needs an optimizer with a
        query ledger.
      seed: integer seed in ``[-2**31, 2**32)`` or typed key replacing the optimizer's
        ``key`` (may be traced: the vmap idiom); None keeps the key of ``opt`` (or of
        ``init_state``).
      progress: ``progress(step, num_queries)`` called on the host at every log point
        (e.g. ``lambda t, n: bar.update(log_every)`` for a tqdm bar); if it raises, the
        run stops there and ``run`` raises its exception.
      divergence: the growth factor over the best estimate that stops the run, None
        never stops on divergence nor on non-finite estimates.
      log_values: evaluate ``value_fn`` at the log points for ``Trace.value``.
      **fn_kwargs: data for ``value_fn`` (a data parameter of ``value_fn`` named after
        one of ``run``'s own keywords, e.g. ``seed``, is refused: rename it).

    Returns:
      ``(params, state, trace)``: final parameters, final optimizer state and a
      :class:`zoaq_jax.Trace` with ``num_steps // log_every + 1`` rows (step 0 first).

    Example:
      >>> import jax, jax.numpy as jnp, zoaq_jax
      >>> f = lambda x, a: 0.5 * jnp.sum((x - a) ** 2)
      >>> opt = zoaq_jax.zoaq(learning_rate=1e-2)
      >>> def one_seed(seed):
      ...     return zoaq_jax.run(opt, f, jnp.zeros(8), 100, log_every=50, seed=seed,
      ...                         max_queries=2000, a=jnp.ones(8))
      >>> params, state, trace = jax.vmap(one_seed)(jnp.arange(4))
      >>> trace.value.shape, bool((trace.num_queries + trace.num_log_evaluations <= 2000).all())
      ((4, 3), True)

    References:
      ZoAQ paper, Appendix "Algorithm and Cost Accounting" (what ``num_queries`` counts).
    """
    options = {k: v for k, v in locals().items() if k != "fn_kwargs"}  # as passed
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
    if isinstance(seed, (int, np.integer)):
        checks.check_key(seed, name="seed")
    _check_optimizer(opt, value_fn)
    _check_data_names(value_fn, options)
    static = {k: v for k, v in fn_kwargs.items() if isinstance(v, _STATIC_TYPES)}
    data = {k: v for k, v in fn_kwargs.items() if k not in static}
    token = None if progress is None else callbacks.register(progress)
    traced = True  # until the outputs show otherwise (an optimizer may close over tracers)
    try:
        with host.host_errors():  # a host_oracle objective's own exception, not JAX's
            out = programs.cached((opt.init, opt.update, value_fn), loop.compile)(
                params, data, init_state, seed, max_queries, token,
                static=tuple(sorted(static.items())), num_steps=num_steps,
                log_every=log_every, extras=tuple(extras), divergence=divergence,
                log_values=bool(log_values))
            traced = any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(out))
            if not traced:
                jax.block_until_ready(out)
                jax.effects_barrier()  # every progress callback has run
    finally:  # under an outer transformation the callback runs later: it stays registered
        error = None if token is None else callbacks.release(token, deferred=traced)
    if error is not None:
        raise error
    if not traced:
        _warn(out[1], out[2], divergence)
    return out


def _warn(state: optax.OptState, trace: loop.Trace, divergence: float | None) -> None:
    """Host warnings about a finished (concrete) run: divergence, zero responses."""
    status = np.asarray(trace.status).reshape(-1, trace.status.shape[-1])
    steps = np.asarray(trace.step).reshape(-1, status.shape[-1])[0]
    for code, why in ((loop.DIVERGED, f"the free value estimate grew over {divergence} "
                       "times its best progress"),
                      (loop.NONFINITE, f"{loop.BLIND_STEPS} steps in a row had no finite "
                       "free value estimate (no finite response: the objective is undefined "
                       "or infinite around the iterate), or the iterate became non-finite")):
        if (status == code).any():
            step = int(steps[np.argmax((status == code).any(axis=0))])
            warnings.warn(
                f"zoaq_jax.run: stopped by step {step} ({loop.STATUSES[code]}): {why}. The "
                "learning rate may be too large for this objective: lower learning_rate "
                "(e.g. 10x) or clip the updates; if the objective is infinite outside a "
                "domain, keep the iterate inside it (e.g. a penalty or a change of "
                "variables). trace.best_params holds the best iterate.",
                RuntimeWarning, stacklevel=3)
    ledger.check_responses(state, stacklevel=4)
