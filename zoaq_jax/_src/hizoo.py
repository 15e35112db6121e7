"""HiZOO: zeroth-order estimates preconditioned by a diagonal Hessian (Zhao et al., 2025)."""

from __future__ import annotations

from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import optax

from zoaq_jax._src import checks, expansion, host, ledger, oracle
from zoaq_jax._src import directions as dirs
from zoaq_jax._src.chain import Estimator
from zoaq_jax._src.policies import KeyLike

HESSIAN_ESTIMATES = ("paper", "code")
"""The diagonal Hessian estimates :func:`hizoo_estimator` offers: the paper's (default)
and the public code's (``docs/design/paper_and_code.md``)."""

_GAUSSIAN = dirs.family("gaussian")  # the estimate's algebra needs E[u_j^4] = 3


class HiZOOState(NamedTuple):
    """State of :func:`hizoo_estimator`: its ledger and the diagonal Hessian estimate."""

    ledger: ledger.QueryLedger  # keys and counters (num_queries, value_estimate, ...)
    hessian: chex.ArrayTree  # diagonal Hessian estimate h = diag(Sigma^{-1}), 1 at init
    hessian_skips: jax.Array  # int32, steps whose Hessian update was discarded (<= step)


class _Sums(NamedTuple):
    """What a step's directions add up to (one chunk of directions after the other)."""

    total: chex.ArrayTree  # sum_i r_i u_i over the finite pairs
    curvature: chex.ArrayTree  # curvature_sum's S over the finite pairs and centre
    n_ok: jax.Array  # int32, directions with a finite pair
    n_curv: jax.Array  # int32, directions with a finite second difference
    zero: jax.Array  # int32, finite responses exactly 0 (mu below the float resolution)


def _chunk(k: int, like: Any) -> int:
    """The directions drawn and evaluated at once: the largest divisor of ``k`` that
    :func:`directions.batch_size` allows (every evaluation of a chunk is a counted call)."""
    limit = dirs.batch_size(like)
    return max(c for c in range(1, k + 1) if k % c == 0 and c <= limit)


def curvature_sum(delta: jax.Array, u: chex.ArrayTree, mu: float | jax.Array,
                  hessian_estimate: str = "paper") -> tuple[chex.ArrayTree, jax.Array]:
    r"""The sum over a batch of directions that :func:`hessian_update` turns into
    :math:`\hat H`, and how many directions entered it.

    .. math:: S = \sum_{i:\, \delta_i \text{ finite}} \frac{\delta_i}{2\mu^2}
      (u_i \odot u_i - 1) \quad\text{(paper)}, \qquad
      \sum_i \frac{|\delta_i|}{2\mu^2}\, u_i \odot u_i \quad\text{(code)},

    so that :math:`\hat H = h \odot S / n`; for Gaussian :math:`u` and a quadratic with
    Hessian :math:`H`, :math:`E[h \odot S / n] = \mathrm{diag}(H)` (paper).

    Args:
      delta: ``[n]`` second differences :math:`f(x + \mu s \odot u_i) + f(x - \mu s
        \odot u_i) - 2 f(x)`, :math:`s = h^{-1/2}` (non-finite ones are left out).
      u: ``n`` directions (a leading axis on every leaf; ``None`` on carried leaves).
      mu: the perturbation scale.
      hessian_estimate: ``"paper"`` or ``"code"``.

    Returns:
      ``(S, n)``: ``S`` shaped like one direction (compute dtypes), ``n`` int32.
    """
    ok = jnp.isfinite(delta)
    c = (delta if hessian_estimate == "paper" else jnp.abs(delta)) / (2 * jnp.square(mu))
    if hessian_estimate == "paper":
        shapes = jax.tree.map(lambda x: x * x - 1, u)
    else:
        shapes = jax.tree.map(lambda x: x * x, u)
    return (dirs.weighted_sum(jnp.where(ok, c, 0.0).astype(jnp.float32), shapes),
            jnp.sum(ok, dtype=jnp.int32))


def hessian_update(h: chex.ArrayTree, curvature: chex.ArrayTree, n: jax.Array,
                   alpha: float | jax.Array) -> tuple[chex.ArrayTree, jax.Array]:
    r"""The paper's moving average of the diagonal Hessian, kept finite and positive.

    .. math:: h_{t+1} = (1 - \alpha)\, h_t + \alpha\, |\hat H_t|, \qquad
      \hat H_t = h_t \odot S / n

    (:func:`curvature_sum`'s ``S`` and ``n``). Where the result is not finite and
    positive at every coordinate (an overflow, an underflow to 0) or ``n = 0``,
    :math:`h_t` is kept.

    Returns:
      ``(h_{t+1}, updated)``, ``updated`` a bool scalar.
    """
    weight = 1.0 / jnp.maximum(n, 1).astype(jnp.float32)
    candidate = jax.tree.map(
        lambda hi, si: (1 - alpha) * hi + alpha * jnp.abs(hi * si * weight.astype(si.dtype)),
        h, curvature)
    valid = [jnp.all(jnp.isfinite(x) & (x > 0)) for x in jax.tree.leaves(candidate)]
    updated = (n > 0) & jnp.all(jnp.stack(valid))
    return jax.tree.map(lambda a, b: jnp.where(updated, a, b), candidate, h), updated


