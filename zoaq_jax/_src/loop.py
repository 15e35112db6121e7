"""The research loop: a whole optimization run as one jit-compiled ``lax.scan``.

A run is built from module-level functions over a typed carry, :class:`RunState`:
:func:`setup` prepares the optimizer state and the fixed parts of the run
(:class:`Loop`), :func:`init` the carry, :func:`step` takes one update and applies the
stop rules, :func:`record` logs a row of the :class:`Trace` (evaluating the objective
with :func:`evaluate`), and :func:`program` scans them. :func:`zoaq_jax.run` compiles
:func:`program` once per optimizer and objective (:mod:`programs`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax.experimental import io_callback

from zoaq_jax._src import callbacks, ledger, oracle
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


class Loop(NamedTuple):
    """The fixed parts of one traced run (made by :func:`setup`)."""

    opt: optax.GradientTransformationExtraArgs
    value_fn: Callable[..., Any]
    kwargs: dict[str, Any]  # value_fn's data, its static keywords included
    f: Callable[[optax.Params], jax.Array] | None  # the logged objective (None: no logging)
    own: optax.OptState | None  # the optimizer's own query limits (a fresh state), or None
    has_ledger: bool  # the optimizer's state has a query ledger (a zoaq_jax estimator)
    max_queries: int | jax.Array | None  # the run's budget, logging included
    start: jax.Array  # int32, the state's num_queries when the run began
    token: jax.Array | None  # the progress callback's token (callbacks.register)
    extras: tuple[str, ...]
    divergence: float | None
    paid: bool  # logging evaluations are paid from max_queries


class RunState(NamedTuple):
    """The carry of a run's scan."""

    params: optax.Params
    state: optax.OptState
    best_params: optax.Params
    best_value: jax.Array  # float32, the lowest estimate of this run
    status: jax.Array  # int32
    value: jax.Array  # float32, the last logged value
    logs: jax.Array  # int32, logging evaluations made
    moved: jax.Array  # bool, the iterate moved since the last logging evaluation


def _diagnostic(state: optax.OptState, name: str, default: float, dtype) -> jax.Array:
    return jnp.asarray(optax.tree.get(state, name, default), dtype)


def _required(state: optax.OptState, name: str) -> jax.Array:
    value = optax.tree.get(state, name)
    if value is None:
        raise KeyError(f"extras: no diagnostic named {name!r} in the optimizer state.")
    return jnp.asarray(value, jnp.float32)


def _foreign(exc: Exception) -> TypeError:
    return TypeError(
        "run: opt is not a zoaq_jax optimizer (its state has no query ledger) and its "
        "update failed when called as run calls it: update(None, state, params, "
        f"value_fn=...), with no gradient ({type(exc).__name__}: {exc}). run drives "
        "zeroth-order optimizers, which compute their updates from value_fn: use one of "
        "zoaq_jax's (e.g. zoaq_jax.zoaq(1e-2) or zoaq_jax.radazo(1e-2)), or a "
        "transformation whose update takes value_fn and ignores the missing gradient.")


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


def setup(init_fn, update_fn, value_fn, params, kwargs, init_state, seed, max_queries, token,
          *, extras, divergence, log_values) -> tuple[Loop, optax.OptState]:
    """The fixed parts of a run and the optimizer state it starts from (checked against
    the optimizer's, reseeded, capped by the budget and the optimizer's own limits)."""
    opt = optax.GradientTransformationExtraArgs(init_fn, update_fn)
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
    loop = Loop(opt=opt, value_fn=value_fn, kwargs=kwargs, f=f, own=own,
                has_ledger=has_ledger, max_queries=max_queries, start=start, token=token,
                extras=extras, divergence=divergence, paid=paid)
    return loop, state


def init(params: optax.Params, state: optax.OptState) -> RunState:
    """The carry before the first step."""
    return RunState(params, state, params, jnp.full((), jnp.inf, jnp.float32),
                    jnp.zeros((), jnp.int32), jnp.full((), jnp.nan, jnp.float32),
                    jnp.zeros((), jnp.int32), jnp.asarray(True))


def evaluate(loop: Loop, carry: RunState) -> RunState:
    """The logged value at ``carry.params`` (and its cost, with a budget)."""
    if loop.f is None:
        return carry
    f, max_queries = loop.f, loop.max_queries
    if not loop.paid:
        return carry._replace(value=f(carry.params).astype(jnp.float32),
                              logs=carry.logs + 1)
    assert max_queries is not None  # paid: from the run's budget
    used = _diagnostic(carry.state, "num_queries", 0, jnp.int32) - loop.start + carry.logs
    call = carry.moved & (used < max_queries)
    value = jax.lax.cond(call, lambda p: f(p).astype(jnp.float32),
                         lambda p: jnp.where(carry.moved, jnp.nan, carry.value),
                         carry.params)
    logs = carry.logs + call.astype(jnp.int32)
    # the estimator may spend the rest, but one call for the next evaluation
    allowance = jnp.maximum(max_queries - logs - 1, 0)
    return carry._replace(value=value, logs=logs, moved=carry.moved & ~call,
                          state=_capped(ledger.limit_queries(carry.state, allowance,
                                                             loop.start), loop.own))


