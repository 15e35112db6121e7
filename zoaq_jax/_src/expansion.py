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

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from zoaq_jax._src import directions as dirs
from zoaq_jax._src import ledger
from zoaq_jax._src import oracle
from zoaq_jax._src.policies import Grid


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
    kind: dirs.Family, schedule: ledger.KeySchedule, book: ledger.QueryLedger, slots: int,
    like: chex.ArrayTree, retained: tuple[jax.Array, jax.Array] | None = None,
    n_drawn: int = 0,
) -> tuple[chex.ArrayTree | None, tuple[jax.Array, jax.Array] | None]:
    """Draws a step's ``slots`` fresh directions, and those of the first ``n_drawn`` of the
    ``retained`` records (``(steps, index)``, the buffer oldest first), at once; the
    directions' per-leaf keys of all of them, fresh and retained, are derived in one
    batch (:meth:`ledger.KeySchedule.step_and_record_keys`), and kept for the draws of
    the step and of its refresh.

    Returns ``(batch, keys)``: the directions, the ``n_drawn`` retained ones first, then
    the fresh ones (one array a leaf, which every use slices or picks rows of: an array
    of its own would make XLA compute the draw again, fused into each use); None when
    the batch would be too large (:func:`directions.fits_in_batch`) and directions must
    be drawn where they are used; and the per-leaf keys ``(fresh, retained)`` (None
    without ``retained``).
    """
    derived = None
    if retained is not None:
        derived = schedule.step_and_record_keys(book, slots, *retained, like)
    if not dirs.fits_in_batch(n_drawn + slots, like):
        return None, derived
    if derived is None:
        keys = ledger.direction_keys(schedule.step_key(book), 0, slots)
    else:
        keys = jnp.concatenate([derived[1][:n_drawn], derived[0]])
    return dirs.sample_many(kind, keys, like), derived


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
    value_fn: Callable[..., jax.Array], params: chex.ArrayTree, extra_args: dict[str, Any],
    value: jax.Array | None, mu: float | jax.Array,
    difference: str, family: dirs.Family, book: ledger.QueryLedger, common: bool,
) -> StepOracle:
    """Binds ``value_fn`` to its data and queries the centre value if the scheme needs it.

    An objective that takes :data:`oracle.NOISE_KEY` gets the step's call keys from
    ``book`` (the ledger before the step; ``common``: common random numbers), see
    :func:`ledger.call_keys`."""
    diff = oracle.FiniteDifference(oracle.bind(value_fn, params, extra_args), mu, difference)
    diff = ledger.with_call_keys(diff, value_fn, book, diff.centre_calls(value), common)
    centre, calls = diff.centre(params, value)
    bad = jnp.asarray(False) if centre is None else ~jnp.isfinite(centre)
    return StepOracle(diff, centre, calls, bad, diff.coarse(params, family))


class Acquirer(NamedTuple):
    """``acquire(first, size, before_loop)``: the fresh records ``first .. first+size-1``
    of a step (``before_loop``: the chunk bought before the expansion loop, a static
    choice), and whether all of them were computed up front (a static choice of
    strategy)."""

    acquire: Callable[[jax.Array | int, int, bool],
                      tuple[jax.Array, jax.Array, chex.ArrayTree]]
    precomputed: bool = False  # every response of the step is already computed


