"""One registry of every public optimizer and estimator, for the property matrix.

Each :class:`Entry` names a factory and small settings; ``tests/library/test_properties.py``
runs every property over every entry. A new optimizer joins the matrix by adding one
entry here: give its factory, settings that keep a step cheap (d = 8, few directions),
the structural arguments that ``optax.inject_hyperparams`` must keep static, and
whether it returns estimates (``estimator=True``: the test loops step with ``-0.05 g``)
or finished updates.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, NamedTuple

import optax

import zoaq_jax
from zoaq_jax.retention import fifo

SIZES = ("k", "k_min", "k_max", "k_step", "n_hist")


class Entry(NamedTuple):
    factory: Callable[..., Any]
    kwargs: dict
    estimator: bool = False  # returns gradient estimates, not updates to apply

    def make(self, **overrides):
        """The transformation with ``overrides`` on top of the entry's settings."""
        return self.factory(**{**self.kwargs, **overrides})

    @property
    def static_args(self) -> tuple[str, ...]:
        """Arguments that fix array shapes (static under ``inject_hyperparams``)."""
        accepted = inspect.signature(self.factory).parameters
        return tuple(name for name in SIZES if name in accepted)


def zoaq_estimator_with_monitor(k_max, n_hist, mu=5e-3, b1=0.9, key=0):
    """ZoAQ's estimator followed by the consistency monitor (whose EMA must not clash)."""
    estimator = zoaq_jax.zoaq_estimator(k_max=k_max, gate=zoaq_jax.gates.momentum(b1=b1),
                                        retention=fifo(n_hist), mu=mu, key=key)
    return optax.chain(estimator, zoaq_jax.monitor_consistency(b1=b1))


BACKBONES = {"radazo": zoaq_jax.scale_by_radazo, "zo_adamm": zoaq_jax.scale_by_zo_adamm}


def zoaq_chain(learning_rate, k_max, n_hist, k_step=1, mu=5e-3, gate=None, budget=None,
               difference="central", directions="gaussian", backbone="radazo", key=0):
    """``zoaq_jax.zoaq`` with the estimator's own options: a policy, ``k_step``,
    ``difference``, ``directions`` and another backbone."""
    estimator = zoaq_jax.zoaq_estimator(
        k_max=k_max, k_step=k_step, mu=mu, gate=gate, budget=budget, retention=fifo(n_hist),
        difference=difference, directions=directions, key=key)
    return zoaq_jax.chain(estimator, BACKBONES[backbone](),
                          optax.scale_by_learning_rate(learning_rate))


def statzo_chain(learning_rate, k_max, k_step, mu=5e-3, key=0):
    """``zoaq_jax.statzo`` with the estimator's ``k_step``."""
    return zoaq_jax.chain(zoaq_jax.statzo_estimator(k_max=k_max, k_step=k_step, mu=mu, key=key),
                          zoaq_jax.scale_by_radazo(), optax.scale_by_learning_rate(learning_rate))


def auto_k_estimator_window(k_max, window, mu=5e-3, difference="central", key=0):
    """``auto_k_estimator`` with the rule's ``window``."""
    return zoaq_jax.auto_k_estimator(k_max=k_max, mu=mu, difference=difference, key=key,
                                     budget=zoaq_jax.budgets.progress(window=window))


def auto_k_chain(learning_rate, k_max, window, difference, backbone, mu=5e-3, key=0):
    """``zoaq_jax.auto_k`` on another backbone."""
    return zoaq_jax.chain(auto_k_estimator_window(k_max, window, mu, difference, key),
                          BACKBONES[backbone](), optax.scale_by_learning_rate(learning_rate))


def fixed_on_backbones(learning_rate, k, mu=5e-3, b1=0.9, b2=0.99, eps=1e-8, key=0):
    """A hand-built ``zoaq_jax.chain``: fixed estimator, R-AdaZO (eps in the root), monitor,
    step."""
    return zoaq_jax.chain(
        zoaq_jax.fixed_estimator(k=k, mu=mu, difference="forward", directions="sphere", key=key),
        zoaq_jax.scale_by_radazo(b1=b1, b2=b2, eps=eps, eps_in_sqrt=True),
        zoaq_jax.monitor_consistency(b1=b1),
        optax.scale_by_learning_rate(learning_rate),
    )