def record(loop: Loop, step: int | jax.Array, carry: RunState) -> tuple[RunState, Trace]:
    """The carry after the log point at ``step`` and its row of the trace (the progress
    callback, if any, may stop the run here)."""
    carry = evaluate(loop, carry)
    row = Trace(
        step=jnp.asarray(step, jnp.int32),
        value=carry.value,
        num_queries=_diagnostic(carry.state, "num_queries", 0, jnp.int32),
        last_k=_diagnostic(carry.state, "last_k", 0, jnp.int32),
        last_score=_diagnostic(carry.state, "last_score", jnp.nan, jnp.float32),
        tau=_diagnostic(carry.state, "tau", jnp.nan, jnp.float32),
        extras={name: _required(carry.state, name) for name in loop.extras},
        num_log_evaluations=carry.logs,
        best_value=carry.best_value,
        status=carry.status,
        best_params=None,
    )
    if loop.token is not None:
        going = io_callback(
            callbacks.report, jax.ShapeDtypeStruct((), jnp.bool_), loop.token, row.step,
            row.num_queries)
        status = jnp.where(going | (carry.status != RUNNING), carry.status, STOPPED)
        carry = carry._replace(status=status.astype(jnp.int32))
        row = row._replace(status=carry.status)
    return carry, row


def _take(loop: Loop, carry: RunState) -> RunState:
    """One update of the optimizer, the best iterate and the stop rules' status."""
    updates, state = loop.opt.update(None, carry.state, carry.params,
                                     value_fn=loop.value_fn, **loop.kwargs)
    params = apply_updates(carry.params, updates)
    if not loop.has_ledger:
        return carry._replace(params=params, state=state, moved=jnp.asarray(True))
    spent = optax.tree.get(state, "num_queries") != optax.tree.get(
        carry.state, "num_queries")
    estimate = optax.tree.get(state, "value_estimate")
    better = spent & jnp.isfinite(estimate) & (estimate < carry.best_value)
    best_value = jnp.where(better, estimate, carry.best_value)
    status = jnp.where(spent, RUNNING, BUDGET_SPENT)
    # a paid log point after a step that left the iterate in place repeats its value
    stayed = _equal(params, carry.params) if loop.paid else jnp.asarray(False)
    if loop.divergence is not None:
        first = optax.tree.get(state, "first_value")
        best = optax.tree.get(state, "best_value")  # over the state's life (resumable)
        scale = jnp.maximum(jnp.abs(first - best), jnp.abs(best))
        grew = (scale > 0) & (estimate - best > loop.divergence * scale) & jnp.isfinite(
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
    if loop.max_queries is None:
        return stepped
    # A step the budget could not afford is undone (later transforms, e.g. momentum,
    # would still move the parameters on its zero estimate).
    return jax.tree.map(lambda a, b: jnp.where(spent, a, b), stepped,
                        carry._replace(status=stepped.status))


def step(loop: Loop, carry: RunState) -> RunState:
    """The carry after one step of the run (none once it has stopped)."""
    if loop.max_queries is None and loop.divergence is None and loop.token is None:
        return _take(loop, carry)
    going = carry.status == RUNNING
    if loop.max_queries is None and loop.token is None:
        # a select, not a cond: the program is the same batched or not, so a vmapped
        # run rounds as the unbatched one (steps after a stop are computed and
        # discarded, uncounted)
        return jax.tree.map(lambda a, b: jnp.where(going, a, b), _take(loop, carry), carry)
    # with a budget or a progress callback, a stopped run makes no further call
    # (under vmap the cond is a select: stopped lanes are computed and discarded)
    return jax.lax.cond(going, lambda c: _take(loop, c), lambda c: c, carry)


def finish(loop: Loop, carry: RunState, trace: Trace
           ) -> tuple[optax.Params, optax.OptState, Trace]:
    """``run``'s outputs from the final carry and the logged rows: the final row's status
    says why the run ended, and the best iterate is attached."""
    ended = jnp.where(carry.status == RUNNING, FINISHED, carry.status).astype(jnp.int32)
    trace = trace._replace(status=trace.status.at[-1].set(ended))
    best = carry.best_params if loop.has_ledger else carry.params  # no estimates to rank by
    return carry.params, carry.state, trace._replace(best_params=best)


def program(init_fn, update_fn, value_fn, params, kwargs, init_state, seed, max_queries, token,
            *, static, num_steps, log_every, extras, divergence, log_values):
    """:func:`zoaq_jax.run`'s program (traced once per optimizer, objective, length and
    shapes): ``num_steps // log_every`` periods of ``log_every`` steps, a row each."""
    loop, state = setup(init_fn, update_fn, value_fn, params, {**kwargs, **dict(static)},
                        init_state, seed, max_queries, token, extras=extras,
                        divergence=divergence, log_values=log_values)

    def period(carry, i):
        carry, _ = jax.lax.scan(lambda c, _: (step(loop, c), None), carry, None,
                                length=log_every)
        return record(loop, (i + 1) * log_every, carry)

    carry, first = record(loop, 0, init(params, state))
    carry, rest = jax.lax.scan(period, carry, jnp.arange(num_steps // log_every))
    return finish(loop, carry, jax.tree.map(lambda a, b: jnp.concatenate([a[None], b]),
                                            first, rest))


def compile(parts: Callable[[], tuple]) -> Callable[..., Any]:
    """The jitted :func:`program` of ``parts() = (init, update, value_fn)``."""
    return jax.jit(lambda *args, **kwargs: program(*parts(), *args, **kwargs),
                   static_argnames=("static", "num_steps", "log_every", "extras",
                                    "divergence", "log_values"))