def fresh_acquirer(
    step: StepOracle, params: chex.ArrayTree, key: jax.Array, kind: dirs.Family,
    drawn: chex.ArrayTree | None = None,
    evaluation: str = "loop",
    keys: jax.Array | None = None,
    skip: int = 0,
    shared: bool = False,
) -> Acquirer:
    """The :class:`Acquirer` of the fresh directions of a step at ``params``.

    Fresh direction ``i`` of the step keyed by ``key`` comes from
    ``ledger.direction_keys(key, i, 1)``; ``keys``, when given, holds their per-leaf keys
    (``[k_max, L]``, :func:`directions.leaf_keys`), derived in advance. ``drawn``, when
    given, holds all of them drawn in advance (leading axis ``skip + k_max``, fresh
    direction ``i`` at row ``skip + i``: :func:`draw_step`'s batch): drawing them in
    one batch is much cheaper than one draw per retry when ``d`` is small, and gives
    the same numbers. ``shared`` says that the batch has other uses (the expansion loop,
    the leaving records): the first chunk, bought before the loop (``before_loop``),
    then picks its rows by a product (:func:`directions.pick_rows`), as a slice would
    make XLA draw the batch again in the chunk's uses. With
    ``evaluation`` other than ``"loop"`` (see :data:`EVALUATIONS`) and ``drawn`` given,
    every response is computed up front (``precomputed``).
    """

    def cut(x: jax.Array, first: jax.Array | int, size: int) -> jax.Array:
        return jax.lax.dynamic_slice_in_dim(x, first, size)

    if drawn is not None and evaluation != "loop":
        drawn = jax.tree.map(lambda x: x[skip:], drawn)
        all_r, all_v = step.diff.responses(params, drawn, step.centre, 0)

        def acquire_precomputed(first: jax.Array | int, size: int, before_loop: bool = False
                                ) -> tuple[jax.Array, jax.Array, chex.ArrayTree]:
            del before_loop  # every chunk is a slice of the computed batch
            return (cut(all_r, first, size), cut(all_v, first, size),
                    jax.tree.map(lambda x: cut(x, first, size), drawn))

        return Acquirer(acquire_precomputed, precomputed=True)

    def acquire(first: jax.Array | int, size: int, before_loop: bool = False
                ) -> tuple[jax.Array, jax.Array, chex.ArrayTree]:
        if drawn is None:
            u = dirs.sample_many(kind, ledger.direction_keys(key, first, size) if keys is None
                                 else cut(keys, first, size), params)
        elif shared and before_loop:  # the chunk(s) loop_init buys before the loop
            u = dirs.pick_rows(drawn, skip + jnp.arange(first, first + size))
        else:
            u = jax.tree.map(lambda x: cut(x, skip + first, size), drawn)
        return (*step.diff.responses(params, u, step.centre, first), u)

    return Acquirer(acquire)


class Expansion(NamedTuple):
    """One step's accept-or-expand problem: what :func:`loop_init`, :func:`loop_step`
    and the other strategies read (``k_start`` and ``k_cap`` may be traced)."""

    acquirer: Acquirer
    test: Callable[[Candidate], tuple[ArrayLike, ArrayLike]]  # (score, passed)
    like: chex.ArrayTree  # the params, for the shape of the running sum
    grid: Grid
    k_start: jax.Array | int  # the first grid point at which the test is consulted
    k_cap: jax.Array | None = None  # a grid point the step must stop at (a query limit)
    second_moment: bool = False  # also accumulate sum ||r_i u_i||^2


def empty(ex: Expansion) -> Candidate:
    """The candidate before any direction is bought."""
    slots = ex.grid.k_max  # fresh records of one step: every K grid ends exactly at k_max
    return Candidate(
        k=jnp.zeros((), jnp.int32),
        total=dirs.zeros(ex.like),
        sq_norm=jnp.zeros((), jnp.float32),
        value_sum=jnp.zeros((), jnp.float32),
        n_ok=jnp.zeros((), jnp.int32),
        responses=jnp.zeros((slots,), jnp.float32),
        ok=jnp.zeros((slots,), bool),
        score=jnp.zeros((), jnp.float32),
        accepted=jnp.zeros((), bool),
    )


def _sq_norms(directions: chex.ArrayTree, size: int) -> jax.Array | int:
    """``||u_i||^2`` of a batch of ``size`` directions (float32)."""
    return sum(jnp.sum(jnp.square(u).reshape(size, -1), axis=1).astype(jnp.float32)
               for u in jax.tree.leaves(directions))


