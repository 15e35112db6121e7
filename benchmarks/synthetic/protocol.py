"""Presets of the main comparison and of each ablation.

``paper`` is the paper's protocol (d = 100, T = 60,000, 5 seeds, lr 1e-3, betas
(0.9, 0.99), mu 5e-3, eps 1e-8, central differences). ``quick`` keeps the structure at
a fraction of the cost (about a minute on 2 cores); ``smoke`` is for tests.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from benchmarks.methods import SYNTHETIC_HYPER, Hyper
from benchmarks.synthetic.methods import MAIN_METHODS, Variant, variant
from benchmarks.synthetic.objectives import OBJECTIVES

SWITCH = "rosenbrock>levy"  # the controlled objective switch (Appendix "Sharp Turn")


@dataclass(frozen=True)
class Protocol:
    name: str  # "main" or the ablation's name
    preset: str
    dim: int
    steps: int  # per phase for the objective switch
    seeds: tuple[int, ...]
    log_every: int
    functions: tuple[str, ...]
    variants: tuple[Variant, ...]
    settings: Hyper = SYNTHETIC_HYPER

    @property
    def total_steps(self) -> int:
        return self.steps * (2 if SWITCH in self.functions else 1)


_SCALE = {  # preset -> (dim, steps, seeds, log_every)
    "smoke": (10, 40, 2, 10),
    "quick": (100, 4000, 3, 40),
    "paper": (100, 60000, 5, 100),
}

_QUICK_METHODS = ("zoaq", "radazo:k=2", "radazo", "statzo", "zoar")


def main(preset: str) -> Protocol:
    dim, steps, seeds, log_every = _SCALE[preset]
    methods = {"smoke": ("zoaq", "radazo"), "quick": _QUICK_METHODS}.get(preset, MAIN_METHODS)
    return Protocol("main", preset, dim, steps, tuple(range(seeds)), log_every,
                    tuple(OBJECTIVES), tuple(variant(m) for m in methods))


def _zoaq(key: str, values, labels=None) -> tuple[Variant, ...]:
    labels = labels or [f"{key}={v}" for v in values]
    return tuple(variant(f"zoaq:{key}={v}", label) for v, label in zip(values, labels))


ABLATIONS = {
    # Appendix "Reset Ablation" (Table "performance across reset strategies").
    "reset": (("quadratic", "cubic", "levy", "rosenbrock"),
              _zoaq("reset", ("min", "half", "linear"))),
    # Appendix "Threshold Sensitivity" (Table "sensitivity of the initial threshold").
    "tau0": (("quadratic", "rosenbrock"), _zoaq("tau0", (-0.5, -0.1, 0.0, 0.3, 0.5, 1.0))),
    # History window: the paper sweeps it on MNIST attacks; here on two synthetic functions.
    "nhist": (("quadratic", "rosenbrock"), _zoaq("n_hist", (0, 2, 4, 8, 16, 32))),
    # Appendix "Trigger Metric Ablation": Rosenbrock at d = 10,000.
    "trigger": (("rosenbrock",),
                _zoaq("trigger", ("cosine", "norm"), ["ZoAQ (cosine)", "ZoAQ-Norm"])),
    # Appendix "Controller Variants", at the neutral threshold tau0 = 0 the paper uses.
    "controller": (("quadratic", "rosenbrock"), tuple(
        variant(f"zoaq:controller={c},tau0=0.0", label)
        for c, label in (("adaptive", "Adaptive"), ("always_accept", "AlwaysMomentum"),
                         ("fresh_on_expand", "AlwaysGradient")))),
    # Appendix "Controlled Objective Switch": Rosenbrock for T steps, then Levy for T.
    "switch": ((SWITCH,), (variant("zoaq"), variant("radazo"))),
}

_ABLATION_SCALE = {  # preset -> ablation -> (dim, steps, seeds, log_every) overrides
    "smoke": {"trigger": (50, 40, 2, 10)},
    "quick": {"trigger": (10000, 1000, 2, 20), "switch": (100, 2000, 3, 20)},
    "paper": {"trigger": (10000, 10000, 3, 100), "switch": (100, 15000, 5, 100)},
}


def ablation(name: str, preset: str) -> Protocol:
    functions, variants = ABLATIONS[name]
    dim, steps, seeds, log_every = _ABLATION_SCALE[preset].get(name, _SCALE[preset])
    return Protocol(name, preset, dim, steps, tuple(range(seeds)), log_every, functions,
                    variants)


def find(p, spec: str) -> Variant:
    """The variant of protocol ``p`` (of either mode) whose spec is ``spec``."""
    return next(v for v in p.variants if v.name == spec)


def restrict(protocol: Protocol, steps: int) -> Protocol:
    """The protocol with ``steps`` steps and a log period that divides them (at most a
    tenth of them)."""
    log_every = max(1, min(protocol.log_every, steps // 10))
    while steps % log_every:
        log_every -= 1
    return replace(protocol, steps=steps, log_every=log_every)


def record(p, size: str) -> dict:
    """A protocol of either mode as JSON values: its length field ``size`` (``steps`` or
    ``budget``) and its variants by spec (``methods``)."""
    return {"name": p.name, "preset": p.preset, "dim": p.dim, size: getattr(p, size),
            "seeds": list(p.seeds), "log_every": p.log_every, "functions": list(p.functions),
            "methods": [v.name for v in p.variants], "settings": vars(p.settings)}


def restore(base, d: dict, size: str):
    """The protocol :func:`record` wrote, from its preset's ``base`` (whose display labels
    are kept)."""
    known = {v.name: v for v in base.variants}
    return replace(base, dim=d["dim"], **{size: d[size]}, seeds=tuple(d["seeds"]),
                   log_every=d["log_every"], functions=tuple(d["functions"]),
                   variants=tuple(known.get(m) or variant(m)
                                  for m in d.get("methods", d.get("variants", ()))),
                   settings=Hyper(**d["settings"]))


def as_dict(p: Protocol) -> dict:
    return record(p, "steps")


def from_dict(d: dict) -> Protocol:
    """The protocol :func:`as_dict` recorded (methods by spec, the preset's labels kept)."""
    base = main(d["preset"]) if d["name"] == "main" else ablation(d["name"], d["preset"])
    return restore(base, d, "steps")