def hizoo_estimator(
    k: int = 1,
    *,
    mu: float = 1e-3,
    alpha: float = 1e-8,
    hessian_estimate: str = "paper",
    key: KeyLike = 0,
) -> optax.GradientTransformationExtraArgs:
    r"""HiZOO's estimate: central pairs along :math:`\Sigma_t^{1/2} u`, with
    :math:`\Sigma_t^{-1}` a diagonal Hessian learned from one more call a step.

    With :math:`h_t = \mathrm{diag}(\Sigma_t^{-1})` (1 at the start), Gaussian
    :math:`u_i \sim \mathcal N(0, I)`, :math:`s_t = h_t^{-1/2}` and
    :math:`f_\pm^i = f(x \pm \mu\, s_t \odot u_i)`, :math:`f_0 = f(x)`:

    .. math::

      r_i = \frac{f_+^i - f_-^i}{2\mu}, \qquad
      \delta_i = f_+^i + f_-^i - 2 f_0, \qquad
      \hat H_t = \frac1n \sum_i \frac{\delta_i}{2\mu^2}\, h_t \odot (u_i \odot u_i - 1),

      h_{t+1} = (1 - \alpha)\, h_t + \alpha\, |\hat H_t|, \qquad
      g_t = \frac1n \sum_i r_i\, h_{t+1}^{-1/2} \odot u_i .

    :math:`\hat H_t` is the diagonal of the paper's estimate
    :math:`\frac{\delta}{2\mu^2} \Sigma_t^{-1/2} (u u^\top - I) \Sigma_t^{-1/2}`, unbiased
    for the diagonal Hessian on a quadratic (:math:`E[(u^\top A u)(u u^\top - I)] = 2A`
    for Gaussian :math:`u`); the absolute value keeps :math:`h` positive. The step uses
    the updated :math:`h_{t+1}`, as the paper's Algorithm 1 and the public code do, so
    :math:`E[g_t] \approx \Sigma_{t+1}^{1/2} \Sigma_t^{1/2} \nabla f`. With
    ``hessian_estimate="code"`` the estimate is the public code's,
    :math:`\frac1n \sum_i \frac{|\delta_i|}{2\mu^2} h_t \odot u_i \odot u_i` (no
    :math:`-1`: biased by :math:`\mathrm{tr}(\Sigma_t^{1/2} H \Sigma_t^{1/2}) h_t / 2`,
    the same factor at every coordinate). With :math:`\alpha = 0`, :math:`h` stays 1
    and :math:`g_t` is MeZO's estimate (:func:`fixed_estimator` with central
    differences), bit for bit, at one more call a step.

    Cost: :math:`2k + 1` calls a step (the centre :math:`f_0` included; :math:`2k` when
    the caller passes ``value=f(params)``), the paper's 3 for :math:`k = 1`; the state
    holds :math:`h` (one copy of the parameters) besides the ledger. Directions are drawn
    from the step's key (:func:`fixed_estimator`'s keys: direction ``i`` of step ``t`` is
    ``fold_in(fold_in(key, t), i)``) and never stored.

    Non-finite values never reach :math:`h`: a direction whose pair is not finite is
    discarded (``num_nonfinite``) from both sums, one whose second difference
    :math:`\delta_i` is not (a non-finite centre) from :math:`\hat H_t`; a step whose
    update of :math:`h` would not be finite and positive at every coordinate (an
    overflow, an underflow to 0, or no finite :math:`\delta_i`) keeps :math:`h_t` and is
    counted in ``hessian_skips``. A step without any finite pair returns zeros.

    Args:
      k: directions per step (the paper: 1).
      mu: perturbation scale :math:`\mu > 0` (the paper's and MeZO's 1e-3). In float32
        keep :math:`\mu \gtrsim 3 \cdot 10^{-4} \sqrt{|f|}`: below it the rounding of
        :math:`\delta` dominates :math:`\hat H` and :math:`h` grows without bound.
      alpha: smooth scale :math:`\alpha \in [0, 1)` of the Hessian's moving average;
        the default 1e-8 is the public code's documented setting for LLMs
        (``HESSIAN_SMOOTH_TYPE=constant1e-8``). The estimate's noise is of order
        :math:`d` times its mean at every coordinate, so a useful :math:`\alpha` falls
        with the dimension (of order :math:`1/d^2`); 1e-8 moves :math:`h` by about
        :math:`\alpha\, \mathrm{tr}(H) / 2` relative per step, nothing at
        :math:`d` = 100 (both derived in ``docs/design/hizoo.md``).
      hessian_estimate: ``"paper"`` (default) or ``"code"``, the public code's biased
        estimate (see above).
      key: integer seed or typed key; the default 0 is the same in every lane of a
        ``vmap`` (see the ``seed`` of :func:`zoaq_jax.run`).

    Returns:
      An :class:`optax.GradientTransformationExtraArgs` (see :func:`fixed_estimator`
      for the ``update`` signature); ``optax.tree.get(state, "hessian")`` is :math:`h`.

    Example:
      >>> import jax.numpy as jnp, optax, zoaq_jax
      >>> est = zoaq_jax.hizoo_estimator(k=2, alpha=0.1, key=0)
      >>> params = jnp.ones(4)
      >>> g, state = est.update(None, est.init(params), params, value_fn=lambda x: x @ x)
      >>> int(optax.tree.get(state, "num_queries"))  # 1 centre + 2 directions x 2
      5
      >>> bool(jnp.all(optax.tree.get(state, "hessian") > 0))
      True

    References:
      Zhao, Dang, Ye, Dai, Qian and Tsang, Second-Order Fine-Tuning without Pain for
      LLMs: A Hessian Informed Zeroth-Order Optimizer, ICLR 2025, arXiv:2402.15173.
      Ye, Huang, Fang, Li and Zhang, Hessian-Aware Zeroth-Order Optimization for
      Black-Box Adversarial Attack, arXiv:1812.11377, 2018 (the estimate).
    """
    k = checks.static_int("k", k, 1)
    checks.positive("mu", mu)
    checks.decay("alpha", alpha)
    checks.choice("hessian_estimate", hessian_estimate, HESSIAN_ESTIMATES)
    schedule = ledger.KeySchedule.of(key)

    def init_fn(params):
        return HiZOOState(
            ledger=schedule.init(params),
            hessian=jax.tree.map(lambda z: z + 1, dirs.zeros(params)),  # None on key leaves
            hessian_skips=jnp.zeros((), jnp.int32))

    def update_fn(updates, state, params, *, value_fn, value=None, **extra_args):
        del updates
        centre_calls = oracle.FiniteDifference(value_fn, mu, "forward").centre_calls(value)
        return ledger.skip_unaffordable(
            state, params, 2 * k + centre_calls,
            lambda: step_fn(state, params, value_fn, value, extra_args))

    def step_fn(state, params, value_fn, value, extra_args):
        fn = oracle.bind(value_fn, params, extra_args)
        # the centre f(x) through the library's centre helper (counted unless given)
        f0, centre_calls = oracle.FiniteDifference(fn, mu, "forward").centre(params, value)
        pair = oracle.FiniteDifference(fn, mu, "central")
        coarse = pair.coarse(params, _GAUSSIAN)
        scale = jax.tree.map(jax.lax.rsqrt, state.hessian)  # Sigma^{1/2} = h^{-1/2}
        step_key = schedule.step_key(state.ledger)
        chunk = _chunk(k, params)

        def add_chunk(first, sums):
            u = dirs.sample_many(_GAUSSIAN, ledger.direction_keys(step_key, first, chunk),
                                 params)
            scaled = jax.tree.map(lambda ui, si: ui * si, u, scale)
            both = jax.tree.map(lambda x: jnp.concatenate([x, -x]), scaled)
            plus, minus = jnp.split(pair.values(params, both), 2)  # objective's precision
            r = ((plus - minus) / (2 * mu)).astype(jnp.float32)
            ok = jnp.isfinite(r)
            delta = jnp.where(ok, plus + minus - 2 * f0, jnp.nan).astype(jnp.float32)
            curvature, n_curv = curvature_sum(delta, u, mu, hessian_estimate)
            return _Sums(
                total=jax.tree.map(jnp.add, sums.total,
                                   dirs.weighted_sum(jnp.where(ok, r, 0.0), u)),
                curvature=jax.tree.map(jnp.add, sums.curvature, curvature),
                n_ok=sums.n_ok + jnp.sum(ok, dtype=jnp.int32),
                n_curv=sums.n_curv + n_curv,
                zero=sums.zero + jnp.sum(ok & (r == 0) & coarse, dtype=jnp.int32))

        nothing = jnp.zeros((), jnp.int32)
        sums = _Sums(dirs.zeros(params), dirs.zeros(params), nothing, nothing, nothing)
        if chunk == k:
            sums = add_chunk(0, sums)
        else:  # directions beyond one batch: drawn and evaluated a chunk at a time
            sums = jax.lax.fori_loop(0, k // chunk, lambda j, s: add_chunk(j * chunk, s),
                                     sums)

        new_h, updated = hessian_update(state.hessian, sums.curvature, sums.n_curv, alpha)
        g, _ = expansion.finish(sums.total, sums.n_ok, 1.0, sums.n_ok)
        g = jax.tree.map(lambda gi, hi: gi * jax.lax.rsqrt(hi), g, new_h)
        new_ledger = ledger.advance(
            state.ledger, k=k, calls=2 * k + centre_calls, nonfinite=k - sums.n_ok,
            zero=sums.zero, value=f0)
        new_state = HiZOOState(
            ledger=new_ledger, hessian=new_h,
            hessian_skips=state.hessian_skips + (~updated).astype(jnp.int32))
        return dirs.cast_like(g, params), new_state

    return Estimator(init_fn, host.host_errors()(update_fn))
