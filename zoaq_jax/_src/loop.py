"""The research loop: a whole optimization run as one jit-compiled ``lax.scan``."""

from __future__ import annotations

import functools
import inspect
import itertools
import warnings
import weakref
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.experimental import io_callback

from zoaq_jax._src import checks, host, ledger, oracle
from zoaq_jax._src.updates import apply_updates

STATUSES = ("running", "budget_spent", "diverged", "nonfinite", "finished", "stopped")
"""``Trace.status`` codes, why the run ended (the final row) or that it goes on (earlier
rows): 0 running; 1 the ``max_queries`` budget could not afford the next step; 2 the
free value estimate grew past ``divergence`` times its progress scale; 3
:data:`zoaq_jax.BLIND_STEPS` steps in a row had no finite free value estimate (no finite
response: the objective is undefined or infinite around the iterate), or the iterate
became non-finite; 4 every step was taken; 5 the ``progress`` callback raised (``run``
re-raises its exception). ``divergence=None`` turns 2 and 3 off."""
RUNNING, BUDGET_SPENT, DIVERGED, NONFINITE, FINISHED, STOPPED = range(len(STATUSES))

BLIND_STEPS = 4
"""How many steps in a row without a finite free value estimate stop a run (``nonfinite``;
a constant of the library, read by :func:`zoaq_jax.run`). One such step does not mean
that the iterate left the objective's domain: a central estimate averages responses at
``x ± mu u``, and a radius reaching over the domain's edge makes them NaN while ``x`` is
inside; a simulation may fail at scattered points. :func:`zoaq_jax.tuning_free` moves
nothing on such a step and (unless its ``mu`` is fixed) halves its step and radius, so a
few steps bring its probes back inside (``x - log x`` from 5 meets two such steps in a
row on one seed of five); the other estimators keep their momentum. An iterate truly
outside the domain gets no finite response again and stops after ``BLIND_STEPS`` steps:
the three before the stop cost what the estimator's step costs without a finite response
(ZoAQ expands to ``k_max``: ``2 k_max`` calls each), and an estimator with momentum may
coast on meanwhile (``trace.best_params`` holds the best iterate). With forward
differences the estimate is the centre value, so a step is counted only when that is not
finite. The streak is the state's ``blind_steps`` (:class:`zoaq_jax.QueryLedger`), so a
resumed run stops where the uninterrupted one would. A non-finite estimate is never
``diverged``."""


