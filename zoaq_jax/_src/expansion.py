"""The accept-or-expand loop over nested sets of fresh directions.

Adaptive estimators (ZoAQ, StatZO) grow the number ``K`` of fresh directions at the
current point on the grid ``{k_min, k_min + k_step, ..., k_max}`` until a test passes.
The candidate sets are nested: a retry buys only the ``k_step`` new directions and keeps
everything already bought. When ``k_step`` does not divide ``k_max - k_min`` the last
chunk has exactly the remaining size (a ``lax.cond`` between the two chunk sizes), so
every evaluated direction is a counted query. The loop is a ``lax.while_loop``, so a
step compiles once whatever budget it ends up spending.

Batched execution: under ``jax.vmap`` the loop runs until the slowest lane accepts.
Lanes that have accepted still execute the body (XLA evaluates the objective for them)
but keep their carry unchanged, so their counts and records are exact; the extra
evaluations are wasted compute, not queries. Under ``vmap`` the chunk-size ``cond``
becomes a ``select``: both chunk sizes are evaluated and one is kept, so a
non-dividing grid adds the remainder chunk's evaluations as further uncounted work.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp

from zoaq_jax._src import directions as dirs
from zoaq_jax._src import ledger
from zoaq_jax._src import oracle


class Candidate(NamedTuple):
    """The fresh records acquired so far at the current step, and the last test."""

    k: jax.Array  # int32, fresh directions acquired (a grid point)
    total: chex.ArrayTree  # sum over finite fresh records of r_i u_i, shaped like the params
    sq_norm: jax.Array  # float32, sum of ||r_i u_i||^2 (only with second_moment)
    value_sum: jax.Array  # float32, sum of the finite records' free estimates of f(x)
    n_ok: jax.Array  # int32, finite fresh records
    responses: jax.Array  # [k_max] float32 raw fresh responses
    ok: jax.Array  # [k_max] bool, acquired and finite
    score: jax.Array  # float32, score of the last test
    accepted: jax.Array  # bool


def draw_step(
    kind: dirs.Family, key: jax.Array, slots: int, like: chex.ArrayTree,
    retained_keys: jax.Array | None = None,
) -> tuple[chex.ArrayTree | None, chex.ArrayTree | None]:
    """Draws a step's ``slots`` fresh directions, and those of ``retained_keys``, at once.

    Returns ``(retained, fresh)`` direction batches, or ``(None, None)`` when the batch
    would be too large (:func:`directions.fits_in_batch`) and directions must be drawn
    where they are used.
    """
    n_retained = 0 if retained_keys is None else retained_keys.shape[0]
    if not dirs.fits_in_batch(n_retained + slots, like):
        return None, None
    keys = ledger.direction_keys(key, 0, slots)
    if n_retained:
        keys = jnp.concatenate([retained_keys, keys])  # type: ignore[list-item]
    u = dirs.sample_many(kind, keys, like)
    retained = jax.tree.map(lambda x: x[:n_retained], u) if n_retained else None
    return retained, jax.tree.map(lambda x: x[n_retained:], u)


EVALUATIONS = ("loop", "unrolled", "vectorized")
"""How a step's candidates are evaluated (the static ``evaluation`` argument of the
adaptive estimators).

* ``"loop"`` (the default): the lazy ``while_loop``, chunk by chunk; nothing beyond the
  budget bought is evaluated.
* ``"unrolled"``: when a step's ``k_max`` fresh directions are drawn in one batch
  (``predraw``), their responses are computed in one batched call, every candidate of
  the grid is built with the loop's chunks and additions and tested, and the first
  accepted one is kept: no ``while_loop``, so under ``vmap`` no lane waits for another
  (grids of more than ``_UNROLL_LIMIT`` points keep the loop over precomputed responses).
* ``"vectorized"``: as ``"unrolled"``, but all candidates come from cumulative sums and
  one batched test; the additions' order, hence the rounding of the estimates, may differ
  from the loop's.

