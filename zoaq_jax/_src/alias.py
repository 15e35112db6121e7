"""Complete optimizers: an estimator, a backbone and a learning rate in one chain.

Each alias returns ``zoaq_jax.chain(estimator, backbone, optax.scale_by_learning_rate(lr))``
(an :class:`Estimator`: :func:`optax.chain` of the three, which refuses to be placed after
another transformation), so ``optax.tree.get(state, ...)`` reaches the estimator's
diagnostics and any member can be swapped by building the chain by hand.
``learning_rate`` must be a finite number > 0 (a Python number or an array of shape
``()``) or an Optax schedule. Parameter leaves are floating-point arrays or Python
floats; PRNG key leaves are carried (their update is ``None``; see ``docs/design/dtypes.md``).
"""

from __future__ import annotations

from typing import TypeAlias

import jax
import optax

from zoaq_jax._src import budgets, checks, gates, retained
from zoaq_jax._src import retention as retentions
from zoaq_jax._src.auto_k import auto_k_estimator
from zoaq_jax._src.chain import chain
from zoaq_jax._src.fixed import fixed_estimator
from zoaq_jax._src.hizoo import hizoo_estimator
from zoaq_jax._src.policies import KeyLike
from zoaq_jax._src.radazo import scale_by_radazo
from zoaq_jax._src.statzo import statzo_estimator
from zoaq_jax._src.zo_adamm import scale_by_zo_adamm
from zoaq_jax._src.zoaq import zoaq_estimator
from zoaq_jax._src.zoar import zoar_estimator

BACKBONES = ("radazo", "zo_adamm", "sgd")

# A step size: a number, an array of shape (), or an Optax schedule (step count -> number).
ScalarOrSchedule: TypeAlias = optax.ScalarOrSchedule


def backbone_transform(name: str, b1: float, b2: float, eps: float
                       ) -> optax.GradientTransformation:
    """The backbone called ``name``: ``"radazo"``, ``"zo_adamm"`` or ``"sgd"`` (identity)."""
    checks.choice("backbone", name, BACKBONES)
    if name == "radazo":
        return scale_by_radazo(b1=b1, b2=b2, eps=eps)
    if name == "zo_adamm":
        return scale_by_zo_adamm(b1=b1, b2=b2, eps=eps)
    checks.decay("b1", b1)  # unused by "sgd", but never accepted as NaN or inf
    checks.decay("b2", b2)
    checks.finite("eps", eps)
    return optax.identity()


def _chain(estimator: optax.GradientTransformationExtraArgs,
           backbone: optax.GradientTransformation,
           learning_rate: ScalarOrSchedule) -> optax.GradientTransformationExtraArgs:
    checks.learning_rate(learning_rate)
    return chain(estimator, backbone, optax.scale_by_learning_rate(learning_rate))


