"""Directions across devices: a step's ``K`` directions split over a mesh by ``shard_map``.

With ``mesh=`` (a :class:`jax.sharding.Mesh` of :math:`n` devices, ``K`` divisible by
:math:`n`), device :math:`j` handles the direction indices
:math:`jK/n, \\dots, (j+1)K/n - 1` of the step. It regenerates those directions from the
replicated step key with the single-device key schedule (direction :math:`i` from
``fold_in(step_key, i)``), evaluates the objective at its perturbed points (the params
are replicated; an objective that takes ``noise_key`` gets the keys of the calls'
global indices, :class:`oracle.CallKeys`, as on one device) and keeps its :math:`K/n`
scalar responses. Only keys, scalars and at most
one all-reduce cross between devices. The estimate
:math:`\\sum_i r_i u_i` is formed in one of two ways (``combine``):

* ``"psum"`` (default): each device sums :math:`r_i u_i` over its own directions and one
  ``lax.psum`` adds the :math:`n` partial sums (one all-reduce of a params-shaped tree).
  No device draws more than :math:`K/n` directions; the additions' order differs from
  one device's, so the estimate equals the single-device one to float32 rounding
  (below ``1e-6`` relative in the tests), bit for bit on a one-device mesh.
* ``"gather"``: every device draws all :math:`K` directions once, evaluates its own
  :math:`K/n` of them (a slice of the batch: the same numbers), and the :math:`K`
  responses (and the devices' sums of their free values of :math:`f(x)`) are
  all-gathered, :math:`K + n` scalars, to form the sum as one device does: :math:`K`
  draws per device, no params-shaped tree crosses devices. The additions are the
  single-device ones, but XLA may fuse them differently in the two programs, so the
  estimate too equals the single-device one to float32 rounding.

Each device buys its :math:`K/n` directions as one device buys a fixed budget
(:func:`expansion.accept_or_expand`): where they would exceed the batch limit
(:func:`directions.fits_in_batch`, 128 Ki numbers) they are drawn where they are used,
in chunks of at most :func:`directions.batch_size` directions, so a device's memory is
bounded at any :math:`d`. Above the limit ``"gather"`` cannot keep all :math:`K`
directions: it draws its own in chunks for the responses and regenerates all :math:`K`
one at a time for the sum (:math:`K/n + K` draws per device).

``"psum"`` is the default: on fake CPU devices it was the cheaper of the two at every
size measured (``docs/results/devices.md``).
``"gather"`` saves one collective a step (the
all-reduce), which can pay on accelerators for small :math:`d`, where drawing
directions is cheap and a step is bound by collective latency (not measured here).

Query counts are exact: :math:`K` is static, each direction is evaluated by exactly one
device, and the gathered responses give the ledger the same counts as one device
(forward differences query the centre value once, outside the split, and every device
receives it).

Supported: the fixed-budget estimators (``k_min == k_max``, no retained records, the
loop evaluation): :func:`zoaq_jax.fixed_estimator` and the aliases built on it
(``radazo``, ``zo_adamm``, ``zo_sgd``, ``mezo``). Adaptive budgets buy their directions
in chunks inside a ``while_loop`` whose length depends on a test, and retained records
regenerate directions of earlier steps; splitting those is not implemented, and
:func:`check` refuses them at construction.
"""

from __future__ import annotations

from collections.abc import Callable
import chex
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec
from jax.typing import ArrayLike

from zoaq_jax._src import checks, expansion, ledger
from zoaq_jax._src import directions as dirs
from zoaq_jax._src.policies import Grid, Params, Updates

COMBINES = ("psum", "gather")


