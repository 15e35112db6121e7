"""The attack methods: estimator + consistency monitor + backbone + learning rate.

A method is named by a spec ``base`` or ``base:key=value,key=value`` (for example
``zoaq:n_hist=4`` or ``statzo:k_max=6``); the keys override the base's defaults below,
which follow the attack settings of the ZoAQ paper (ZoAQ: Adaptive Zeroth-Order
Querying via Query-Reuse Coupling, Section 5.2), themselves those of the ZoAR code (Qiu et
al., Zeroth-Order Optimization is Secretly Single-Step Policy Optimization, 2025). All
methods use forward differences (the caller's centre value plus ``K`` perturbed calls a
step), Gaussian directions, and the R-AdaZO backbone unless said otherwise;
``lr``, ``mu`` and the moments are per dataset (:data:`HYPER`).

* ``zoaq``: ZoAQ, :math:`K_t \\in [1, 2]`, :math:`N_{hist} = 8`, :math:`\\tau_0 = 1`,
  :math:`\\beta_\\tau = 0.9`, reset ``min``; ``controller=always_accept`` and
  ``controller=fresh_on_expand`` are the paper's AlwaysMomentum and AlwaysGradient
  ablations.
* ``radazo``: R-AdaZO, fixed :math:`K = 2`.
* ``zo_adamm``: ZO-AdaMM (Adam-style second moment of the estimate), fixed :math:`K = 2`.
* ``statzo``: StatZO with the classical norm test (``theta``), :math:`K_t \\in [2, K_{max}]`,
  on the R-AdaZO backbone (the paper's "stabilized" StatZO); ``backbone=zo_adamm`` gives
  the original configuration.
* ``statzo_norm``: the rule the paper writes for its stabilized StatZO,
  :math:`\\|g_t - m_{t-1}\\| / \\|m_{t-1}\\| \\le c_{norm} = 0.5` on fresh directions only,
  :math:`K_t \\in [1, 2]` (``zoaq_estimator(trigger="norm", n_hist=0)``).
* ``zoar``: ZoAR's averaged-baseline history reuse, :math:`K = 1` (``zoar:k=2`` for 2),
  :math:`N_{hist} = 8` steps.
* ``auto_k``: :func:`zoaq_jax.auto_k_estimator` with the library's defaults
  (:math:`K_t \\in [1, 16]`, progress windows of 1,000 steps); its progress signal is
  the caller's centre value. Nothing in it is tuned for the attack.

The ``anytime`` comparison (:data:`COMPARISONS`) runs the adaptive methods (:data:`ADAPTIVE`)
against fixed budgets :math:`K \\in \\{1, 2, 4\\}` of R-AdaZO, ZO-AdaMM and ZoAR
(:data:`FIXED_K`, for example ``radazo:k=4``) on the same attacks.

Every chain has :func:`zoaq_jax.monitor_consistency` right after the estimator, so the
momentum-consistency trace (the paper's attack cosine figure) exists for all methods.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import inspect

import optax

import zoaq_jax

HYPER = {
    "mnist": {"lr": 0.01, "mu": 0.5},
    "cifar10": {"lr": 1e-4, "mu": 0.005},
}
MOMENTS = {"b1": 0.9, "b2": 0.99, "eps": 1e-8}

BASES: dict[str, dict[str, Any]] = {
    "zoaq": {"k_min": 1, "k_max": 2, "n_hist": 8, "tau0": 1.0, "beta_tau": 0.9,
             "reset": "min", "controller": "adaptive"},
    "radazo": {"k": 2},
    "zo_adamm": {"k": 2},
    "statzo": {"k_min": 2, "k_max": 2, "theta": 0.5, "backbone": "radazo"},
    "statzo_norm": {"k_min": 1, "k_max": 2, "c_norm": 0.5},
    "zoar": {"k": 1, "n_hist": 8},
    # The library's own defaults, read from its signature (never tuned for the attack).
    "auto_k": {name: param.default for name, param in
               inspect.signature(zoaq_jax.auto_k_estimator).parameters.items()
               if name in ("k_min", "k_max", "window", "r", "r_up", "z", "floor")},
}

# Shared across the paper protocol's tables, the extended protocol, and the sweeps.
PAPER_METHODS = ("radazo", "statzo", "zoar", "zoar:k=2", "zoaq")
ALL_METHODS = ("radazo", "zo_adamm", "statzo", "statzo_norm", "zoar", "zoar:k=2", "zoaq",
               "auto_k")
SWEEPS = {
    "nhist": tuple(f"zoaq:n_hist={n}" if n != 8 else "zoaq" for n in (4, 6, 8, 10, 12)),
    "kmax": tuple(f"statzo:k_max={k}" if k != 2 else "statzo" for k in (2, 4, 6, 8, 10)),
}


class Method(NamedTuple):
    """A parsed method spec: its base and its full parameters."""

    spec: str  # canonical spec (overrides that differ from the defaults, sorted)
    base: str
    params: dict[str, Any]

    @property
    def label(self) -> str:
        """A human-readable name in the paper's notation."""
        p = self.params
        if self.base == "zoaq":
            extra = "" if p["n_hist"] == 8 else f", N_hist={p['n_hist']}"
            extra += "" if p["controller"] == "adaptive" else f", {p['controller']}"
            return f"ZoAQ K∈[{p['k_min']},{p['k_max']}]{extra}"
        if self.base in ("radazo", "zo_adamm"):
            return f"{'R-AdaZO' if self.base == 'radazo' else 'ZO-AdaMM'} K={p['k']}"
        if self.base == "statzo":
            tail = "" if p["backbone"] == "radazo" else ", ZO-AdaMM backbone"
            return f"StatZO K∈[{p['k_min']},{p['k_max']}]{tail}"
        if self.base == "statzo_norm":
            return f"StatZO-norm K∈[{p['k_min']},{p['k_max']}]"
        if self.base == "auto_k":
            changed = [f"{k}={v}" for k, v in p.items() if v != BASES["auto_k"][k]
                       and k not in ("k_min", "k_max")]
            return f"auto_k K∈[{p['k_min']},{p['k_max']}]" + "".join(f", {c}" for c in changed)
        return f"ZoAR K={p['k']}"


