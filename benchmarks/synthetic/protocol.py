"""The configs of both modes: presets of the main comparison, of each ablation and of
the budget-mode protocols.

``paper`` is the paper's protocol (d = 100, T = 60,000, 5 seeds, lr 1e-3, betas
(0.9, 0.99), mu 5e-3, eps 1e-8, central differences). ``quick`` keeps the structure at
a fraction of the cost (about a minute on 2 cores); ``smoke`` is for tests.

Budget mode (every method runs until it has spent the same number of oracle calls; fixed K
in {1, 2, 4, 8, 16} on both backbones define, per function, budget and backbone, the
envelope of the best fixed K in hindsight, and each adaptive method is scored by its
query regret against it) has three protocols:

* ``budget``: the five deterministic functions and least squares on a fresh minibatch
  each step (:data:`objectives.NOISY`), all methods;
* ``budget_switch``: Rosenbrock for half the budget, then Levy (the objective switch),
  regret measured on the calls after the switch;
* ``budget_auto_k``: the sensitivity of ``auto_k`` to its own parameters.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from benchmarks import anytime
from benchmarks.methods import (BASELINES, COMPLETE, LR_SCALES, SYNTHETIC_HYPER, Hyper, Variant,
                                variant)
from benchmarks.objectives import NOISY, OBJECTIVES
from benchmarks.synthetic.methods import MAIN_METHODS

SWITCH = "rosenbrock>levy"  # the controlled objective switch (Appendix "Sharp Turn")


@dataclass(frozen=True)
class Protocol:
    """A run of either mode: every method runs ``steps`` steps (steps mode), or until it
    has spent ``budget`` oracle calls (budget mode)."""

    name: str  # "main", an ablation's name, or "budget", "budget_switch", "budget_auto_k"
    preset: str
    dim: int
    steps: int | None  # steps mode: steps per run, per phase for the objective switch
    budget: int | None  # budget mode: calls per run (the switch happens at half of it)
    seeds: tuple[int, ...]
    log_every: int  # steps between log rows
    functions: tuple[str, ...]
    variants: tuple[Variant, ...]
    settings: Hyper = SYNTHETIC_HYPER
    lr_scales: tuple[float, ...] = ()  # budget mode: R-AdaZO's fixed K also run at these x lr

    @property
    def mode(self) -> str:
        return "steps" if self.budget is None else "budget"

    @property
    def total_steps(self) -> int:
        return self.steps * (2 if SWITCH in self.functions else 1)

    @property
    def switch_at(self) -> int | None:
        """Budget mode: the calls after which the objective switches (None: never)."""
        return self.budget // 2 if any(">" in f for f in self.functions) else None

    @property
    def origin(self) -> int:
        """Budget mode: calls from which regret is measured (the switch, if any)."""
        return self.switch_at or 0

    @property
    def budgets(self) -> tuple[float, ...]:
        span = self.budget - self.origin
        return tuple(self.origin + f * span for f in anytime.FRACTIONS)

    @property
    def grid(self) -> np.ndarray:
        return anytime.call_grid(self.budget, self.budgets)  # the budgets included


_SCALE = {  # preset -> (dim, steps, seeds, log_every)
    "smoke": (10, 40, 2, 10),
    "quick": (100, 4000, 3, 40),
    "paper": (100, 60000, 5, 100),
}

_QUICK_METHODS = ("zoaq", "radazo:k=2", "radazo", "statzo", "zoar")


def main(preset: str) -> Protocol:
    dim, steps, seeds, log_every = _SCALE[preset]
    methods = {"smoke": ("zoaq", "radazo"), "quick": _QUICK_METHODS}.get(preset, MAIN_METHODS)
    return Protocol("main", preset, dim, steps, None, tuple(range(seeds)), log_every,
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
    return Protocol(name, preset, dim, steps, None, tuple(range(seeds)), log_every, functions,
                    variants)


FIXED = tuple(f"{p}:k={k}" for p in ("radazo", "zo_adamm") for k in (1, 2, 4, 8, 16))
ADAPTIVE = ("zoaq", "statzo", "auto_k", "zoaq:backbone=zo_adamm", "auto_k:backbone=zo_adamm")
# Issue 32: the baselines run without tuning and the library's tuning-free optimizer.
SCORED = ADAPTIVE + tuple(m for m in BASELINES if m not in ADAPTIVE) + tuple(COMPLETE)
FUNCTIONS = (*OBJECTIVES, *NOISY)


_BUDGET_SCALE = {  # preset -> (dim, budget, seeds, log_every)
    "smoke": (10, 4000, 2, 10),
    "quick": (100, 120_000, 3, 20),
    "paper": (100, 1_200_000, 5, 50),
}
_SMOKE = ("radazo:k=1", "radazo:k=2", "zoaq", "auto_k")
SENSITIVITY = (("window", (4, 32)), ("growth", (0.0625, 0.25)), ("r", (0.003, 0.03)),
               ("r_up", (0.02, 0.2)), ("z", (0.0, 4.0)), ("z_stall", (0.0, 2.0)),
               ("ahead", (0.0, 0.6)))


def budget(name: str, preset: str) -> Protocol:
    """The budget-mode protocol ``name`` (``budget``, ``budget_switch``, ``budget_auto_k``)."""
    dim, calls, seeds, log_every = _BUDGET_SCALE[preset]
    fixed_radazo = tuple(m for m in FIXED if m.startswith("radazo"))
    lr_scales: tuple[float, ...] = ()
    if name == "budget":
        functions = FUNCTIONS if preset != "smoke" else ("quadratic", "least_squares")
        variants = tuple(map(variant, _SMOKE if preset == "smoke" else FIXED + SCORED))
        lr_scales = LR_SCALES if preset != "smoke" else ()
    elif name == "budget_switch":
        functions = (SWITCH,)
        variants = tuple(map(variant, fixed_radazo + ("zoaq", "auto_k")))
    elif name == "budget_auto_k":
        functions = ("quadratic", "rosenbrock", "least_squares")
        variants = tuple(map(variant, fixed_radazo + ("auto_k",))) + tuple(
            variant(f"auto_k:{key}={v}", f"auto_k {key}={v}")
            for key, values in SENSITIVITY for v in values)
    else:
        raise ValueError(f"unknown budget protocol {name!r}")
    return Protocol(name, preset, dim, None, calls, tuple(range(seeds)), log_every, functions,
                    variants, lr_scales=lr_scales)


def find(p: Protocol, spec: str) -> Variant:
    return next(v for v in p.variants if v.name == spec)


def restrict(protocol: Protocol, steps: int) -> Protocol:
    """The protocol with ``steps`` steps and a log period that divides them (at most a
    tenth of them)."""
    log_every = max(1, min(protocol.log_every, steps // 10))
    while steps % log_every:
        log_every -= 1
    return replace(protocol, steps=steps, log_every=log_every)


def as_dict(p: Protocol) -> dict:
    """A protocol as JSON values: its length field (``steps`` or ``budget``, the mode) and
    its variants by spec (``methods``)."""
    return {"name": p.name, "preset": p.preset, "dim": p.dim, p.mode: getattr(p, p.mode),
            "seeds": list(p.seeds), "log_every": p.log_every, "functions": list(p.functions),
            "methods": [v.name for v in p.variants], "settings": vars(p.settings),
            "lr_scales": list(p.lr_scales)}


def from_dict(d: dict) -> Protocol:
    """The protocol :func:`as_dict` wrote (its mode by its length field), from its preset
    (whose display labels are kept)."""
    size = "budget" if "budget" in d else "steps"
    base = (budget(d["name"], d["preset"]) if size == "budget" else
            main(d["preset"]) if d["name"] == "main" else ablation(d["name"], d["preset"]))
    known = {v.name: v for v in base.variants}
    return replace(base, dim=d["dim"], **{size: d[size]}, seeds=tuple(d["seeds"]),
                   log_every=d["log_every"], functions=tuple(d["functions"]),
                   variants=tuple(known.get(m) or variant(m) for m in d["methods"]),
                   settings=Hyper(**d["settings"]), lr_scales=tuple(d.get("lr_scales", ())))