def zoaq(
    learning_rate: ScalarOrSchedule,
    *,
    k_min: int = 1,
    k_max: int = 10,
    n_hist: int = 8,
    mu: float = 5e-3,
    tau0: float = 1.0,
    beta_tau: float = 0.9,
    b1: float = 0.9,
    b2: float = 0.99,
    eps: float = 1e-8,
    refresh: int = retained.REFRESH,
    key: KeyLike = 0,
) -> optax.GradientTransformationExtraArgs:
    r"""ZoAQ on the R-AdaZO backbone, the paper's optimizer with its flat settings.

    .. math:: x_{t+1} = x_t - \eta\, \mathrm{RAdaZO}(g_t), \quad g_t = \text{ZoAQ candidate}

    Builds the paper's policies once, :func:`gates.momentum` (``tau0``, ``beta_tau``,
    ``b1``) and :func:`retention.fifo` (``n_hist``, ``refresh``), for
    :func:`zoaq_estimator`, and chains it with :func:`scale_by_radazo` (``b1``, ``b2``,
    ``eps``); ``b1`` is shared by the gate's EMA and the backbone's first moment, as in
    the paper. An ablation swaps one policy of the estimator in one line, e.g.
    ``zoaq_jax.chain(zoaq_jax.zoaq_estimator(budget=zoaq_jax.budgets.reset("half")),
    zoaq_jax.scale_by_radazo(), optax.scale_by_learning_rate(1e-2))``; ``k_step``,
    ``difference``, ``directions``, ``evaluation`` and another backbone are chosen there
    too.

    Args:
      learning_rate: step size :math:`\eta` or an Optax schedule.
      k_min, k_max, mu, key: see :func:`zoaq_estimator`.
      n_hist, refresh: see :func:`retention.fifo`.
      tau0, beta_tau, b1: see :func:`gates.momentum`.
      b2, eps: see :func:`scale_by_radazo`.

    Returns:
      An :class:`optax.GradientTransformationExtraArgs`.

    Example:
      >>> import jax, jax.numpy as jnp, optax, zoaq_jax
      >>> f = lambda x: 0.5 * jnp.sum(x ** 2)
      >>> opt = zoaq_jax.zoaq(learning_rate=1e-2, key=0)
      >>> @jax.jit
      ... def step(params, state):
      ...     updates, state = opt.update(None, state, params, value_fn=f)
      ...     return optax.apply_updates(params, updates), state
      >>> params = jnp.ones(10)
      >>> state = opt.init(params)
      >>> for _ in range(200):
      ...     params, state = step(params, state)
      >>> bool(f(params) < 0.5 * f(jnp.ones(10)))
      True

    References:
      ZoAQ: Adaptive Zeroth-Order Querying via Query-Reuse Coupling.
    """
    estimator = zoaq_estimator(
        k_min, k_max, mu=mu, gate=gates.momentum(tau0=tau0, beta_tau=beta_tau, b1=b1),
        retention=retentions.fifo(n_hist, refresh=refresh), key=key,
    )
    return _chain(estimator, scale_by_radazo(b1=b1, b2=b2, eps=eps), learning_rate)


def radazo(
    learning_rate: ScalarOrSchedule,
    *,
    k: int = 10,
    mu: float = 5e-3,
    b1: float = 0.9,
    b2: float = 0.99,
    eps: float = 1e-8,
    eps_in_sqrt: bool = False,
    difference: str = "central",
    directions: str = "gaussian",
    key: KeyLike = 0,
    mesh: jax.sharding.Mesh | None = None,
) -> optax.GradientTransformationExtraArgs:
    r"""R-AdaZO: a fixed ``k``-direction estimate on the refined adaptive backbone.

    .. math:: x_{t+1} = x_t - \eta\, m_t / (\sqrt{v_t} + \epsilon),
      \quad v_t = \beta_2 v_{t-1} + (1-\beta_2) m_t^2

    Args:
      learning_rate: step size or schedule.
      k: directions per step.
      mu, difference, directions, key, mesh: see :func:`fixed_estimator`.
      b1, b2, eps, eps_in_sqrt: see :func:`scale_by_radazo`.

    Returns:
      An :class:`optax.GradientTransformationExtraArgs`.

    Example:
      >>> import jax.numpy as jnp, zoaq_jax
      >>> opt = zoaq_jax.radazo(learning_rate=1e-3, k=10)
      >>> params, state, trace = zoaq_jax.run(opt, lambda x: x @ x, jnp.ones(4), 10)
      >>> int(trace.num_queries[-1])  # 10 steps x 10 directions x 2 calls
      200

    References:
      Shu et al., Refining Adaptive Zeroth-Order Optimization at Ease, ICML 2025.
    """
    return _chain(
        fixed_estimator(k=k, mu=mu, difference=difference, directions=directions, key=key,
                        mesh=mesh),
        scale_by_radazo(b1=b1, b2=b2, eps=eps, eps_in_sqrt=eps_in_sqrt),
        learning_rate,
    )


