"""The attack methods: estimator + consistency monitor + backbone + learning rate.

A method is named by a spec of the shared registry (:mod:`benchmarks.methods`): ``base``
or ``base:key=value,key=value`` (for example ``zoaq:n_hist=4`` or ``statzo:k_max=6``);
the keys override the base's defaults below (:data:`REGISTRY`), which follow the attack
settings of the ZoAQ paper (ZoAQ: Adaptive Zeroth-Order Querying via Query-Reuse
Coupling, Section 5.2), themselves those of the ZoAR code (Qiu et al., Zeroth-Order
Optimization is Secretly Single-Step Policy Optimization, 2025). All methods use forward
differences (the caller's centre value plus ``K`` perturbed calls a step), Gaussian
directions, and the R-AdaZO backbone unless said otherwise; ``lr``, ``mu`` and the moments
are per dataset (:data:`HYPER`).

* ``zoaq``: ZoAQ, :math:`K_t \\in [1, 2]`, :math:`N_{hist} = 8`, :math:`\\tau_0 = 1`,
  :math:`\\beta_\\tau = 0.9`, reset ``min``; ``controller=always_accept`` and
  ``controller=fresh_on_expand`` are the paper's AlwaysMomentum and AlwaysGradient
  ablations.
* ``radazo``: R-AdaZO (Shu et al., Refining Adaptive Zeroth-Order Optimization at Ease,
  2025), fixed :math:`K = 2`.
* ``zo_adamm``: ZO-AdaMM (Chen et al., ZO-AdaMM: Zeroth-Order Adaptive Momentum Method
  for Black-Box Optimization, 2019; Adam-style second moment of the estimate), fixed
  :math:`K = 2`.
* ``statzo``: StatZO with the classical norm test (``theta``) of Bollapragada et al.
  (Adaptive Sampling Strategies for Stochastic Optimization, 2018), :math:`K_t \\in [2, K_{max}]`,
  on the R-AdaZO backbone (the paper's "stabilized" StatZO); ``backbone=zo_adamm`` gives
  the original configuration.
* ``statzo_norm``: the rule the paper writes for its stabilized StatZO,
  :math:`\\|g_t - m_{t-1}\\| / \\|m_{t-1}\\| \\le c_{norm} = 0.5` on fresh directions only,
  :math:`K_t \\in [1, 2]` (``zoaq_estimator(gate=gates.momentum_norm(0.5), n_hist=0)``).
* ``zoar``: ZoAR's averaged-baseline history reuse (Qiu et al. 2025), :math:`K = 1`
  (``zoar:k=2`` for 2), :math:`N_{hist} = 8` steps.
* ``auto_k``: :func:`zoaq_jax.auto_k_estimator` with the library's defaults
  (:math:`K_t \\in [1, 16]`, progress windows of 1,000 steps); its progress signal is
  the caller's centre value. Nothing in it is tuned for the attack.

The ``anytime`` comparison (:data:`COMPARISONS`) runs the adaptive methods (:data:`ADAPTIVE`)
against fixed budgets :math:`K \\in \\{1, 2, 4\\}` of R-AdaZO, ZO-AdaMM and ZoAR
(:data:`FIXED_K`, for example ``radazo:k=4``) on the same attacks.

The ``grid`` comparison adds issue 32's reference and baselines: R-AdaZO's (learning
rate, K) grid (:data:`GRID`: the dataset's lr times :data:`benchmarks.methods.LR_SCALES`,
K in :data:`GRID_KS`) and the methods run without tuning (:data:`BASELINES`: a cosine
decay over :data:`TOLD_BUDGET` calls, Prodigy/DoG/DoWG after the R-AdaZO estimator,
reduce-on-plateau, ``tuning_free`` and ``tuning_free:budget``), scored by
:func:`benchmarks.attack.results.anytime_regret`.

Every chain has :func:`zoaq_jax.monitor_consistency` right after the estimator, so the
momentum-consistency trace (the paper's attack cosine figure) exists for all methods.
"""

from __future__ import annotations

from typing import Any

import optax

from benchmarks.methods import (BASELINES, COMPLETE, LR_SCALES, Complete, Hyper,
                                Method, Registry, complete)

HYPER = {"mnist": Hyper(lr=0.01, mu=0.5, b1=0.9, b2=0.99, eps=1e-8),
         "cifar10": Hyper(lr=1e-4, mu=0.005, b1=0.9, b2=0.99, eps=1e-8)}