def check(mesh: jax.sharding.Mesh | None, combine: str, *, grid: Grid, n_hist: int,
          evaluation: str, second_moment: bool) -> None:
    """Raises a clear error (at construction) for a ``mesh`` the estimator cannot split on.

    Args:
      mesh: ``None`` (one device, nothing to check) or a :class:`jax.sharding.Mesh`.
      combine: one of :data:`COMBINES`.
      grid, n_hist, evaluation: the estimator's settings.
      second_moment: whether the gate's test needs ``sum ||r_i u_i||^2``.

    Raises:
      TypeError: ``mesh`` is not a :class:`jax.sharding.Mesh`.
      ValueError: an unknown ``combine``; an adaptive budget, retained records, a
        non-loop evaluation or a variance test with a mesh; ``K`` not divisible by the
        mesh's device count.
    """
    checks.choice("combine", combine, COMBINES)
    if mesh is None:
        return
    if not isinstance(mesh, jax.sharding.Mesh):
        raise TypeError(f"mesh must be a jax.sharding.Mesh (e.g. jax.make_mesh((n,), "
                        f"('directions',))) or None, got {type(mesh).__name__}.")
    k_min, k_max, _ = grid
    unsupported = [text for text, bad in [
        (f"k_min={k_min} != k_max={k_max}", k_min != k_max), (f"n_hist={n_hist}", n_hist),
        (f"evaluation={evaluation!r}", evaluation != "loop"),
        ("a gate with second_moment=True", second_moment)] if bad]
    if unsupported:
        raise ValueError(
            "mesh: directions are split over devices for fixed-budget estimators only "
            "(k_min == k_max, n_hist=0, evaluation='loop', a gate without second "
            "moments: fixed_estimator, radazo, zo_adamm, zo_sgd, mezo); got "
            + ", ".join(unsupported) + ".")
    if k_max % mesh.size:
        raise ValueError(
            f"mesh: k={k_max} directions cannot be split evenly over the mesh's "
            f"{mesh.size} devices; choose k a multiple of {mesh.size} or a smaller mesh.")


def split_records(
    mesh: jax.sharding.Mesh, combine: str, step: expansion.StepOracle, params: Params,
    key: jax.Array, kind: dirs.Family, k: int,
) -> tuple[jax.Array, jax.Array, Updates]:
    """The responses, their summed free values and ``sum_i r_i u_i`` of a step's ``k``
    directions.

    Each device buys its ``k / n`` directions as one device buys a fixed budget
    (:func:`expansion.accept_or_expand`): drawn where they are used, in chunks of at most
    :func:`directions.batch_size` directions, so memory stays bounded at large ``d``.
    ``"gather"`` draws all ``k`` directions once when they fit one batch
    (:func:`directions.fits_in_batch`) and evaluates its slice of them; above it, it
    draws its own in chunks and then regenerates all ``k`` one at a time for the sum.

    Args:
      mesh: the devices the directions are split over (all of its axes).
      combine: ``"psum"`` or ``"gather"``.
      step: the step's objective (:class:`expansion.StepOracle`).
      params: the current point (replicated on every device).
      key: the step key; direction ``i`` comes from ``ledger.direction_keys(key, i, 1)``.
      kind: the family of directions.
      k: directions of the step, divisible by ``mesh.size``.

    Returns:
      ``(responses [k], value_sum, total)``, replicated: ``value_sum`` adds the finite
      records' free estimates of ``f(x)``, ``total`` sums ``r_i u_i`` over the finite
      responses in the compute dtypes (``None`` on carried leaves).
    """
    axes = tuple(mesh.axis_names)
    per_device = k // mesh.size

    def local(params, key, centre, calls):
        first = jax.lax.axis_index(axes) * per_device
        drawn = None
        if combine == "gather" and dirs.fits_in_batch(k, params):
            drawn = dirs.sample_many(kind, ledger.direction_keys(key, 0, k), params)
        diff = step.diff if calls is None else step.diff._replace(
            keys=step.diff.keys._replace(root=calls[0], first=calls[1]))
        acquirer = expansion.fresh_acquirer(step._replace(diff=diff, centre=centre), params,
                                            key, kind, drawn)
        own = expansion.accept_or_expand(expansion.Expansion(
            acquirer._replace(acquire=lambda i, size, before_loop: acquirer.acquire(
                first + i, size, before_loop)),
            lambda cand: (0.0, True), params, Grid(per_device, per_device, per_device),
            k_start=per_device))
        r_all = jax.lax.all_gather(own.responses, axes, tiled=True)
        value_sum = jnp.sum(jax.lax.all_gather(own.value_sum, axes))  # n partial sums
        if combine == "psum":
            return r_all, value_sum, jax.lax.psum(own.total, axes)
        coeffs = jnp.where(jnp.isfinite(r_all), r_all, 0.0)
        if drawn is not None:
            return r_all, value_sum, dirs.weighted_sum(coeffs, drawn)
        (total,) = dirs.regenerate_sums(
            kind, lambda i, size: ledger.direction_keys(key, i, size), (coeffs,), params,
            jnp.asarray(k, jnp.int32))
        return r_all, value_sum, total

    # The outputs are replicated (all-gathered, psum-med, or formed from those and the
    # replicated inputs), which JAX does not infer through all_gather: check_vma=False.
    replicated = PartitionSpec()
    keys = step.diff.keys  # the objective's call keys (global direction indices), if any
    calls = None if keys is None else (keys.root, keys.first)
    return jax.shard_map(local, mesh=mesh, in_specs=replicated, out_specs=replicated,
                         check_vma=False)(params, key, step.centre, calls)