def zo_adamm(
    learning_rate: ScalarOrSchedule,
    *,
    k: int = 10,
    mu: float = 5e-3,
    b1: float = 0.9,
    b2: float = 0.99,
    eps: float = 1e-8,
    amsgrad: bool = False,
    difference: str = "central",
    directions: str = "gaussian",
    key: KeyLike = 0,
    mesh: jax.sharding.Mesh | None = None,
) -> optax.GradientTransformationExtraArgs:
    r"""ZO-AdaMM: a fixed ``k``-direction estimate on Adam-style moments.

    .. math:: x_{t+1} = x_t - \eta\, m_t / (\sqrt{v_t} + \epsilon),
      \quad v_t = \beta_2 v_{t-1} + (1-\beta_2) g_t^2

    Args:
      learning_rate: step size or schedule.
      k: directions per step.
      mu, difference, directions, key, mesh: see :func:`fixed_estimator`.
      b1, b2, eps, amsgrad: see :func:`scale_by_zo_adamm`.

    Returns:
      An :class:`optax.GradientTransformationExtraArgs`.

    Example:
      >>> import jax.numpy as jnp, zoaq_jax
      >>> opt = zoaq_jax.zo_adamm(learning_rate=1e-3, k=2, difference="forward")
      >>> _, _, trace = zoaq_jax.run(opt, lambda x: x @ x, jnp.ones(4), 10)
      >>> int(trace.num_queries[-1])  # 10 steps x (1 centre + 2 directions)
      30

    References:
      Chen et al., ZO-AdaMM, NeurIPS 2019.
    """
    return _chain(
        fixed_estimator(k=k, mu=mu, difference=difference, directions=directions, key=key,
                        mesh=mesh),
        scale_by_zo_adamm(b1=b1, b2=b2, eps=eps, amsgrad=amsgrad),
        learning_rate,
    )


def zo_sgd(
    learning_rate: ScalarOrSchedule,
    *,
    k: int = 1,
    mu: float = 5e-3,
    difference: str = "central",
    directions: str = "gaussian",
    key: KeyLike = 0,
    mesh: jax.sharding.Mesh | None = None,
) -> optax.GradientTransformationExtraArgs:
    r"""ZO-SGD: :math:`x_{t+1} = x_t - \eta g_t` with a fixed ``k``-direction estimate.

    Args:
      learning_rate: step size or schedule.
      k, mu, difference, directions, key, mesh: see :func:`fixed_estimator`.

    Returns:
      An :class:`optax.GradientTransformationExtraArgs`.

    Example:
      >>> import jax.numpy as jnp, zoaq_jax
      >>> opt = zoaq_jax.zo_sgd(learning_rate=0.05, k=4)
      >>> params, _, trace = zoaq_jax.run(opt, lambda x: x @ x, jnp.ones(4), 100)
      >>> bool(trace.value[-1] < 0.1 * trace.value[0])
      True

    References:
      Ghadimi and Lan, Stochastic first- and zeroth-order methods for nonconvex
      stochastic programming, 2013.
    """
    return _chain(
        fixed_estimator(k=k, mu=mu, difference=difference, directions=directions, key=key,
                        mesh=mesh),
        optax.identity(),
        learning_rate,
    )


def mezo(
    learning_rate: ScalarOrSchedule,
    *,
    k: int = 1,
    mu: float = 1e-3,
    weight_decay: float = 0.0,
    directions: str = "gaussian",
    key: KeyLike = 0,
    mesh: jax.sharding.Mesh | None = None,
) -> optax.GradientTransformationExtraArgs:
    r"""MeZO: ZO-SGD with central Gaussian differences and decoupled weight decay.

    .. math:: x_{t+1} = x_t - \eta \Big(\frac1k \sum_i p_i z_i + \lambda x_t\Big),
      \quad p_i = \frac{f(x + \mu z_i) - f(x - \mu z_i)}{2\mu}

    Directions are regenerated from per-step keys (MeZO's seed trick); in JAX the
    perturbed parameters are materialised per evaluation rather than edited in place.

    Args:
      learning_rate: step size or schedule.
      k: directions per step (``2k`` forward passes).
      mu: perturbation scale.
      weight_decay: :math:`\lambda \ge 0`.
      directions: MeZO's Gaussian :math:`z_i` by default; any family of
        :func:`fixed_estimator` (e.g. ``"sparse:0.1"`` for random sparse masks).
      key: integer seed or typed key; the default 0 is the same in every lane of a
        ``vmap`` (see the ``seed`` of :func:`zoaq_jax.run`).
      mesh: split each step's directions over this mesh's devices (see
        :func:`fixed_estimator`).

    Returns:
      An :class:`optax.GradientTransformationExtraArgs`.

    Example:
      >>> import jax.numpy as jnp, zoaq_jax
      >>> opt = zoaq_jax.mezo(learning_rate=1e-2, k=4)
      >>> _, _, trace = zoaq_jax.run(opt, lambda x: x @ x, jnp.ones(4), 5)
      >>> int(trace.num_queries[-1])  # 5 steps x 4 directions x 2 forward passes
      40

    References:
      Malladi et al., Fine-Tuning Language Models with Just Forward Passes, NeurIPS 2023.
    """
    checks.non_negative("weight_decay", weight_decay)
    return _chain(
        fixed_estimator(k=k, mu=mu, difference="central", directions=directions, key=key,
                        mesh=mesh),
        optax.add_decayed_weights(weight_decay),
        learning_rate,
    )