# Forward differences everywhere (StatZO's estimator has only those).
REGISTRY = Registry({
    "zoaq": {"k_min": 1, "k_max": 2, "n_hist": 8, "tau0": 1.0, "beta_tau": 0.9,
             "reset": "min", "controller": "adaptive", "difference": "forward"},
    "radazo": {"k": 2, "difference": "forward"}, "zo_adamm": {"k": 2, "difference": "forward"},
    "statzo": {"k_min": 2, "k_max": 2, "theta": 0.5},
    "statzo_norm": {"k_min": 1, "k_max": 2, "c_norm": 0.5, "difference": "forward"},
    "zoar": {"k": 1, "n_hist": 8, "difference": "forward"},
    # The library's own defaults (never tuned for the attack).
    "auto_k": {"difference": "forward"}},
    names={"n_hist": "N_hist={}", "controller": "{}", "lr_scale": "lr x{:g}",
           "schedule": "{} lr"})  # ZoAQ K∈[1,2], N_hist=4; R-AdaZO K=4, lr x2

# Shared across the paper protocol's tables, the extended protocol, and the sweeps.
PAPER_METHODS = ("radazo", "statzo", "zoar", "zoar:k=2", "zoaq")
ALL_METHODS = ("radazo", "zo_adamm", "statzo", "statzo_norm", "zoar", "zoar:k=2", "zoaq", "auto_k")
SWEEPS = {
    "nhist": tuple(f"zoaq:n_hist={n}" if n != 8 else "zoaq" for n in (4, 6, 8, 10, 12)),
    "kmax": tuple(f"statzo:k_max={k}" if k != 2 else "statzo" for k in (2, 4, 6, 8, 10))}


def parse(spec: str) -> Method | Complete:
    """The method of ``spec``: a complete optimizer of the library
    (:data:`benchmarks.methods.COMPLETE`, e.g. ``tuning_free``) or a chain of the registry
    (:meth:`benchmarks.methods.Registry.parse`).

    Raises:
      ValueError: unknown base or key, or a malformed spec.
    """
    return complete(spec) or REGISTRY.parse(spec)


def base_of(method: Method | Complete) -> str:
    """The record's ``base``: the registry base, or a complete optimizer's spec."""
    return method.spec if isinstance(method, Complete) else method.base


def label(method: Method | Complete | str) -> str:
    """The label of a method, complete optimizer or spec (:attr:`Method.label`:
    ``ZoAQ K∈[1,2], N_hist=4``, ``R-AdaZO K=4, lr x2``)."""
    return (parse(method) if isinstance(method, str) else method).label


# The anytime comparison: the adaptive budgets against fixed K in {1, 2, 4} of each
# fixed-budget family (canonical specs: "radazo" is R-AdaZO K=2, "zoar" ZoAR K=1).
ADAPTIVE = ("zoaq", "statzo", "auto_k")
FAMILIES = ("radazo", "zo_adamm", "zoar")
FIXED_K = tuple(parse(f"{base}:k={k}").spec for base in FAMILIES for k in (1, 2, 4))
# Issue 32's reference: the (learning rate, K) grid of R-AdaZO (the dataset's lr times
# LR_SCALES, times K in GRID_KS; its x1 points at K <= 4 are FIXED_K's), and the baselines
# run without tuning: K = 1 with a cosine decay over the told budget, Optax's
# parameter-free optimizers after the R-AdaZO estimator, reduce-on-plateau on the free
# value estimate, and the library's tuning_free (both forms).
GRID_KS = (1, 2, 4, 8, 16)
GRID = tuple(dict.fromkeys(parse(f"radazo:k={k},lr_scale={s}").spec
                           for s in LR_SCALES for k in GRID_KS))
BASELINES = tuple(s for s in BASELINES if s not in ADAPTIVE) + tuple(COMPLETE)
TOLD_BUDGET = 10_000  # queries: the budget a method told the budget is given (its cap)
COMPARISONS = {"anytime": ADAPTIVE + FIXED_K,
               "grid": BASELINES + tuple(s for s in GRID if s not in FIXED_K)}
SCORED = ADAPTIVE + BASELINES  # the methods scored against the fixed K and the grid


def build(method: Method | Complete, dataset: str,
          key: Any) -> optax.GradientTransformationExtraArgs:
    """The optimizer of ``method`` for ``dataset`` (:data:`HYPER`), seeded by ``key``; a
    method told the budget is told :data:`TOLD_BUDGET` queries."""
    return method.build(HYPER[dataset], key, budget=TOLD_BUDGET)
