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
from benchmarks.methods import SYNTHETIC, Hyper, Method

REGISTRY = SYNTHETIC

# The paper's comparison (the main preset), unchanged when methods are added.
MAIN_METHODS = ("zoaq", "radazo:k=2", "radazo:k=4", "radazo:k=8", "radazo", "zo_adamm",
                "statzo", "zoar")
REFERENCE = "radazo"  # R-AdaZO K=10: the fixed baseline of savings and speed ratios
_BACKBONES = {"radazo": "R-AdaZO", "zo_adamm": "ZO-AdaMM", "sgd": "SGD"}


@dataclass(frozen=True)
class Variant:
    """A method of a protocol, with an optional display label (``"ZoAQ-Norm"``)."""

    method: Method
    label: str = ""

    @property
    def name(self) -> str:
        """The canonical spec (the ``method`` of every record)."""
        return self.method.spec

    @property
    def display(self) -> str:
        return self.label or display(self.method)

    @property
    def fixed_k(self) -> int | None:
        """K of a fixed-budget method on a moment backbone (R-AdaZO, ZO-AdaMM) with the
        default Gaussian directions, else None: the fixed-K envelope is Gaussian, and
        other direction families (``radazo:directions=rademacher``) are scored against it."""
        if self.method.base not in ("radazo", "zo_adamm"):
            return None
        return self.method.fixed_k if self.method.get("directions") == "gaussian" else None

    @property
    def backbone(self) -> str:
        return self.method.get("backbone")

    def build(self, hyper: Hyper, key) -> optax.GradientTransformationExtraArgs:
        return self.method.build(hyper, key)


def display(method: Method) -> str:
    """The registry's label, a backbone other than the base's in brackets:
    ``ZoAQ K∈[1,10] (ZO-AdaMM)``."""
    if "backbone" not in method.changed:
        return method.label
    label = method.label.replace(f", backbone={method.get('backbone')}", "")
    return f"{label} ({_BACKBONES[method.get('backbone')]})"


def variant(spec: str, label: str = "") -> Variant:
    """The variant of ``spec`` (``ValueError`` if it does not parse)."""
    return Variant(REGISTRY.parse(spec), label)


def parse_methods(specs: list[str]) -> list[Variant]:
    """The variants of ``--methods`` (each once); a bad spec ends the command."""
    try:
        return [Variant(m) for m in REGISTRY.parse_all(flags.items(specs))]
    except ValueError as err:
        flags.fail(str(err))