def user_budget_rule(k_max, mu=5e-3, key=0):
    """The skeleton with a user's rule (K = k_max every third step, else 1) and ZoAQ's gate."""
    import jax.numpy as jnp

    rule = zoaq_jax.BudgetRule(init=lambda params, grid: jnp.int32(0),
                               start=lambda t: jnp.where(t % 3 == 0, k_max, 1),
                               update=lambda t, outcome: t + 1)
    return zoaq_jax.adaptive_estimator(zoaq_jax.gates.momentum(), rule, fifo(2),
                                       grid=zoaq_jax.Grid(1, k_max), mu=mu, key=key)


REGISTRY = {
    # ZoAQ and its variants (a non-dividing grid: k_step=2 does not divide 6 - 1).
    "zoaq": Entry(zoaq_jax.zoaq, dict(learning_rate=1e-2, k_max=4, n_hist=3)),
    "zoaq_half_nondividing": Entry(
        zoaq_chain, dict(learning_rate=1e-2, k_max=6, k_step=2, n_hist=3,
                         budget=zoaq_jax.budgets.reset("half"))),
    "zoaq_norm_forward": Entry(
        zoaq_chain,
        dict(learning_rate=1e-2, k_max=4, n_hist=3, gate=zoaq_jax.gates.momentum_norm(),
             difference="forward")),
    "zoaq_sphere_nohist_zo_adamm": Entry(
        zoaq_chain, dict(learning_rate=1e-2, k_max=4, n_hist=0, directions="sphere",
                         backbone="zo_adamm")),
    "zoaq_estimator_monitor": Entry(zoaq_estimator_with_monitor, dict(k_max=4, n_hist=3),
                                    estimator=True),
    # Fixed-budget methods.
    "radazo": Entry(zoaq_jax.radazo, dict(learning_rate=1e-2, k=2)),
    "zo_adamm_amsgrad": Entry(zoaq_jax.zo_adamm, dict(learning_rate=1e-2, k=2, amsgrad=True)),
    "zo_sgd": Entry(zoaq_jax.zo_sgd, dict(learning_rate=1e-2, k=2)),
    "mezo": Entry(zoaq_jax.mezo, dict(learning_rate=1e-2, k=2, weight_decay=1e-3)),
    "fixed_estimator": Entry(zoaq_jax.fixed_estimator, dict(k=2), estimator=True),
    "fixed_forward_sphere_radazo_monitor": Entry(fixed_on_backbones,
                                                 dict(learning_rate=1e-2, k=2)),
    # ZoAR.
    "zoar": Entry(zoaq_jax.zoar, dict(learning_rate=1e-2, k=2, n_hist=2)),
    "zoar_central_sgd": Entry(
        zoaq_jax.zoar, dict(learning_rate=1e-2, k=2, n_hist=2, difference="central",
                            backbone="sgd")),
    "zoar_estimator": Entry(zoaq_jax.zoar_estimator, dict(k=2, n_hist=2), estimator=True),
    # StatZO (a non-dividing grid: k_step=3 does not divide 6 - 1).
    "statzo_nondividing": Entry(statzo_chain, dict(learning_rate=1e-2, k_max=6, k_step=3)),
    "statzo_estimator_central": Entry(
        zoaq_jax.statzo_estimator, dict(k_min=2, k_max=4, difference="central"),
        estimator=True),
    # auto_k (a short window, so that the budget moves within the tests' few steps).
    "auto_k": Entry(zoaq_jax.auto_k, dict(learning_rate=1e-2, k_max=4, window=2)),
    "auto_k_forward_zo_adamm": Entry(
        auto_k_chain, dict(learning_rate=1e-2, k_max=4, window=2, difference="forward",
                           backbone="zo_adamm")),
    "auto_k_estimator": Entry(auto_k_estimator_window, dict(k_max=4, window=2),
                              estimator=True),
    # HiZOO (a large smooth scale, so that the Hessian moves within the tests' few steps).
    "hizoo": Entry(zoaq_jax.hizoo, dict(learning_rate=1e-2, k=2, alpha=0.1, weight_decay=1e-3)),
    "hizoo_estimator_code": Entry(zoaq_jax.hizoo_estimator,
                                  dict(k=2, alpha=0.1, hessian_estimate="code"), estimator=True),
    # The skeleton itself with a user's budget rule.
    "adaptive_estimator_user_rule": Entry(user_budget_rule, dict(k_max=3), estimator=True),
}