class Trace(NamedTuple):
    """Diagnostics at the logged steps ``0, log_every, 2 log_every, ..., num_steps``.

    ``value`` is the objective at the logged iterate, evaluated for monitoring: these
    evaluations are not oracle calls of the method and are not in ``num_queries``; they
    are counted in ``num_log_evaluations`` (0 with ``log_values=False``, ``value`` is
    then NaN). With ``max_queries`` they are paid from the budget (see :func:`run`): a
    log point whose iterate has not moved since the last evaluation repeats its value.
    An objective that takes ``noise_key`` (:data:`zoaq_jax.NOISE_KEY`) gets a key of
    the logging evaluation's own: after the estimator's ``t``-th step,
    ``fold_in(noise_root, 2**31 + t)`` (``noise_root`` the stream of its calls' keys,
    whose indices stay below ``2**31``), so a logged value never reuses a call's noise,
    and a resumed run logs what the uninterrupted one does.
    Diagnostics that the optimizer does not have are NaN (``last_score``, ``tau``) or 0.
    Every field has one row per log point except ``best_params``.
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
    status: jax.Array  # int32, a code of STATUSES (why the run ended, in the final row)
    best_params: optax.Params  # the iterate with the lowest free value estimate (final only)


def _diagnostic(state: optax.OptState, name: str, default: float, dtype) -> jax.Array:
    return jnp.asarray(optax.tree.get(state, name, default), dtype)


def _required(state: optax.OptState, name: str) -> jax.Array:
    value = optax.tree.get(state, name)
    if value is None:
        raise KeyError(f"extras: no diagnostic named {name!r} in the optimizer state.")
    return jnp.asarray(value, jnp.float32)


_STATIC_TYPES = (bool, int, str, type(None))
_LISTENERS: dict[int, Callable[[int, int], Any]] = {}  # progress callbacks by token
_ERRORS: dict[int, BaseException] = {}  # a progress callback's exception, by token
_DEFERRED: set[int] = set()  # tokens of runs under an outer transformation (run returned)
_TOKENS = itertools.count(1)


def _report(token, step, num_queries) -> np.ndarray:
    """Host side of the progress callback: calls the listener registered under ``token``.

    Returns whether the run may go on. When the listener raises, a run that ``run`` is
    still waiting for stops (``STOPPED``) and ``run`` re-raises the exception; a run
    under an outer transformation (executed after ``run`` returned) raises it here, for
    :func:`zoaq_jax.host_errors` to re-raise as itself.
    """
    token = int(token)
    listener = _LISTENERS.get(token)
    if listener is None or token in _ERRORS:
        return np.asarray(token not in _ERRORS)
    try:
        listener(int(step), int(num_queries))
    except Exception as err:
        if token in _DEFERRED:
            host.note_error(err)
            raise
        _ERRORS[token] = err
        return np.asarray(False)
    return np.asarray(True)


_PROGRAMS: dict[tuple[int, ...], Any] = {}  # ids of (init, update, value_fn) -> program


class _Program(NamedTuple):
    jitted: Callable[..., Any]
    finalizers: list


def _program(opt: Any, value_fn: Callable[..., Any]) -> Callable[..., Any]:
    """The compiled run of ``opt`` on ``value_fn``, cached by their identity, as
    ``jax.jit`` caches a function: a new function (another closure, global, default or
    schedule) is a new program, and nothing here keeps the objects alive (the cache
    holds weak references and drops the program when one of them is collected, with the
    arrays its trace captured). Objects that cannot be weakly referenced are not cached.
    """
    parts = (opt.init, opt.update, value_fn)
    key = tuple(map(id, parts))
    found = _PROGRAMS.get(key)
    if found is not None:
        return found.jitted
    try:
        refs = tuple(weakref.ref(part) for part in parts)
    except TypeError:
        return _compile(lambda: parts)
    entry = _Program(_compile(lambda: tuple(ref() for ref in refs)), [])
    _PROGRAMS[key] = entry
    entry.finalizers.extend(weakref.finalize(part, _forget, key) for part in parts)
    return entry.jitted


def _forget(key: tuple[int, ...]) -> None:
    """Drops the program of ``key`` (one of its objects was collected)."""
    entry = _PROGRAMS.pop(key, None)
    for finalizer in entry.finalizers if entry is not None else ():
        finalizer.detach()


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


def _foreign(exc: Exception) -> TypeError:
    return TypeError(
        "run: opt is not a zoaq_jax optimizer (its state has no query ledger) and its "
        "update failed when called as run calls it: update(None, state, params, "
        f"value_fn=...), with no gradient ({type(exc).__name__}: {exc}). run drives "
        "zeroth-order optimizers, which compute their updates from value_fn: use one of "
        "zoaq_jax's (e.g. zoaq_jax.zoaq(1e-2) or zoaq_jax.radazo(1e-2)), or a "
        "transformation whose update takes value_fn and ignores the missing gradient.")


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
) -> tuple[optax.Params, optax.OptState, Trace]:
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
        :func:`zoaq_jax.host_oracle`); one with a parameter ``noise_key`` gets a fresh
        key at every call (:func:`zoaq_jax.fixed_estimator`), and at every logging
        evaluation a key of that evaluation's own (:class:`Trace`).
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
      :class:`Trace` with ``num_steps // log_every + 1`` rows (step 0 first).

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
    token = None
    if progress is not None:
        token = next(_TOKENS)
        _LISTENERS[token] = progress
    traced = True  # until the outputs show otherwise (an optimizer may close over tracers)
    try:
        with host.host_errors():  # a host_oracle objective's own exception, not JAX's
            out = _program(opt, value_fn)(
                params, data, init_state, seed, max_queries, token,
                static=tuple(sorted(static.items())), num_steps=num_steps,
                log_every=log_every, extras=tuple(extras), divergence=divergence,
                log_values=bool(log_values))
            traced = any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(out))
            if not traced:
                jax.block_until_ready(out)
                jax.effects_barrier()  # every progress callback has run
    finally:  # under an outer transformation the callback runs later: it stays registered
        if token is not None and not traced:
            _LISTENERS.pop(token, None)
        elif token is not None:
            _DEFERRED.add(token)
    error = None if token is None else _ERRORS.pop(token, None)
    if error is not None:
        raise error
    if not traced:
        _warn(out[1], out[2], divergence)
    return out


def _warn(state: optax.OptState, trace: Trace, divergence: float | None) -> None:
    """Host warnings about a finished (concrete) run: divergence, zero responses."""
    status = np.asarray(trace.status).reshape(-1, trace.status.shape[-1])
    steps = np.asarray(trace.step).reshape(-1, status.shape[-1])[0]
    for code, why in ((DIVERGED, f"the free value estimate grew over {divergence} times "
                       "its best progress"),
                      (NONFINITE, f"{BLIND_STEPS} steps in a row had no finite free value "
                       "estimate (no finite response: the objective is undefined or "
                       "infinite around the iterate), or the iterate became non-finite")):
        if (status == code).any():
            step = int(steps[np.argmax((status == code).any(axis=0))])
            warnings.warn(
                f"zoaq_jax.run: stopped by step {step} ({STATUSES[code]}): {why}. The "
                "learning rate may be too large for this objective: lower learning_rate "
                "(e.g. 10x) or clip the updates; if the objective is infinite outside a "
                "domain, keep the iterate inside it (e.g. a penalty or a change of "
                "variables). trace.best_params holds the best iterate.",
                RuntimeWarning, stacklevel=3)
    ledger.check_responses(state, stacklevel=4)


def _equal(a: optax.Params, b: optax.Params) -> jax.Array:
    """Whether two parameter trees of one structure are equal, leaf by leaf (a bool)."""
    return jnp.all(jnp.stack([jnp.all(x == y) for x, y in zip(jax.tree.leaves(a),
                                                               jax.tree.leaves(b))]))


def _check_state(state: optax.OptState, expected: optax.OptState) -> None:
    """Refuses an ``init_state`` that another configuration of the optimizer made."""
    got, want = (jax.tree_util.tree_flatten_with_path(x)[0] for x in (state, expected))
    got_paths = [jax.tree_util.keystr(p) for p, _ in got]
    want_paths = [jax.tree_util.keystr(p) for p, _ in want]
    if got_paths != want_paths:
        field = next((w for g, w in zip(got_paths, want_paths) if g != w),
                     (want_paths + got_paths)[min(len(got_paths), len(want_paths))])
        raise ValueError(
            f"init_state{field}: the state's structure differs from this optimizer's "
            f"(fields {len(got_paths)} against {len(want_paths)}); it was made by another "
            "optimizer or configuration. Pass the state of the same optimizer.")
    for (path, a), (_, b) in zip(got, want):
        if jnp.shape(a) != b.shape or jnp.result_type(a) != b.dtype:
            raise ValueError(
                f"init_state{jax.tree_util.keystr(path)}: {jnp.result_type(a)}"
                f"{list(jnp.shape(a))} where this optimizer's state holds "
                f"{b.dtype}{list(b.shape)}: the state was made by another configuration "
                "(e.g. other k_max, n_hist or window sizes). Pass the state of the same "
                "optimizer.")


def _ledgers(state: optax.OptState) -> list[ledger.QueryLedger]:
    """The query ledgers of ``state`` (one per zoaq_jax estimator it holds)."""
    return [n for n in jax.tree.leaves(state, is_leaf=ledger.is_ledger) if ledger.is_ledger(n)]


def _limited(state: optax.OptState) -> bool:
    """Whether a ledger of ``state`` has a query limit (one the optimizer set itself)."""
    return any(n.query_limit is not None for n in _ledgers(state))


def _capped(state: optax.OptState, own: optax.OptState | None) -> optax.OptState:
    """``state`` whose ledgers' query limits are at most those ``own`` (a fresh state of
    the optimizer) sets, e.g. ``tuning_free(budget=B)``'s ``B`` calls in all: a run's
    ``max_queries`` never raises them, and a resumed state (whose limits ``run`` drops)
    gets them back. ``own`` None: ``state`` unchanged (no optimizer limit)."""
    if own is None:
        return state

    def cap(node, fresh):
        if not ledger.is_ledger(node) or fresh.query_limit is None:
            return node
        limit = fresh.query_limit if node.query_limit is None else jnp.minimum(
            node.query_limit, fresh.query_limit)
        return node._replace(query_limit=limit)

    return jax.tree.map(cap, state, own, is_leaf=ledger.is_ledger)


def _compile(parts: Callable[[], tuple]) -> Callable[..., Any]:
    """The jitted run of ``parts() = (init, update, value_fn)``."""
    return jax.jit(lambda *args, **kwargs: _run(*parts(), *args, **kwargs),
                   static_argnames=("static", "num_steps", "log_every", "extras",
                                    "divergence", "log_values"))


def _run(init, update, value_fn, params, kwargs, init_state, seed, max_queries, token, *,
         static, num_steps, log_every, extras, divergence, log_values):
    """:func:`run`'s program (traced once per optimizer, objective, length and shapes)."""
    kwargs = {**kwargs, **dict(static)}
    opt = optax.GradientTransformationExtraArgs(init, update)
    f = oracle.bind(value_fn, params, kwargs) if log_values else None
    fresh = jax.eval_shape(opt.init, params)
    ledgers = _ledgers(fresh)
    if len(ledgers) > 1:
        raise ValueError(
            f"opt: its state holds {len(ledgers)} query ledgers (zoaq_jax estimators), and "
            "run counts, limits and stops on one. Chain one zoaq_jax estimator with "
            "gradient transformations, or drive the chain with your own loop.")
    # the optimizer's own limits (tuning_free(budget=B)): None when it sets none
    own = opt.init(params) if _limited(fresh) else None
    if init_state is None:
        state = opt.init(params) if own is None else own
    else:  # each run has its own budget: a limit left by an earlier run is dropped
        state = ledger.limit_queries(init_state, None)
        _check_state(state, ledger.limit_queries(fresh, None))
        state = _capped(state, own)
    has_ledger = optax.tree.get(fresh, "num_queries") is not None
    noisy = log_values and oracle.takes_noise_key(value_fn)  # logged with keys of their own
    if noisy and not ledgers:
        raise TypeError(
            f"value_fn takes {oracle.NOISE_KEY!r}, a key that zoaq_jax estimators fill at "
            "every call, but opt has no zoaq_jax estimator (no query ledger) to derive "
            "the logging evaluations' keys from: use a zoaq_jax optimizer, or "
            "log_values=False.")
    if max_queries is not None and not has_ledger:
        raise ValueError("max_queries: the optimizer has no query ledger (num_queries); "
                         "use a zoaq_jax estimator or drop max_queries.")
    if not has_ledger:
        try:
            jax.eval_shape(lambda s, p: opt.update(None, s, p, value_fn=value_fn, **kwargs),
                           state, params)
        except Exception as exc:  # noqa: BLE001 - any failure: say why run cannot drive it
            raise _foreign(exc) from exc
    if seed is not None:
        state = ledger.with_key(state, seed)
    paid = max_queries is not None and log_values  # logging paid from the budget
    start = _diagnostic(state, "num_queries", 0, jnp.int32)
    if max_queries is not None:
        state = _capped(ledger.limit_queries(state, max_queries, start), own)

    class Carry(NamedTuple):
        params: optax.Params
        state: optax.OptState
        best_params: optax.Params
        best_value: jax.Array  # float32, the lowest estimate of this run
        status: jax.Array  # int32
        value: jax.Array  # float32, the last logged value
        logs: jax.Array  # int32, logging evaluations made
        moved: jax.Array  # bool, the iterate moved since the last logging evaluation

    def logged(params: optax.Params, state: optax.OptState) -> jax.Array:
        """The logged value at ``params``; an objective that takes a key gets the log
        point's own (:func:`ledger.log_key`), never an estimator call's."""
        if not noisy:
            return f(params).astype(jnp.float32)
        return f(params, ledger.log_key(_ledgers(state)[0])).astype(jnp.float32)

    def evaluate(carry: Carry) -> Carry:
        """The logged value at ``carry.params`` (and its cost, with a budget)."""
        if not log_values:
            return carry
        if not paid:
            return carry._replace(value=logged(carry.params, carry.state),
                                  logs=carry.logs + 1)
        used = _diagnostic(carry.state, "num_queries", 0, jnp.int32) - start + carry.logs
        call = carry.moved & (used < max_queries)
        value = jax.lax.cond(call, lambda p: logged(p, carry.state),
                             lambda p: jnp.where(carry.moved, jnp.nan, carry.value),
                             carry.params)
        logs = carry.logs + call.astype(jnp.int32)
        # the estimator may spend the rest, but one call for the next evaluation
        allowance = jnp.maximum(max_queries - logs - 1, 0)
        return carry._replace(value=value, logs=logs, moved=carry.moved & ~call,
                              state=_capped(ledger.limit_queries(carry.state, allowance,
                                                                 start), own))

    def record(step, carry: Carry) -> tuple[Carry, Trace]:
        carry = evaluate(carry)
        row = Trace(
            step=jnp.asarray(step, jnp.int32),
            value=carry.value,
            num_queries=_diagnostic(carry.state, "num_queries", 0, jnp.int32),
            last_k=_diagnostic(carry.state, "last_k", 0, jnp.int32),
            last_score=_diagnostic(carry.state, "last_score", jnp.nan, jnp.float32),
            tau=_diagnostic(carry.state, "tau", jnp.nan, jnp.float32),
            extras={name: _required(carry.state, name) for name in extras},
            num_log_evaluations=carry.logs,
            best_value=carry.best_value,
            status=carry.status,
            best_params=None,
        )
        if token is not None:
            going = io_callback(
                _report, jax.ShapeDtypeStruct((), jnp.bool_), token, row.step,
                row.num_queries)
            status = jnp.where(going | (carry.status != RUNNING), carry.status, STOPPED)
            carry = carry._replace(status=status.astype(jnp.int32))
            row = row._replace(status=carry.status)
        return carry, row

    def take(carry: Carry) -> Carry:
        updates, state = opt.update(None, carry.state, carry.params, value_fn=value_fn,
                                    **kwargs)
        params = apply_updates(carry.params, updates)
        if not has_ledger:
            return carry._replace(params=params, state=state, moved=jnp.asarray(True))
        spent = optax.tree.get(state, "num_queries") != optax.tree.get(
            carry.state, "num_queries")
        estimate = optax.tree.get(state, "value_estimate")
        better = spent & jnp.isfinite(estimate) & (estimate < carry.best_value)
        best_value = jnp.where(better, estimate, carry.best_value)
        status = jnp.where(spent, RUNNING, BUDGET_SPENT)
        # a paid log point after a step that left the iterate in place repeats its value
        stayed = _equal(params, carry.params) if paid else jnp.asarray(False)
        if divergence is not None:
            first = optax.tree.get(state, "first_value")
            best = optax.tree.get(state, "best_value")  # over the state's life (resumable)
            scale = jnp.maximum(jnp.abs(first - best), jnp.abs(best))
            grew = (scale > 0) & (estimate - best > divergence * scale) & jnp.isfinite(
                estimate)  # a non-finite estimate is a blind step's, below
            finite = jnp.stack([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(params)])
            blind = optax.tree.get(state, "blind_steps")  # in the state (resumable)
            bad = (blind >= BLIND_STEPS) | ~jnp.all(finite)
            status = jnp.where(spent & grew, DIVERGED, status)
            status = jnp.where(spent & bad, NONFINITE, status)
        stepped = carry._replace(params=params, state=state, best_value=best_value,
                                 status=jnp.asarray(status, jnp.int32),
                                 moved=carry.moved | ~stayed)
        stepped = stepped._replace(best_params=jax.tree.map(
            lambda a, b: jnp.where(better, a, b), carry.params, carry.best_params))
        if max_queries is None:
            return stepped
        # A step the budget could not afford is undone (later transforms, e.g. momentum,
        # would still move the parameters on its zero estimate).
        return jax.tree.map(lambda a, b: jnp.where(spent, a, b), stepped,
                            carry._replace(status=stepped.status))

    def one_step(carry: Carry, _):
        if max_queries is None and divergence is None and token is None:
            return take(carry), None
        going = carry.status == RUNNING
        if max_queries is None and token is None:
            # a select, not a cond: the program is the same batched or not, so a vmapped
            # run rounds as the unbatched one (steps after a stop are computed and
            # discarded, uncounted)
            return jax.tree.map(lambda a, b: jnp.where(going, a, b), take(carry), carry), None
        # with a budget or a progress callback, a stopped run makes no further call
        # (under vmap the cond is a select: stopped lanes are computed and discarded)
        return jax.lax.cond(going, take, lambda c: c, carry), None

    def one_period(carry, i):
        carry, _ = jax.lax.scan(one_step, carry, None, length=log_every)
        return record((i + 1) * log_every, carry)

    carry = Carry(params, state, params, jnp.full((), jnp.inf, jnp.float32),
                  jnp.zeros((), jnp.int32), jnp.full((), jnp.nan, jnp.float32),
                  jnp.zeros((), jnp.int32), jnp.asarray(True))
    carry, first = record(0, carry)
    carry, rest = jax.lax.scan(one_period, carry, jnp.arange(num_steps // log_every))
    trace = jax.tree.map(lambda a, b: jnp.concatenate([a[None], b]), first, rest)
    ended = jnp.where(carry.status == RUNNING, FINISHED, carry.status).astype(jnp.int32)
    trace = trace._replace(status=trace.status.at[-1].set(ended))
    best = carry.best_params if has_ledger else carry.params  # no estimates to rank by
    return carry.params, carry.state, trace._replace(best_params=best)
