"""The fixed-budget K-direction estimator (inside R-AdaZO, ZO-AdaMM, ZO-SGD and MeZO)."""

from __future__ import annotations

import jax
import optax

from zoaq_jax._src import budgets, checks, gates, oracle
from zoaq_jax._src.controller import adaptive_estimator
from zoaq_jax._src.policies import Grid, KeyLike


def fixed_estimator(
    k: int = 1,
    *,
    mu: float = 5e-3,
    difference: str = "central",
    directions: str = "gaussian",
    key: KeyLike = 0,
    mesh: jax.sharding.Mesh | None = None,
    combine: str = "psum",
    common_random_numbers: bool = oracle.COMMON_RANDOM_NUMBERS,
) -> optax.GradientTransformationExtraArgs:
    r"""Averages ``k`` fresh random-direction finite differences at the current point.

    .. math::

      g_t = \frac{s}{n} \sum_{i=1}^{k} r_\mu(x_t, u_{t,i})\, u_{t,i},

    with central responses :math:`r = (f(x + \mu u) - f(x - \mu u)) / (2\mu)` (2 calls a
    direction) or forward ones :math:`r = (f(x + \mu u) - f(x)) / \mu` (1 call a direction
    plus one centre value a step), :math:`n` the number of finite responses and
    :math:`s` = :math:`d` for sphere directions, else 1. Non-finite responses are discarded
    (counted in ``num_nonfinite``); a step without any finite response returns zeros.

    **Objectives with their own randomness** (every estimator and optimizer): a
    ``value_fn`` with a parameter named ``noise_key`` (:data:`zoaq_jax.NOISE_KEY`) gets a
    fresh typed PRNG key at every oracle call, ``value_fn(x, noise_key=k, **data)``,
    filled by the estimator (a data keyword ``noise_key`` is refused): the key of the
    call with index :math:`n`, the estimator's count of calls before it, is
    ``fold_in(fold_in(key, 2**32 - 1), n)`` (a threefry key), so it is counted with its
    call, reproducible from the state (a resumed run continues the stream), equal under
    ``vmap`` to the seed's own run, and the same however a step's directions are
    chunked or split over devices. With ``common_random_numbers=True`` (the default) the
    two points of a central pair share their first call's key, and where the step
    queries a centre value (forward differences, HiZOO), which is in all of its
    differences, every call shares the centre's key: for noise the key reproduces, a
    difference sees the change of the objective, not of the noise (the tutorial
    measures it). Pass ``False`` where the noise stands for a source you could not
    repeat (a physical measurement, COCO's noisy suite). ``host_oracle`` passes the key
    on as its uint32 data (:func:`zoaq_jax.numpy_generator`); ``zoaq_jax.run``'s logging
    evaluations get keys of their own. A ``value_fn`` without ``noise_key`` is called
    exactly as before.

    Args:
      k: directions per step.
      mu: smoothing radius :math:`\mu > 0`.
      difference: ``"central"`` or ``"forward"``.
      directions: the family of directions: ``"gaussian"``, ``"sphere"``, ``"rademacher"``,
        ``"sparse:P"`` (mask density P) or ``"lowrank:R"`` (rank R on matrix leaves);
        math and references in :mod:`zoaq_jax._src.directions`.
      key: integer seed or typed key; the default 0 is the same in every lane of a
        ``vmap`` (see the ``seed`` of :func:`zoaq_jax.run`).
      mesh: a :class:`jax.sharding.Mesh` whose devices share each step's ``k``
        directions (``k`` divisible by its size): each device evaluates its own ``k / n``
        (:mod:`zoaq_jax._src.sharded`); None (default): one device.
      combine: with ``mesh``: ``"psum"`` (default: one all-reduce of the devices'
        partial sums) or ``"gather"`` (every device draws all ``k`` directions and
        evaluates its ``k / n``, and the ``k`` responses are all-gathered to form the
        sum: one collective fewer, ``k - k / n`` more draws per device); the estimate
        equals one device's to float32 rounding (bit for bit on a one-device mesh with
        ``"psum"``).
      common_random_numbers: for a ``value_fn`` that takes ``noise_key``, whether the
        calls of one difference share a key (above); a static bool.

    Returns:
      An :class:`optax.GradientTransformationExtraArgs`; its ``update(updates, state,
      params, *, value_fn, value=None, **fn_kwargs)`` ignores ``updates`` and returns the
      estimate (:func:`adaptive_estimator` with one budget, ``k``, and no test). ``value`` (optional) is ``f(params)`` already computed by the caller;
      forward differences then reuse it and do not count it.

    Example:
      >>> import jax.numpy as jnp, optax, zoaq_jax
      >>> est = zoaq_jax.fixed_estimator(k=4, mu=1e-3, key=0)
      >>> params = jnp.ones(3)
      >>> g, state = est.update(None, est.init(params), params, value_fn=lambda x: x @ x)
      >>> int(optax.tree.get(state, "num_queries"))
      8

    References:
      Nesterov and Spokoiny, Random gradient-free minimization of convex functions, 2017.
    """
    k = checks.static_int("k", k, 1)
    return adaptive_estimator(
        gates.accept(), budgets.constant(k), grid=Grid(k, k), mu=mu, difference=difference,
        directions=directions, key=key, mesh=mesh, combine=combine,
        common_random_numbers=common_random_numbers,
    )