Both non-default forms accept the ``K``, count the queries and keep the records that the
loop would for the same responses, but evaluating the objective in one batch of
``k_max`` rather than chunk by chunk may round the responses differently; estimators
with running sums of retained records accumulate such last-bit differences, so long runs
drift from the loop's trajectory. They evaluate the objective at directions the step may
not buy: uncounted compute, like the evaluations of finished lanes under ``vmap``. Where
directions are not predrawn (the batch limit, ``predraw=False``) every form is the loop.
Measured in ``docs/results/overhead.md``.
"""
_UNROLL_LIMIT = 32  # unrolled steps with at most this many grid points are decided unrolled


class StepOracle(NamedTuple):
    """The objective as one step queries it: the scheme, the centre value and its cost."""

    diff: oracle.FiniteDifference
    centre: jax.Array | None  # f(x) for forward differences, None for central
    centre_calls: int  # oracle calls the centre value cost (0 or 1)
    centre_bad: jax.Array  # bool: a non-finite forward centre, which ends the step
    coarse: jax.Array | bool  # a zero response may be blamed on mu (FiniteDifference.coarse)

    def charge(self, book: ledger.QueryLedger, cand: Candidate) -> ledger.QueryLedger:
        """``book`` advanced by one step that bought ``cand``'s fresh directions."""
        return ledger.advance(
            book, k=cand.k, calls=self.step_calls(cand.k), nonfinite=cand.k - cand.n_ok,
            zero=jnp.sum(cand.ok & (cand.responses == 0) & self.coarse, dtype=jnp.int32),
            value=self.value_estimate(cand),
        )

    def step_calls(self, k: int | jax.Array) -> int | jax.Array:
        """Oracle calls of a step that buys ``k`` fresh directions, centre included."""
        return self.diff.step_calls(k, self.centre_calls)

    def value_estimate(self, cand: Candidate) -> jax.Array:
        """The step's own estimate of ``f(x)``: the centre value (forward) or the mean
        midpoint of the finite central pairs; NaN when there is none."""
        if self.centre is not None:
            return self.centre.astype(jnp.float32)
        return oracle.mean_value(cand.value_sum, cand.n_ok)


def open_step(
    value_fn: Callable[..., Any], params: chex.ArrayTree, extra_args: dict,
    value: jax.Array | None, mu: float | jax.Array,
    difference: str, family: dirs.Family,
) -> StepOracle:
    """Binds ``value_fn`` to its data and queries the centre value if the scheme needs it."""
    diff = oracle.FiniteDifference(oracle.bind(value_fn, params, extra_args), mu, difference)
    centre, calls = diff.centre(params, value)
    bad = jnp.asarray(False) if centre is None else ~jnp.isfinite(centre)
    return StepOracle(diff, centre, calls, bad, diff.coarse(params, family))


def fresh_acquirer(
    step: StepOracle, params: chex.ArrayTree, key: jax.Array, kind: dirs.Family,
    drawn: chex.ArrayTree | None = None,
    evaluation: str = "loop",
) -> Callable[[jax.Array | int, int], tuple[jax.Array, jax.Array, chex.ArrayTree]]:
    """``acquire(first, size)`` for :func:`accept_or_expand` at ``params``.

    Fresh direction ``i`` of the step keyed by ``key`` comes from
    ``ledger.direction_keys(key, i, 1)``. ``drawn``, when given, holds all of them drawn
    in advance (leading axis ``k_max``): drawing them in one batch is much cheaper
    than one draw per retry when ``d`` is small, and gives the same numbers. With
    ``evaluation`` other than ``"loop"`` (see :data:`EVALUATIONS`) and ``drawn`` given,
    every response is computed up front.
    """

    if drawn is not None and evaluation != "loop":
        all_r, all_v = step.diff.responses(params, drawn, step.centre)

        def acquire_precomputed(first: jax.Array | int, size: int
                                ) -> tuple[jax.Array, jax.Array, chex.ArrayTree]:
            def cut(x):
                return jax.lax.dynamic_slice_in_dim(x, first, size)

            return cut(all_r), cut(all_v), jax.tree.map(cut, drawn)

        # accept_or_expand may decide without a loop
        acquire_precomputed.precomputed = True  # type: ignore[attr-defined]
        return acquire_precomputed

    def acquire(first: jax.Array | int, size: int) -> tuple[jax.Array, jax.Array, chex.ArrayTree]:
        if drawn is None:
            u = dirs.sample_many(kind, ledger.direction_keys(key, first, size), params)
        else:
            u = jax.tree.map(lambda x: jax.lax.dynamic_slice_in_dim(x, first, size), drawn)
        return (*step.diff.responses(params, u, step.centre), u)

    return acquire