def candidate(
    mesh: jax.sharding.Mesh, combine: str, step: expansion.StepOracle, params: Params,
    key: jax.Array, kind: dirs.Family, k: int,
    test: Callable[[expansion.Candidate], tuple[ArrayLike, ArrayLike]],
) -> expansion.Candidate:
    """The accepted :class:`expansion.Candidate` of a fixed budget of ``k`` directions
    split over ``mesh``: the one :func:`expansion.accept_or_expand` returns for
    ``k_min = k_max = k`` (same fields, same additions to its zero start), scored by
    ``test``."""
    r, value_sum, total = split_records(mesh, combine, step, params, key, kind, k)
    ok = jnp.isfinite(r)
    zero = jnp.zeros((), jnp.float32)
    cand = expansion.Candidate(
        k=jnp.asarray(k, jnp.int32),
        total=jax.tree.map(jnp.add, dirs.zeros(params), total),
        sq_norm=zero,
        value_sum=zero + value_sum,
        n_ok=jnp.zeros((), jnp.int32) + jnp.sum(ok, dtype=jnp.int32),
        responses=r, ok=ok, score=zero, accepted=jnp.ones((), bool))
    return cand._replace(score=jnp.asarray(test(cand)[0], jnp.float32))


def replicate(tree: chex.ArrayTree, mesh: jax.sharding.Mesh) -> chex.ArrayTree:
    """``tree`` placed on every device of ``mesh``, each leaf replicated.

    .. math:: x \\mapsto (x, x, \\dots, x) \\text{ on the } n \\text{ devices}

    Place the params and the optimizer state of an estimator built with ``mesh=`` once,
    before the first step: its outputs are then placed alike and a jitted step compiles
    once (an unplaced first input compiles a second program). The spec names every
    axis (``P(None, ...)``), the form in which JAX returns replicated outputs on meshes
    with explicit axes.

    Args:
      tree: a PyTree of arrays (params, an optimizer state).
      mesh: the estimator's mesh.

    Returns:
      The tree, every leaf a replicated global array on ``mesh``.

    Example:
      >>> import jax, jax.numpy as jnp, zoaq_jax
      >>> mesh = jax.make_mesh((1,), ("directions",))
      >>> x = zoaq_jax.replicate({"w": jnp.ones(3)}, mesh)
      >>> x["w"].sharding.spec
      P(None,)

    References:
      JAX, Distributed arrays and automatic parallelization.
    """
    def put(x):
        return jax.device_put(x, jax.sharding.NamedSharding(
            mesh, PartitionSpec(*(None,) * jnp.ndim(x))))

    return jax.tree.map(put, tree)
