"""The compared methods with the paper's synthetic settings (Appendix, Tables 5-6).

Every method is ``optax.chain(estimator, monitor_consistency, backbone, lr)``: the
monitor records the momentum-consistency score ``cos(g_t, m_{t-1})`` of any estimator
(the paper's cosine diagnostic), and leaves the updates unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import optax

import zoaq_jax


@dataclass(frozen=True)
class Settings:
    """Hyperparameters shared by all methods (paper Table "Common hyperparameters")."""

    lr: float = 1e-3
    mu: float = 5e-3
    b1: float = 0.9
    b2: float = 0.99
    eps: float = 1e-8


@dataclass(frozen=True)
class Method:
    name: str
    label: str
    build: Callable[..., optax.GradientTransformationExtraArgs]
    fixed_k: int | None = None  # the fixed budget, for fixed-budget methods
    backbone: str = "radazo"  # the second-moment backbone the estimate feeds


def _chain(estimator, backbone, s: Settings):
    return optax.chain(estimator, zoaq_jax.monitor_consistency(s.b1), backbone,
                       optax.scale_by_learning_rate(s.lr))


def _backbone(name: str, s: Settings):
    if name == "radazo":
        return zoaq_jax.scale_by_radazo(b1=s.b1, b2=s.b2, eps=s.eps)
    return zoaq_jax.scale_by_zo_adamm(b1=s.b1, b2=s.b2, eps=s.eps)


def _zoaq(backbone: str):
    def build(s: Settings, key, **kw):
        kw = {"k_min": 1, "k_max": 10, "n_hist": 8, **kw}
        est = zoaq_jax.zoaq_estimator(mu=s.mu, b1=s.b1, key=key, **kw)
        return _chain(est, _backbone(backbone, s), s)

    return build


def _fixed(k: int, backbone: str):
    def build(s: Settings, key, **kw):
        est = zoaq_jax.fixed_estimator(k=k, mu=s.mu, key=key, **kw)
        return _chain(est, _backbone(backbone, s), s)

    return build


def _statzo(s: Settings, key, **kw):
    kw = {"k_min": 1, "k_max": 10, "theta": 0.5, **kw}
    return _chain(zoaq_jax.statzo_estimator(mu=s.mu, key=key, **kw), _backbone("radazo", s), s)


def _zoar(s: Settings, key, **kw):
    kw = {"k": 10, "n_hist": 8, **kw}
    return _chain(zoaq_jax.zoar_estimator(mu=s.mu, key=key, **kw), _backbone("radazo", s), s)


def _auto_k(backbone: str):
    def build(s: Settings, key, **kw):  # the library defaults: no tuning per problem
        est = zoaq_jax.auto_k_estimator(mu=s.mu, key=key, **kw)
        return _chain(est, _backbone(backbone, s), s)

    return build


_BACKBONE_LABELS = {"radazo": "R-AdaZO", "zo_adamm": "ZO-AdaMM"}
FIXED_KS = (1, 2, 4, 8, 10, 16)

METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        Method("zoaq", "ZoAQ K∈[1,10]", _zoaq("radazo")),
        Method("zoaq-zo-adamm", "ZoAQ K∈[1,10] (ZO-AdaMM)", _zoaq("zo_adamm"),
               backbone="zo_adamm"),
        *(Method(f"{prefix}-k{k}", f"{_BACKBONE_LABELS[bb]} K={k}", _fixed(k, bb), fixed_k=k,
                 backbone=bb)
          for bb, prefix in (("radazo", "radazo"), ("zo_adamm", "zo-adamm")) for k in FIXED_KS),
        Method("statzo", "StatZO K∈[1,10]", _statzo),
        Method("zoar-k10", "ZoAR K=10", _zoar),
        Method("auto-k", "auto_k K∈[1,16]", _auto_k("radazo")),
        Method("auto-k-zo-adamm", "auto_k K∈[1,16] (ZO-AdaMM)", _auto_k("zo_adamm"),
               backbone="zo_adamm"),
    )
}

# The paper's comparison (the main preset), unchanged when methods are added above.
MAIN_METHODS = ("zoaq", "radazo-k2", "radazo-k4", "radazo-k8", "radazo-k10", "zo-adamm-k10",
                "statzo", "zoar-k10")
REFERENCE = "radazo-k10"  # the fixed baseline savings and speed ratios are measured against


@dataclass(frozen=True)
class Variant:
    """A method with overridden settings, e.g. ZoAQ with ``reset="half"``."""

    method: str
    overrides: tuple[tuple[str, Any], ...] = ()
    label: str = ""

    @property
    def name(self) -> str:
        if not self.overrides:
            return self.method
        return self.method + "[" + ",".join(f"{k}={v}" for k, v in self.overrides) + "]"

    @property
    def display(self) -> str:
        return self.label or (METHODS[self.method].label if not self.overrides else self.name)

    def build(self, settings: Settings, key) -> optax.GradientTransformationExtraArgs:
        return METHODS[self.method].build(settings, key, **dict(self.overrides))


def parse_methods(names: list[str]) -> list[Variant]:
    unknown = [n for n in names if n not in METHODS]
    if unknown:
        raise SystemExit(f"unknown method(s) {unknown}; choose from {list(METHODS)}")
    return [Variant(n) for n in names]