def accept_or_expand(
    acquire: Callable[[jax.Array | int, int], tuple[jax.Array, jax.Array, chex.ArrayTree]],
    test: Callable[[Candidate], tuple[jax.Array, jax.Array]],
    like: chex.ArrayTree,
    *,
    k_min: int,
    k_max: int,
    k_step: int,
    k_start: jax.Array | int,
    second_moment: bool = False,
    evaluation: str = "loop",
    k_cap: jax.Array | None = None,
) -> Candidate:
    """Acquires fresh directions chunk by chunk until ``test`` accepts.

    Args:
      acquire: ``acquire(first, size)`` returns the responses ``[size]``, their free
        estimates of ``f(x)`` ``[size]`` and the directions (leading axis ``size``) of
        fresh indices ``first .. first+size-1``.
      test: ``test(candidate)`` returns ``(score, passed)`` for the candidate built from
        the records acquired so far.
      like: the params, for the shape of the running sum.
      k_min: first grid point; the first acquisition buys ``k_min`` directions.
      k_max: last grid point; a candidate at ``k_max`` is accepted whatever its score.
      k_step: grid spacing, the size of every later acquisition.
      k_start: the first grid point at which the test is consulted (reset policies
        may start a step above ``k_min``); earlier chunks are bought without a test.
      second_moment: also accumulate ``sum ||r_i u_i||^2`` (for variance tests).
      evaluation: ``"vectorized"`` builds the candidates from cumulative sums when
        ``acquire`` has precomputed its responses (see :data:`EVALUATIONS`).
      k_cap: a grid point below ``k_max`` at which the step must stop (a query limit,
        :func:`grid_cap`); the candidate there is accepted whatever its score, and the
        test is consulted from ``min(k_start, k_cap)`` on. None: ``k_max``.

    Returns:
      The accepted :class:`Candidate`.
    """
    slots = k_max  # fresh records of one step: every K grid ends exactly at k_max

    def absorb(cand: Candidate, first: jax.Array | int, size: int) -> Candidate:
        # Directions drawn where they are used come in chunks of at most `chunk`: the same
        # numbers and records, added one chunk after the other (a large vectorised draw
        # and its 2 * size perturbed points cost more per number than chunks that stay
        # in cache). Predrawn directions are sliced from one batch that fits anyway.
        chunk = size if getattr(acquire, "precomputed", False) else dirs.batch_size(like)
        if size > chunk:
            cand = jax.lax.fori_loop(
                0, size // chunk, lambda j, c: absorb_chunk(c, first + j * chunk, chunk), cand)
            first, size = first + size // chunk * chunk, size % chunk
            if not size:
                return cand
        return absorb_chunk(cand, first, size)

    def absorb_chunk(cand: Candidate, first: jax.Array | int, size: int) -> Candidate:
        responses, values, directions = acquire(first, size)
        ok = jnp.isfinite(responses)
        coeffs = jnp.where(ok, responses, 0.0)
        total = jax.tree.map(jnp.add, cand.total, dirs.weighted_sum(coeffs, directions))
        sq_norm = cand.sq_norm
        if second_moment:
            norms = sum(
                jnp.sum(jnp.square(u).reshape(size, -1), axis=1).astype(jnp.float32)
                for u in jax.tree.leaves(directions)
            )
            sq_norm = sq_norm + jnp.sum(jnp.square(coeffs) * norms)
        return cand._replace(
            k=jnp.asarray(first + size, jnp.int32),
            total=total,
            sq_norm=sq_norm,
            value_sum=cand.value_sum + jnp.sum(jnp.where(ok, values, 0.0)),
            n_ok=cand.n_ok + jnp.sum(ok, dtype=jnp.int32),
            responses=_update_slice(cand.responses, responses, first),
            ok=_update_slice(cand.ok, ok, first),
        )

    def decide(cand: Candidate) -> Candidate:
        score, passed = test(cand)
        if k_cap is None:
            accepted = (cand.k >= k_start) & (passed | (cand.k >= k_max))
        else:
            accepted = (cand.k >= jnp.minimum(k_start, k_cap)) & (passed | (cand.k >= k_cap))
        return cand._replace(score=jnp.asarray(score, jnp.float32), accepted=accepted)

    empty = Candidate(
        k=jnp.zeros((), jnp.int32),
        total=dirs.zeros(like),
        sq_norm=jnp.zeros((), jnp.float32),
        value_sum=jnp.zeros((), jnp.float32),
        n_ok=jnp.zeros((), jnp.int32),
        responses=jnp.zeros((slots,), jnp.float32),
        ok=jnp.zeros((slots,), bool),
        score=jnp.zeros((), jnp.float32),
        accepted=jnp.zeros((), bool),
    )

    remainder = (k_max - k_min) % k_step

    def expand(cand: Candidate) -> Candidate:
        if not remainder:
            return decide(absorb(cand, cand.k, k_step))
        # The last chunk is cut at k_max: evaluate exactly the directions it buys.
        return decide(jax.lax.cond(
            k_max - cand.k >= k_step,
            lambda c: absorb(c, c.k, k_step),
            lambda c: absorb(c, c.k, remainder),
            cand,
        ))

    sizes = [k_min] + [k_step] * ((k_max - k_min) // k_step) + ([remainder] if remainder else [])
    if getattr(acquire, "precomputed", False) and evaluation == "vectorized":
        # Every candidate of the grid at once: prefix sums over the precomputed records
        # (cumulative sums: the additions' order, hence rounding, may differ from the
        # loop's), one batched test, the first accepted candidate per lane.
        responses, values, directions = acquire(0, slots)
        ok = jnp.isfinite(responses)
        coeffs = jnp.where(ok, responses, 0.0)
        ends = jnp.cumsum(jnp.asarray(sizes, jnp.int32))  # the grid points
        pick = ends - 1

        def prefix(x):
            return jnp.cumsum(x, axis=0)[pick]

        totals = jax.tree.map(
            lambda u: prefix(coeffs.astype(u.dtype).reshape((slots,) + (1,) * (u.ndim - 1))
                             * u), directions)
        sq = jnp.zeros((slots,), jnp.float32)
        if second_moment:
            norms = sum(jnp.sum(jnp.square(u).reshape(slots, -1), axis=1).astype(jnp.float32)
                        for u in jax.tree.leaves(directions))
            sq = jnp.square(coeffs) * norms
        grid = Candidate(
            k=ends, total=totals, sq_norm=prefix(sq),
            value_sum=prefix(jnp.where(ok, values, 0.0)),
            n_ok=prefix(ok.astype(jnp.int32)),
            responses=jnp.zeros((len(sizes), slots), jnp.float32),
            ok=jnp.zeros((len(sizes), slots), bool),
            score=jnp.zeros((len(sizes),), jnp.float32),
            accepted=jnp.zeros((len(sizes),), bool))
        decided = jax.vmap(decide)(grid)
        index = jnp.argmax(decided.accepted.at[-1].set(True))
        chosen = jax.tree.map(lambda x: x[index], decided)
        bought = jnp.arange(slots) < chosen.k
        return chosen._replace(responses=jnp.where(bought, responses, 0.0),
                               ok=bought & ok)
    if getattr(acquire, "precomputed", False) and len(sizes) <= _UNROLL_LIMIT:
        # Responses are already computed: build every candidate of the
        # grid with the same chunks and additions as the loop, test them all, and keep
        # the first accepted one. No while_loop, so no lane waits for another under vmap.
        cands, first = [], 0
        cand = empty
        for size in sizes:
            cand = decide(absorb(cand, first, size))
            cands.append(cand)
            first += size
        chosen = cands[-1]  # accepted: it is at k_max
        for cand in reversed(cands[:-1]):  # the first accepted candidate wins
            chosen = jax.tree.map(lambda a, b, ok=cand.accepted: jnp.where(ok, a, b),
                                  cand, chosen)
        return chosen
    if k_step == k_min and k_max > k_min:
        # Every chunk has the same size, so the first one is an ordinary iteration and
        # the objective is traced (and compiled) once rather than twice.
        return jax.lax.while_loop(lambda c: ~c.accepted, expand, empty)
    cand = decide(absorb(empty, jnp.zeros((), jnp.int32), k_min))
    if k_max == k_min:
        return cand
    return jax.lax.while_loop(lambda c: ~c.accepted, expand, cand)


def grid_cap(k_min: int, k_max: int, k_step: int, affordable: jax.Array) -> jax.Array:
    """The largest grid point ``<= affordable`` (``k_min`` when none is: the caller then
    skips the step)."""
    below = k_min + (jnp.maximum(affordable, k_min) - k_min) // k_step * k_step
    return jnp.where(affordable >= k_max, k_max, jnp.minimum(below, k_max)).astype(jnp.int32)


def _update_slice(buffer: jax.Array, update: jax.Array, first: jax.Array | int) -> jax.Array:
    """``dynamic_update_slice`` of a replicated buffer, whatever mesh ``update`` is on.

    With explicit mesh axes (``jax.make_mesh``'s default) the objective's batched output
    carries the params' mesh while the step's buffers, made by ``jnp.zeros``, carry none,
    and ``dynamic_update_slice`` requires equal shardings: the buffer then joins the
    update's mesh, replicated. With Auto axes both have no mesh and nothing changes.
    """
    sharding = jax.typeof(update).sharding
    if jax.typeof(buffer).sharding.mesh != sharding.mesh:
        buffer = jax.sharding.reshard(buffer, sharding.update(spec=jax.sharding.PartitionSpec()))
    return jax.lax.dynamic_update_slice(buffer, update, (first,))


def finish(total: chex.ArrayTree, n: jax.Array, scale: float, n_fresh: jax.Array
           ) -> tuple[chex.ArrayTree, jax.Array]:
    """The estimate ``scale * total / n`` (compute dtypes) and whether it is usable.

    ``n`` counts the records in ``total`` and ``n_fresh`` the finite fresh ones among
    them. An estimate is unusable when no finite fresh response entered it (retained
    records alone say nothing about the current point) or when it overflowed; it is
    then returned as zeros so that it cannot poison any downstream state.
    """
    factor = scale / jnp.maximum(n, 1).astype(jnp.float32)
    g = jax.tree.map(lambda t: t * factor.astype(t.dtype), total)
    finite = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(g)]
    usable = (n_fresh > 0) & jnp.all(jnp.stack(finite))
    return jax.tree.map(lambda x: jnp.where(usable, x, 0), g), usable