def parse(spec: str) -> Method:
    """Parses ``base`` or ``base:key=value,...``.

    Raises:
      ValueError: unknown base or key, or a malformed spec.
    """
    base, _, rest = spec.strip().partition(":")
    if base not in BASES:
        raise ValueError(f"Unknown method {base!r}; choose one of {sorted(BASES)} "
                         "(optionally with :key=value overrides, e.g. zoaq:n_hist=4).")
    params = dict(BASES[base])
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        if not eq or key not in params:
            raise ValueError(f"Bad override {item!r} in {spec!r}; {base} takes "
                             f"{', '.join(f'{k}=' for k in params)}.")
        params[key] = _coerce(value, params[key], item)
    changed = [f"{k}={params[k]}" for k in sorted(params) if params[k] != BASES[base][k]]
    return Method(base + (":" + ",".join(changed) if changed else ""), base, params)


def _coerce(text: str, default: Any, item: str) -> Any:
    try:
        return type(default)(text) if not isinstance(default, str) else text
    except ValueError:
        raise ValueError(f"Bad value in {item!r}: expected {type(default).__name__}.") from None


# The anytime comparison: the adaptive budgets against fixed K in {1, 2, 4} of each
# fixed-budget family (canonical specs: "radazo" is R-AdaZO K=2, "zoar" ZoAR K=1).
ADAPTIVE = ("zoaq", "statzo", "auto_k")
FAMILIES = ("radazo", "zo_adamm", "zoar")
FIXED_K = tuple(parse(f"{base}:k={k}").spec for base in FAMILIES for k in (1, 2, 4))
COMPARISONS = {"anytime": ADAPTIVE + FIXED_K}


def build(method: Method, dataset: str, key: Any,
          hyper: dict[str, float] | None = None) -> optax.GradientTransformationExtraArgs:
    """The optimizer chain of ``method`` for ``dataset``, seeded by ``key``.

    ``hyper`` overrides the dataset's ``lr`` and ``mu`` (:data:`HYPER`).
    """
    hyper = {**HYPER[dataset], **(hyper or {})}
    p, mu = method.params, hyper["mu"]
    backbone = zoaq_jax.scale_by_radazo(**MOMENTS)
    if method.base == "zoaq":
        estimator = zoaq_jax.zoaq_estimator(
            k_min=p["k_min"], k_max=p["k_max"], n_hist=p["n_hist"], mu=mu, tau0=p["tau0"],
            beta_tau=p["beta_tau"], b1=MOMENTS["b1"], reset=p["reset"],
            controller=p["controller"], difference="forward", key=key,
        )
    elif method.base in ("radazo", "zo_adamm"):
        estimator = zoaq_jax.fixed_estimator(k=p["k"], mu=mu, difference="forward", key=key)
        if method.base == "zo_adamm":
            backbone = zoaq_jax.scale_by_zo_adamm(**MOMENTS)
    elif method.base == "statzo":
        estimator = zoaq_jax.statzo_estimator(
            k_min=p["k_min"], k_max=p["k_max"], theta=p["theta"], mu=mu, key=key)
        if p["backbone"] == "zo_adamm":
            backbone = zoaq_jax.scale_by_zo_adamm(**MOMENTS)
        elif p["backbone"] != "radazo":
            raise ValueError(f"statzo backbone must be radazo or zo_adamm, got {p['backbone']!r}.")
    elif method.base == "statzo_norm":
        estimator = zoaq_jax.zoaq_estimator(
            k_min=p["k_min"], k_max=p["k_max"], n_hist=0, mu=mu, trigger="norm",
            c_norm=p["c_norm"], b1=MOMENTS["b1"], difference="forward", key=key,
        )
    elif method.base == "auto_k":
        estimator = zoaq_jax.auto_k_estimator(**p, mu=mu, difference="forward", key=key)
    else:
        estimator = zoaq_jax.zoar_estimator(
            k=p["k"], n_hist=p["n_hist"], mu=mu, difference="forward", key=key)
    return optax.chain(estimator, zoaq_jax.monitor_consistency(MOMENTS["b1"]), backbone,
                       optax.scale_by_learning_rate(hyper["lr"]))