def hizoo(
    learning_rate: ScalarOrSchedule,
    *,
    k: int = 1,
    mu: float = 1e-3,
    alpha: float = 1e-8,
    hessian_estimate: str = "paper",
    weight_decay: float = 0.0,
    key: KeyLike = 0,
) -> optax.GradientTransformationExtraArgs:
    r"""HiZOO: MeZO's step preconditioned by a diagonal Hessian learned from one more call.

    .. math:: x_{t+1} = x_t - \eta \Big(\frac1k \sum_i r_i\, h_{t+1}^{-1/2} \odot u_i
      + \lambda x_t\Big), \quad
      r_i = \frac{f(x + \mu h_t^{-1/2} \odot u_i) - f(x - \mu h_t^{-1/2} \odot u_i)}{2\mu}

    with :math:`h` the moving average of the diagonal Hessian estimate of
    :func:`hizoo_estimator` (smooth scale ``alpha``), and decoupled weight decay as in
    :func:`mezo` (the public code's form). ``alpha=0`` is :func:`mezo` bit for bit, at
    one more call a step.

    Args:
      learning_rate: step size :math:`\eta` or an Optax schedule.
      k, mu, alpha, hessian_estimate, key: see :func:`hizoo_estimator`.
      weight_decay: :math:`\lambda \ge 0`.

    Returns:
      An :class:`optax.GradientTransformationExtraArgs`.

    Example:
      >>> import jax.numpy as jnp, zoaq_jax
      >>> opt = zoaq_jax.hizoo(learning_rate=1e-2, alpha=1e-2)
      >>> _, state, trace = zoaq_jax.run(opt, lambda x: x @ x, jnp.ones(4), 5)
      >>> int(trace.num_queries[-1])  # 5 steps x (1 centre + 2 forward passes)
      15

    References:
      Zhao et al., Second-Order Fine-Tuning without Pain for LLMs: A Hessian Informed
      Zeroth-Order Optimizer, ICLR 2025, arXiv:2402.15173.
    """
    checks.non_negative("weight_decay", weight_decay)
    return _chain(
        hizoo_estimator(k, mu=mu, alpha=alpha, hessian_estimate=hessian_estimate, key=key),
        optax.add_decayed_weights(weight_decay),
        learning_rate,
    )


def zoar(
    learning_rate: ScalarOrSchedule,
    *,
    k: int = 1,
    n_hist: int = 8,
    mu: float = 5e-3,
    difference: str = "forward",
    directions: str = "gaussian",
    b1: float = 0.9,
    b2: float = 0.99,
    eps: float = 1e-8,
    backbone: str = "radazo",
    refresh: int = retained.REFRESH,
    key: KeyLike = 0,
) -> optax.GradientTransformationExtraArgs:
    r"""ZoAR's history-reuse estimator on a backbone (R-AdaZO by default, as in the paper).

    .. math:: x_{t+1} = x_t - \eta\, \mathrm{backbone}(g_t), \quad g_t = \text{ZoAR estimate}

    Args:
      learning_rate: step size or schedule.
      k, n_hist, mu, difference, directions, refresh, key: see :func:`zoar_estimator`.
      b1, b2, eps: backbone moments.
      backbone: ``"radazo"``, ``"zo_adamm"`` or ``"sgd"``.

    Returns:
      An :class:`optax.GradientTransformationExtraArgs`.

    Example:
      >>> import jax.numpy as jnp, zoaq_jax
      >>> opt = zoaq_jax.zoar(learning_rate=1e-3, k=2, n_hist=8)
      >>> _, _, trace = zoaq_jax.run(opt, lambda x: x @ x, jnp.ones(4), 10)
      >>> int(trace.num_queries[-1])  # forward form: k calls a step
      20

    References:
      Qiu et al., Zeroth-Order Optimization is Secretly Single-Step Policy Optimization,
      2025.
    """
    estimator = zoar_estimator(k=k, n_hist=n_hist, mu=mu, difference=difference,
                               directions=directions, refresh=refresh, key=key)
    return _chain(estimator, backbone_transform(backbone, b1, b2, eps), learning_rate)


