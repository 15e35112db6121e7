"""The policy types of :func:`adaptive_estimator` and their one calling convention.

A policy is a NamedTuple of pure functions over its own PyTree state:

* ``init(params, grid) -> state``;
* decision functions ``(state, ...) -> decision``, called during a step;
* ``update(state, outcome) -> state``, called once after the step with the one
  :class:`Outcome` record that every policy of the step receives.

Three kinds plug into the skeleton: a :class:`Gate` (is a candidate good enough?), a
:class:`BudgetRule` (where does a step stop expanding without a test?) and a
:class:`Retention` policy (which records outlive their step and enter later estimates?).
Factories live in :mod:`zoaq_jax.gates`, :mod:`zoaq_jax.budgets` and
:mod:`zoaq_jax.retention`; a new policy is a new factory there (or in user code).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, TypeAlias

import chex
import jax
import optax
from jax.typing import ArrayLike

from zoaq_jax._src import checks, retained

Params: TypeAlias = optax.Params  # the PyTree an estimator optimizes
Updates: TypeAlias = optax.Updates  # an estimate shaped like the params
PolicyState: TypeAlias = chex.ArrayTree  # a policy's own PyTree state
GateContext: TypeAlias = chex.ArrayTree  # what Gate.prepare computes once a step
ValueFn: TypeAlias = Callable[..., jax.Array]  # value_fn(params, **data) -> a scalar
KeyLike: TypeAlias = int | jax.Array  # an integer seed or a typed PRNG key


class Grid(NamedTuple):
    """The static budget grid :math:`\\{K_{\\min}, K_{\\min} + \\Delta K, \\dots, K_{\\max}\\}`
    of a step (Python integers; :func:`adaptive_estimator` validates it once)."""

    k_min: int
    k_max: int
    k_step: int = 1


def valid_grid(grid: Grid) -> Grid:
    """``grid`` checked (:func:`checks.budget_grid`: static integers, ``1 <= k_min <=
    k_max``), with a ``k_step`` beyond ``k_max - k_min`` cut to it."""
    if not isinstance(grid, Grid):
        raise TypeError(f"grid must be a zoaq_jax.Grid(k_min, k_max, k_step), got "
                        f"{type(grid).__name__}.")
    return Grid(*checks.budget_grid(*grid))


class Evidence(NamedTuple):
    """What a gate sees of a candidate: the pooled records, before averaging."""

    total: Updates  # sum of r_i u_i over the candidate's records (retained and fresh)
    n: jax.Array  # int32, records in ``total``
    n_fresh: jax.Array  # int32, finite fresh records
    sq_norm: jax.Array  # float32, sum of ||r_i u_i||^2 over fresh records (second_moment)
    scale: float  # estimator scale: d for sphere directions, 1 for Gaussian


class Records(NamedTuple):
    """A step's fresh records, as a retention policy needs them."""

    responses: jax.Array  # [k_max] float32 raw fresh responses (0 where not bought)
    ok: jax.Array  # [k_max] bool, bought and finite
    total: Updates  # sum of r_i u_i over the finite fresh records
    source: retained.Source  # where the step's directions come from (and those drawn)


class Outcome(NamedTuple):
    """What a finished step tells each of its policies (the one record of ``update``).

    Only ``k`` and ``usable`` are always needed; a policy reads the fields it uses.
    """

    k: jax.Array  # int32, fresh directions bought
    usable: jax.Array  # bool, the estimate had a finite fresh response
    value: jax.Array  # float32, the step's own estimate of f(x_t) (NaN without one)
    score: jax.Array  # float32, the gate's score of the accepted candidate
    estimate: Updates | None = None  # g_t in the compute dtypes (zeros if unusable)
    context: GateContext = None  # the gate's context of the step (Gate.prepare)
    records: Records | None = None  # the step's fresh records
    grid: Grid | None = None  # the step's budget grid


class Gate(NamedTuple):
    """A candidate test with its own state.

    * ``init(params, grid) -> state``;
    * ``prepare(state) -> context``: computed once a step, before the expansion loop;
    * ``test(context, evidence) -> (score, passed)``: called after every chunk;
    * ``update(state, outcome) -> state``: after the step (``outcome.context`` is the
      step's context).
    """

    init: Callable[[Params, Grid], PolicyState]
    prepare: Callable[[PolicyState], GateContext]
    test: Callable[[GateContext, Evidence], tuple[ArrayLike, ArrayLike]]  # (score, passed)
    update: Callable[[PolicyState, Outcome], PolicyState]
    second_moment: bool = False  # the test needs Evidence.sq_norm


class BudgetRule(NamedTuple):
    """Where a step's expansion starts, with its own state.

    * ``init(params, grid) -> state``;
    * ``start(state) -> k``: the budget bought before the gate is consulted;
    * ``update(state, outcome) -> state``: after the step.
    """

    init: Callable[[Params, Grid], PolicyState]
    start: Callable[[PolicyState], jax.Array]
    update: Callable[[PolicyState, Outcome], PolicyState]


class Retention(NamedTuple):
    """Which records outlive their step, with their own state.

    * ``init(params, grid) -> state``;
    * ``oldest(state, size) -> (steps, index)``: the records a step may evict first
      (their directions are drawn in one batch with the step's fresh ones);
    * ``pooled(state, k, k_start) -> (total, n)``: the retained records' part of the
      candidate with ``k`` fresh directions (a step that starts at ``k_start``);
    * ``update(state, outcome) -> state``: keep the step's records (``outcome.records``).

    ``capacity`` (static) is the number of records kept; 0: none, and the skeleton never
    calls ``oldest`` or ``pooled``.
    """

    init: Callable[[Params, Grid], PolicyState]
    oldest: Callable[[PolicyState, int], tuple[jax.Array, jax.Array]]
    pooled: Callable[[PolicyState, jax.Array, jax.Array], tuple[Updates, jax.Array]]
    update: Callable[[PolicyState, Outcome], PolicyState]
    capacity: int = 0


def check_policies(gate: object, budget: object, retention: object) -> None:
    """Raises a ``TypeError`` naming the argument that is not a policy value (a factory
    passed uncalled, a plain tuple)."""
    for name, value, kind, example in (
            ("gate", gate, Gate, "gates.momentum()"),
            ("budget", budget, BudgetRule, "budgets.reset()"),
            ("retention", retention, Retention, "retention.fifo()")):
        if not isinstance(value, kind):
            raise TypeError(f"{name} must be a zoaq_jax.{kind.__name__} (e.g. zoaq_jax."
                            f"{example}), got {type(value).__name__}.")
