"""The optimizers of the paper's LLM table: the LLM defaults of :mod:`benchmarks.methods`.

Methods are specs of the shared grammar (``BASE`` or ``BASE:key=value,...``); this module
holds only the LLM experiment's defaults for each base (:data:`REGISTRY`). All use the
paper's learning rate and perturbation scale (from the configuration) and Gaussian
directions. FE (forward evaluations) are the estimator's ``num_queries``:

* ``mezo``: MeZO, K = 4 central directions on plain SGD. 2K = 8 FE a step.
* ``radazo``: R-AdaZO, K = 4 central directions on the R-AdaZO backbone. 8 FE a step.
  ``radazo:k=1`` / ``radazo:k=2`` (2 / 4 FE a step) are, with ``radazo``, the fixed-K
  methods whose best dev loss at each FE budget is the envelope of the anytime
  comparison (``--budget``).
* ``statzo``: the classical norm test (Bollapragada et al.; ``zoaq_jax.statzo``,
  theta = 0.5) growing K in [2, 4] on the R-AdaZO backbone. It uses forward differences
  (its library default) with one centre forward pass a step, so a step costs K_t + 1 FE
  (not 2 K_t).
* ``statzo_norm``: the rule the ZoAQ paper writes for its StatZO baseline,
  ``||g - m|| / ||m|| <= 0.5`` (``zoaq_estimator(gate=gates.momentum_norm(0.5))`` without reuse),
  central differences, K in [2, 4]: 2 K_t FE a step, the paper's accounting.
* ``zoaq`` / ``zoaq:k_max=2``: ZoAQ, K in [1, 4] / [1, 2], N_hist = 15, tau0 = 1,
  beta_tau = 0.9, reset "min", central differences: 2 K_t FE a step.
* ``auto_k``: ``zoaq_jax.auto_k`` (the ``auto_k_estimator`` at its library defaults,
  K in [1, 16], progress windows of max(8, t / 8) steps after t steps, on the R-AdaZO
  backbone) with the learning rate and mu the others get: 2 K_t FE a step.

Any other value is a spec away: ``zoaq:n_hist=4``, ``statzo:difference=central``,
``radazo:backbone=zo_adamm``; ``radazo:k=2,lr_scale=2`` is a point of the (learning
rate, K) grid (:func:`grid_k`), ``radazo:k=1,schedule=cosine`` decays the learning rate
over the run's FE budget. The complete optimizers of :data:`benchmarks.methods.COMPLETE`
run as they are, with no learning rate, K or mu from the benchmark: ``tuning_free`` and
``tuning_free:budget`` (told the run's FE budget).

:func:`chunks` lists the batched oracle calls a step with ``K_t = k`` makes, read from
the method's parameters (difference scheme, ``k_min``, ``k_step``): the benchmark uses
it to split step time into forward passes and everything else.
"""

from __future__ import annotations

from collections.abc import Iterable

import optax

from benchmarks.methods import Complete, Hyper, Method, Registry, complete

REGISTRY = Registry({
    "mezo": {"k": 4}, "radazo": {"k": 4}, "statzo": {"k_min": 2, "k_max": 4, "theta": 0.5},
    "statzo_norm": {"k_min": 2, "k_max": 4, "c_norm": 0.5},
    "zoaq": {"k_min": 1, "k_max": 4, "n_hist": 15, "tau0": 1.0, "beta_tau": 0.9, "reset": "min"},
    "auto_k": {}})

DEFAULT = ("mezo", "radazo", "statzo", "zoaq", "zoaq:k_max=2")


def parse_one(spec: str) -> Method | Complete:
    """The method of ``spec``: a complete optimizer or a spec of :data:`REGISTRY`."""
    return complete(spec) or REGISTRY.parse(spec)


def parse(specs: Iterable[str]) -> list[Method | Complete]:
    """The methods of ``specs`` (each once, in order).

    Raises:
      ValueError: an unknown base or key, a malformed spec, or no spec at all.
    """
    methods = list({m.spec: m for m in map(parse_one, specs)}.values())
    if not methods:
        raise ValueError("No method given.")
    return methods


def build(method: Method | Complete, learning_rate: float, mu: float, seed: int,
          budget: int | None = None) -> optax.GradientTransformationExtraArgs:
    """The optimizer of ``method`` with the paper's learning rate and mu, keyed by ``seed``;
    ``budget``: the run's FE (a cosine schedule's horizon, a complete optimizer's budget)."""
    return method.build(Hyper(lr=learning_rate, mu=mu), seed, budget=budget)


# The range of K_t and the acquisition of a complete optimizer (tuning_free: the adaptive
# estimator with K in [1, k_max], one central pair per call).
_COMPLETE_PARAMS = {"k_min": 1, "k_max": 16, "k_step": 1, "difference": "central"}


def k_min(method: Method | Complete) -> int:
    """The smallest K_t the method can use (:attr:`Method.k_min`; a complete optimizer's
    from its acquisition)."""
    return _COMPLETE_PARAMS["k_min"] if isinstance(method, Complete) else method.k_min


def chunks(method: Method | Complete, k: int) -> list[tuple[int, bool]]:
    """The oracle calls of a step with ``K_t = k``: ``(forward passes, batched)`` each.

    Central differences acquire ``k_min`` directions (2 ``k_min`` passes in one vmapped
    call), then ``k_step`` more per call; forward differences first evaluate the centre
    (one unbatched pass), then one pass a direction in the same chunks.
    """
    p = dict(_COMPLETE_PARAMS if isinstance(method, Complete) else method.params)
    first = k_min(method)
    step = p.get("k_step", 1) if "k_min" in p else first
    more = (k - first) // step
    if p["difference"] == "forward":
        return [(1, False), (first, True)] + [(step, True)] * more
    return [(2 * first, True)] + [(2 * step, True)] * more


def is_fixed(spec: str) -> bool:
    """Whether the method ``spec`` keeps K fixed at the run's learning rate (a method of
    the fixed-K envelope of the anytime mode; :meth:`Registry.fixed_k`)."""
    return REGISTRY.fixed_k(spec) is not None


def grid_k(spec: str) -> int | None:
    """K of a point of the (learning rate, K) grid (a fixed K at a constant learning rate,
    any ``lr_scale``: :attr:`benchmarks.methods.Method.grid_k`), else ``None`` (complete
    optimizers and specs that do not parse)."""
    try:
        return REGISTRY.parse(spec).grid_k
    except ValueError:
        return None