def statzo(
    learning_rate: ScalarOrSchedule,
    *,
    k_min: int = 1,
    k_max: int = 10,
    theta: float = 0.5,
    mu: float = 5e-3,
    directions: str = "gaussian",
    difference: str = "forward",
    b1: float = 0.9,
    b2: float = 0.99,
    eps: float = 1e-8,
    backbone: str = "radazo",
    key: KeyLike = 0,
) -> optax.GradientTransformationExtraArgs:
    r"""StatZO: norm-test adaptive sampling on a backbone (stabilized: R-AdaZO default).

    .. math:: x_{t+1} = x_t - \eta\, \mathrm{backbone}(g_t), \quad
      g_t = \frac1{K_t} \sum_{i \le K_t} r_i u_i, \ K_t \text{ the first that passes the norm test}

    Args:
      learning_rate: step size or schedule.
      k_min, k_max, theta, mu, directions, difference, key: see
        :func:`statzo_estimator` (which also takes ``k_step`` and ``evaluation``).
      b1, b2, eps: backbone moments.
      backbone: ``"radazo"`` (the paper's stabilized StatZO), ``"zo_adamm"`` (the
        original configuration) or ``"sgd"``.

    Returns:
      An :class:`optax.GradientTransformationExtraArgs`.

    Example:
      >>> import jax.numpy as jnp, zoaq_jax
      >>> opt = zoaq_jax.statzo(learning_rate=1e-3, k_min=2, k_max=2)
      >>> _, _, trace = zoaq_jax.run(opt, lambda x: x @ x, jnp.ones(4), 10)
      >>> int(trace.num_queries[-1])  # 10 steps x (1 centre + 2 directions)
      30

    References:
      Bollapragada, Karamanli and Wild, Derivative-free optimization via adaptive
      sampling strategies, 2024.
    """
    estimator = statzo_estimator(k_min, k_max, theta=theta, mu=mu, directions=directions,
                                 difference=difference, key=key)
    return _chain(estimator, backbone_transform(backbone, b1, b2, eps), learning_rate)


def auto_k(
    learning_rate: ScalarOrSchedule,
    *,
    k_min: int = 1,
    k_max: int = 16,
    mu: float = 5e-3,
    window: int = 8,
    floor: float = 0.0,
    difference: str = "central",
    directions: str = "gaussian",
    b1: float = 0.9,
    b2: float = 0.99,
    eps: float = 1e-8,
    key: KeyLike = 0,
) -> optax.GradientTransformationExtraArgs:
    r"""A tuning-free query budget on the R-AdaZO backbone (as :func:`zoaq`).

    .. math:: x_{t+1} = x_t - \eta\, \mathrm{backbone}(g_t), \quad
      g_t = \frac1{K_t} \sum_{i \le K_t} r_i u_i, \ K_t \text{ from the progress rule}

    Args:
      learning_rate: step size or schedule.
      k_min, k_max, mu, difference, directions, key: see :func:`auto_k_estimator`.
      window, floor: the settings of its rule :func:`budgets.progress` that a user may
        want to set (the others, and another backbone, through
        ``auto_k_estimator(budget=budgets.progress(...))`` in a chain).
      b1, b2, eps: see :func:`scale_by_radazo`.

    Returns:
      An :class:`optax.GradientTransformationExtraArgs`.

    Example:
      >>> import jax.numpy as jnp, zoaq_jax
      >>> c = jnp.logspace(0, 2, 50)  # curvatures from 1 to 100
      >>> f = lambda x: jnp.sum(c * x**2)
      >>> opt = zoaq_jax.auto_k(learning_rate=0.1, k_max=8)
      >>> _, _, trace = zoaq_jax.run(opt, f, jnp.ones(50), 400, log_every=100)
      >>> [int(k) for k in trace.last_k]  # one direction is too noisy at this rate: K grows
      [0, 8, 8, 8, 8]

    References:
      Byrd, Chin, Nocedal and Wu, Sample size selection in optimization methods for
      machine learning, Math. Program. 2012.
    """
    estimator = auto_k_estimator(
        k_min, k_max, mu=mu, budget=budgets.progress(window=window, floor=floor),
        difference=difference, directions=directions, key=key,
    )
    return _chain(estimator, scale_by_radazo(b1=b1, b2=b2, eps=eps), learning_rate)
