"""The compared methods with the paper's synthetic settings (Appendix, Tables 5-6).

Methods are specs of the shared registry (:mod:`benchmarks.methods`): ``zoaq``,
``radazo`` (R-AdaZO K=10), ``radazo:k=2``, ``zo_adamm``, ``statzo``, ``zoar`` (ZoAR
K=10), ``auto_k``, ``zoaq:backbone=zo_adamm``, ``zoaq:reset=half`` ... Every method is
``optax.chain(estimator, monitor_consistency, backbone, lr)``: the monitor records the
momentum-consistency score ``cos(g_t, m_{t-1})`` of any estimator (the paper's cosine
diagnostic), and leaves the updates unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import optax

from benchmarks import flags
from benchmarks.methods import PARAMETER_FREE, SYNTHETIC, Complete, Hyper, Method, complete

REGISTRY = SYNTHETIC

# The paper's comparison (the main preset), unchanged when methods are added.
MAIN_METHODS = ("zoaq", "radazo:k=2", "radazo:k=4", "radazo:k=8", "radazo", "zo_adamm",
                "statzo", "zoar")
REFERENCE = "radazo"  # R-AdaZO K=10: the fixed baseline of savings and speed ratios
_BACKBONES = {"radazo": "R-AdaZO", "zo_adamm": "ZO-AdaMM", "sgd": "SGD", **PARAMETER_FREE}


@dataclass(frozen=True)
class Variant:
    """A method of a protocol, with an optional display label (``"ZoAQ-Norm"``): a spec of
    the registry or a complete optimizer (:data:`benchmarks.methods.COMPLETE`)."""

    method: Method | Complete
    label: str = ""

    @property
    def name(self) -> str:
        """The canonical spec (the ``method`` of every record)."""
        return self.method.spec

    @property
    def display(self) -> str:
        if isinstance(self.method, Complete):
            return self.label or self.method.label
        return self.label or display(self.method)

    @property
    def grid_k(self) -> int | None:
        """K of a fixed-budget method on a moment backbone (R-AdaZO, ZO-AdaMM) with the
        default Gaussian directions at a constant learning rate (any ``lr_scale``), else
        None: the envelopes are Gaussian, and other direction families
        (``radazo:directions=rademacher``) are scored against them."""
        m = self.method
        if isinstance(m, Complete) or m.base not in ("radazo", "zo_adamm"):
            return None
        return m.grid_k if m.get("directions") == "gaussian" else None

    @property
    def fixed_k(self) -> int | None:
        """:attr:`grid_k` at the protocol's learning rate: the fixed-K envelope's methods."""
        return self.grid_k if self.lr_scale == 1.0 else None

    @property
    def lr_scale(self) -> float:
        return 1.0 if isinstance(self.method, Complete) else self.method.get("lr_scale")

    @property
    def told_budget(self) -> bool:
        """Whether the method is built for the run's budget (one run a budget scored)."""
        if isinstance(self.method, Complete):
            return self.method.told_budget
        return self.method.get("schedule") == "cosine"

    @property
    def told_by_rebuild(self) -> bool:
        """Told its budget only by a build for that budget (a complete optimizer: one
        compilation a budget), not through a traced value (a cosine decay's steps)."""
        return isinstance(self.method, Complete) and self.method.told_budget

    @property
    def backbone(self) -> str:
        return "" if isinstance(self.method, Complete) else self.method.get("backbone")

    def build(self, hyper: Hyper, key,
              budget: int | None = None) -> optax.GradientTransformationExtraArgs:
        return self.method.build(hyper, key, budget=budget)


def display(method: Method) -> str:
    """The registry's label, a backbone other than the base's in brackets:
    ``ZoAQ K∈[1,10] (ZO-AdaMM)``."""
    if "backbone" not in method.changed:
        return method.label
    label = method.label.replace(f", backbone={method.get('backbone')}", "")
    return f"{label} ({_BACKBONES[method.get('backbone')]})"


def variant(spec: str, label: str = "") -> Variant:
    """The variant of ``spec`` (``ValueError`` if it does not parse)."""
    return Variant(complete(spec) or REGISTRY.parse(spec), label)


def parse_methods(specs: list[str]) -> list[Variant]:
    """The variants of ``--methods`` (each once); a bad spec ends the command."""
    try:
        return list({v.name: v for v in map(variant, flags.items(specs))}.values())
    except ValueError as err:
        flags.fail(str(err))