def absorb(ex: Expansion, cand: Candidate, first: jax.Array | int, size: int,
           before_loop: bool = False) -> Candidate:
    """``cand`` with the fresh records ``first .. first+size-1`` added (``before_loop``:
    the chunks :func:`loop_init` buys before the loop, see :func:`fresh_acquirer`).

    Directions drawn where they are used come in chunks of at most
    :func:`directions.batch_size`: the same numbers and records, added one chunk after
    the other (a large vectorised draw and its ``2 * size`` perturbed points cost more per
    number than chunks that stay in cache). Precomputed ones are sliced from one batch.
    """
    chunk = size if ex.acquirer.precomputed else dirs.batch_size(ex.like)
    if size > chunk:
        cand = jax.lax.fori_loop(
            0, size // chunk, lambda j, c: _absorb_chunk(ex, c, first + j * chunk, chunk), cand)
        first, size = first + size // chunk * chunk, size % chunk
        if not size:
            return cand
    return _absorb_chunk(ex, cand, first, size, before_loop)


def _absorb_chunk(ex: Expansion, cand: Candidate, first: jax.Array | int, size: int,
                  before_loop: bool = False) -> Candidate:
    responses, values, directions = ex.acquirer.acquire(first, size, before_loop)
    ok = jnp.isfinite(responses)
    coeffs = jnp.where(ok, responses, 0.0)
    total = jax.tree.map(jnp.add, cand.total, dirs.weighted_sum(coeffs, directions))
    sq_norm = cand.sq_norm
    if ex.second_moment:
        sq_norm = sq_norm + jnp.sum(jnp.square(coeffs) * _sq_norms(directions, size))
    return cand._replace(
        k=jnp.asarray(first + size, jnp.int32),
        total=total,
        sq_norm=sq_norm,
        value_sum=cand.value_sum + jnp.sum(jnp.where(ok, values, 0.0)),
        n_ok=cand.n_ok + jnp.sum(ok, dtype=jnp.int32),
        responses=_update_slice(cand.responses, responses, first),
        ok=_update_slice(cand.ok, ok, first),
    )


def decide(ex: Expansion, cand: Candidate) -> Candidate:
    """``cand`` tested: its score, and whether the step stops there (the test passed
    from ``k_start`` on, or the grid, or the query limit, is spent)."""
    score, passed = ex.test(cand)
    if ex.k_cap is None:
        accepted = (cand.k >= ex.k_start) & (passed | (cand.k >= ex.grid.k_max))
    else:
        accepted = ((cand.k >= jnp.minimum(ex.k_start, ex.k_cap))
                    & (passed | (cand.k >= ex.k_cap)))
    return cand._replace(score=jnp.asarray(score, jnp.float32), accepted=accepted)


def chunk_sizes(grid: Grid) -> list[int]:
    """The sizes of a step's acquisitions when it buys the whole grid: ``k_min``, then
    ``k_step`` each, the last one cut at ``k_max``."""
    k_min, k_max, k_step = grid
    remainder = (k_max - k_min) % k_step
    return [k_min] + [k_step] * ((k_max - k_min) // k_step) + ([remainder] if remainder else [])


def loop_init(ex: Expansion) -> Candidate:
    """The while loop's first carry: ``k_min`` directions bought and tested; or nothing
    bought when every chunk has the same size (``k_step == k_min < k_max``), so the first
    chunk is an ordinary iteration and the objective is traced (and compiled) once."""
    k_min, k_max, k_step = ex.grid
    if k_step == k_min and k_max > k_min:
        return empty(ex)
    return decide(ex, absorb(ex, empty(ex), 0, k_min, before_loop=True))


def loop_step(ex: Expansion, cand: Candidate) -> Candidate:
    """One retry: the next ``k_step`` directions (exactly those up to ``k_max`` when
    ``k_step`` does not divide the grid: a ``lax.cond`` between the two sizes), tested."""
    k_min, k_max, k_step = ex.grid
    remainder = (k_max - k_min) % k_step
    if not remainder:
        return decide(ex, absorb(ex, cand, cand.k, k_step))
    return decide(ex, jax.lax.cond(
        k_max - cand.k >= k_step,
        lambda c: absorb(ex, c, c.k, k_step),
        lambda c: absorb(ex, c, c.k, remainder),
        cand,
    ))


def loop_cond(cand: Candidate) -> jax.Array:
    """Whether the loop goes on: the candidate is not accepted."""
    return ~cand.accepted


def expand_loop(ex: Expansion) -> Candidate:
    """The ``"loop"`` strategy: :func:`loop_init`, then :func:`loop_step` while
    :func:`loop_cond`, in one ``lax.while_loop``; nothing beyond the budget bought is
    evaluated."""
    cand = loop_init(ex)
    if ex.grid.k_max == ex.grid.k_min:
        return cand
    return jax.lax.while_loop(loop_cond, functools.partial(loop_step, ex), cand)


def expand_unrolled(ex: Expansion) -> Candidate:
    """The ``"unrolled"`` strategy over precomputed responses: every candidate of the grid
    built with the loop's chunks and additions and tested, the first accepted one kept. No
    ``while_loop``, so no lane waits for another under ``vmap``."""
    cands, first = [], 0
    cand = empty(ex)
    for size in chunk_sizes(ex.grid):
        cand = decide(ex, absorb(ex, cand, first, size))
        cands.append(cand)
        first += size
    chosen = cands[-1]  # accepted: it is at k_max
    for cand in reversed(cands[:-1]):  # the first accepted candidate wins
        chosen = jax.tree.map(lambda a, b, ok=cand.accepted: jnp.where(ok, a, b),
                              cand, chosen)
    return chosen


def expand_vectorized(ex: Expansion) -> Candidate:
    """The ``"vectorized"`` strategy over precomputed responses: every candidate of the
    grid at once from prefix sums (cumulative sums: the additions' order, hence rounding,
    may differ from the loop's), one batched test, the first accepted candidate."""
    slots = ex.grid.k_max
    sizes = chunk_sizes(ex.grid)
    responses, values, directions = ex.acquirer.acquire(0, slots, False)
    ok = jnp.isfinite(responses)
    coeffs = jnp.where(ok, responses, 0.0)
    ends = jnp.cumsum(jnp.asarray(sizes, jnp.int32))  # the grid points
    pick = ends - 1

    def prefix(x):
        return jnp.cumsum(x, axis=0)[pick]

    totals = jax.tree.map(
        lambda u: prefix(coeffs.astype(u.dtype).reshape((slots,) + (1,) * (u.ndim - 1)) * u),
        directions)
    sq = jnp.zeros((slots,), jnp.float32)
    if ex.second_moment:
        sq = jnp.square(coeffs) * _sq_norms(directions, slots)
    points = Candidate(
        k=ends, total=totals, sq_norm=prefix(sq),
        value_sum=prefix(jnp.where(ok, values, 0.0)),
        n_ok=prefix(ok.astype(jnp.int32)),
        responses=jnp.zeros((len(sizes), slots), jnp.float32),
        ok=jnp.zeros((len(sizes), slots), bool),
        score=jnp.zeros((len(sizes),), jnp.float32),
        accepted=jnp.zeros((len(sizes),), bool))
    decided = jax.vmap(functools.partial(decide, ex))(points)
    index = jnp.argmax(decided.accepted.at[-1].set(True))
    chosen = jax.tree.map(lambda x: x[index], decided)
    bought = jnp.arange(slots) < chosen.k
    return chosen._replace(responses=jnp.where(bought, responses, 0.0), ok=bought & ok)


STRATEGIES: dict[str, Callable[[Expansion], Candidate]] = {
    "loop": expand_loop, "unrolled": expand_unrolled, "vectorized": expand_vectorized}
"""The expansion strategies by name (see :data:`EVALUATIONS`)."""


def strategy(evaluation: str, precomputed: bool, grid: Grid) -> str:
    """The strategy a step runs: ``evaluation`` where the responses are precomputed (the
    unrolled form only up to ``_UNROLL_LIMIT`` grid points), else ``"loop"``."""
    if not precomputed or (evaluation == "unrolled"
                           and len(chunk_sizes(grid)) > _UNROLL_LIMIT):
        return "loop"
    return evaluation


def accept_or_expand(ex: Expansion, evaluation: str = "loop") -> Candidate:
    """Acquires fresh directions chunk by chunk until ``ex.test`` accepts.

    The first acquisition buys ``k_min`` directions, every later one ``k_step``; the test
    is consulted from ``k_start`` on (``min(k_start, k_cap)`` under a query limit), and
    the candidate at ``k_max`` (or ``k_cap``) is accepted whatever its score.

    Args:
      ex: the step's :class:`Expansion`.
      evaluation: one of :data:`EVALUATIONS` (static); the strategy is
        :func:`strategy` of it and ``ex.acquirer.precomputed``.

    Returns:
      The accepted :class:`Candidate`.
    """
    return STRATEGIES[strategy(evaluation, ex.acquirer.precomputed, ex.grid)](ex)


def grid_cap(grid: Grid, affordable: jax.Array) -> jax.Array:
    """The largest grid point ``<= affordable`` (``k_min`` when none is: the caller then
    skips the step)."""
    k_min, k_max, k_step = grid
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
