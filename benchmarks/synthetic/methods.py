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


def _chain(estimator, backbone, s: Settings):
    return optax.chain(estimator, zoaq_jax.monitor_consistency(s.b1), backbone,
                       optax.scale_by_learning_rate(s.lr))


def _radazo(s: Settings):
    return zoaq_jax.scale_by_radazo(b1=s.b1, b2=s.b2, eps=s.eps)


def _zoaq(s: Settings, key, **kw):
    kw = {"k_min": 1, "k_max": 10, "n_hist": 8, **kw}
    return _chain(zoaq_jax.zoaq_estimator(mu=s.mu, b1=s.b1, key=key, **kw), _radazo(s), s)


def _fixed(k: int, backbone: str):
    def build(s: Settings, key, **kw):
        est = zoaq_jax.fixed_estimator(k=k, mu=s.mu, key=key, **kw)
        scale = (_radazo(s) if backbone == "radazo"
                 else zoaq_jax.scale_by_zo_adamm(b1=s.b1, b2=s.b2, eps=s.eps))
        return _chain(est, scale, s)

    return build


def _statzo(s: Settings, key, **kw):
    kw = {"k_min": 1, "k_max": 10, "theta": 0.5, **kw}
    return _chain(zoaq_jax.statzo_estimator(mu=s.mu, key=key, **kw), _radazo(s), s)


def _zoar(s: Settings, key, **kw):
    kw = {"k": 10, "n_hist": 8, **kw}
    return _chain(zoaq_jax.zoar_estimator(mu=s.mu, key=key, **kw), _radazo(s), s)


METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        Method("zoaq", "ZoAQ K∈[1,10]", _zoaq),
        *(Method(f"radazo-k{k}", f"R-AdaZO K={k}", _fixed(k, "radazo"), fixed_k=k)
          for k in (2, 4, 8, 10)),
        Method("zo-adamm-k10", "ZO-AdaMM K=10", _fixed(10, "zo_adamm"), fixed_k=10),
        Method("statzo", "StatZO K∈[1,10]", _statzo),
        Method("zoar-k10", "ZoAR K=10", _zoar),
    )
}

MAIN_METHODS = tuple(METHODS)
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
