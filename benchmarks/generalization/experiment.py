"""The generalization protocol: configuration, runs and query regret.

Each (problem, method) is compiled once and run for every seed (``vmap``) until the
problem's largest budget; the anytime curve of that one run gives every smaller budget.
The budgets are half-decades from 10^3 calls up to the problem's largest
(:func:`budgets_of`). The fixed-K comparators (R-AdaZO, K in {1, 2, 4, 8, 16}) define the
envelope of the best fixed K in hindsight, and every other method is scored by its query
regret against it (:mod:`benchmarks.anytime`).

One rule gives every problem its learning rate and smoothing radius (:func:`settings_of`),
chosen on the tuning set: the tuning set starts at ``x0 ~ N(0, I)`` with the synthetic
benchmark's lr 1e-3 and mu 5e-3; a problem started at scale ``s`` (the RMS of its start
distribution, ``a / sqrt 3`` for ``U[-a, a]``) gets lr ``1e-3 s`` and mu ``5e-3 s``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from benchmarks import anytime
from benchmarks.generalization.objectives import SETS, Problem
from benchmarks.methods import SYNTHETIC_HYPER, Hyper
from benchmarks.synthetic import budget as budget_mode
from benchmarks.synthetic import runner
from benchmarks.synthetic.methods import variant

FIXED = tuple(f"radazo:k={k}" for k in (1, 2, 4, 8, 16))
ADAPTIVE = ("auto_k",)
FIRST_BUDGET = 1000  # calls: the smallest budget scored


@dataclass(frozen=True)
class Config:
    """A generalization run: a problem set, methods, seeds and a budget cap."""

    preset: str
    set: str  # "heldout" or "tuning"
    problems: tuple[str, ...]
    methods: tuple[str, ...]  # method specs of the synthetic registry
    seeds: tuple[int, ...]
    budget: int  # cap on every problem's largest budget (calls)
    log_every: int = 4  # steps between log rows

    def problem(self, name: str) -> Problem:
        p = SETS[self.set][name]
        return p._replace(budget=min(p.budget, self.budget))


PRESETS = {
    "smoke": Config("smoke", "heldout", ("sum_powers",), ("radazo:k=1", "radazo:k=4", "auto_k"),
                    (0,), FIRST_BUDGET),
    "quick": Config("quick", "heldout", ("ellipsoid_1e6", "sum_powers", "rastrigin",
                                         "noisy_ellipsoid"),
                    ("radazo:k=1", "radazo:k=4", "radazo:k=16", "auto_k"), (0, 1), 10_000),
    "full": Config("full", "heldout", tuple(SETS["heldout"]), FIXED + ADAPTIVE, (0, 1, 2),
                   1_000_000),
    "tuning": Config("tuning", "tuning", tuple(SETS["tuning"]), FIXED + ADAPTIVE, (0, 1, 2),
                     1_000_000),
}


def preset(name: str, set_name: str | None = None) -> Config:
    """The preset ``name``, on the problem set ``set_name`` if given (all its problems)."""
    config = PRESETS[name]
    if set_name and set_name != config.set:
        config = replace(config, set=set_name, problems=tuple(SETS[set_name]))
    return config


def budgets_of(budget: int) -> tuple[float, ...]:
    """Half-decades from :data:`FIRST_BUDGET` calls to ``budget`` (``budget`` included)."""
    steps = math.floor(2 * math.log10(budget / FIRST_BUDGET) + 1e-9)
    out = [FIRST_BUDGET * 10 ** (i / 2) for i in range(steps + 1)]
    return tuple(sorted(set(round(b) for b in out) | {budget}))


def grid_of(budget: int) -> np.ndarray:
    """The call grid the curves are sampled on (fine below the first budget, too)."""
    return anytime.call_grid(budget, budgets_of(budget), points=600, low=FIRST_BUDGET / 64)


def settings_of(p: Problem) -> Hyper:
    """The one learning-rate and smoothing rule (module docstring): lr ``1e-3 s``, mu
    ``5e-3 s``, ``s`` the RMS of the start distribution."""
    base, s = SYNTHETIC_HYPER, (p.box / math.sqrt(3.0) if p.box else 1.0)
    return replace(base, lr=base.lr * s, mu=base.mu * s)


def _start(p: Problem):
    import jax

    if not p.box:
        return lambda key: jax.random.normal(key, (p.dim,))
    return lambda key: jax.random.uniform(key, (p.dim,), minval=-p.box, maxval=p.box)


def run(config: Config, spec: str) -> list[dict[str, Any]]:
    """One method on every problem of ``config``: compiled once a problem, run for every
    seed."""
    v = variant(spec)
    out = []
    for name in config.problems:
        p = config.problem(name)
        settings = settings_of(p)
        program = budget_mode.anytime_program(
            lambda key: v.build(settings, key), lambda x, batch, fid: p.fn(x, batch),
            lambda x, fid: p.gap(x), _start(p), p.budget, config.log_every)
        compile_seconds, [((calls, gaps, ks), seconds)] = runner.compiled_runs(
            program, config.seeds, [[0, 0]])
        used = [np.flatnonzero(c < np.iinfo(np.int32).max) for c in calls]
        out.append({
            "problem": name, "method": v.name, "label": v.display, "fixed_k": v.fixed_k,
            "seeds": list(config.seeds), "budget": p.budget, "lr": settings.lr,
            "mu": settings.mu, **budget_mode.logged_curves(calls, gaps, ks, grid_of(p.budget)),
            "k_changes": [int(np.count_nonzero(np.diff(k[r][1:]))) for k, r in zip(ks, used)],
            "compile_seconds": compile_seconds, "run_seconds": seconds,
        })
    return out


def cost(config: Config, spec: str) -> float:
    """Rough relative cost of :func:`run`, to start the slowest first."""
    k = variant(spec).fixed_k or 2
    return sum(config.problem(n).budget * SETS[config.set][n].dim ** 0.5 / k
               for n in config.problems)


def regret_rows(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per problem and adaptive method: the query regret at each budget, the envelope's
    K there, and the method's mean K at each budget."""
    out = []
    for name in dict.fromkeys(r["problem"] for r in results):
        rs = [r for r in results if r["problem"] == name]
        budget = rs[0]["budget"]
        grid, budgets = grid_of(budget), budgets_of(budget)
        fixed = {r["label"]: np.mean(r["curves"], axis=0) for r in rs if r["fixed_k"]}
        if not fixed:
            continue
        env, best = anytime.envelope(fixed)
        at = [int(np.searchsorted(grid, b)) for b in budgets]
        for r in rs:
            if r["fixed_k"]:
                continue
            regrets = anytime.regret(grid, np.mean(r["curves"], axis=0), env, budgets)
            k_mean = np.mean(r["k_curves"], axis=0)
            out.append({"problem": name, "method": r["method"], "label": r["label"],
                        "budgets": list(budgets), "regret": regrets,
                        "best_fixed": [best[i] for i in at],
                        "k_at": [float(k_mean[i]) for i in at],
                        "k_changes": r["k_changes"], **anytime.summarize(regrets)})
    return out


def overall(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per adaptive method, over every (problem, budget): median and worst regret, the
    problems whose worst regret exceeds 1, and the median over the cells where a fixed K
    above ``k_min = 1`` is the best (where a budget rule can beat every fixed K; where
    K = 1 is best, a rule that starts there scores about 1 at best)."""
    out = {}
    for method in dict.fromkeys(r["method"] for r in rows):
        mine = [r for r in rows if r["method"] == method]
        cells = np.concatenate([r["regret"] for r in mine])
        larger = np.asarray([x for r in mine for x, best in zip(r["regret"], r["best_fixed"])
                             if not best.endswith("K=1")], np.float64)
        out[method] = {"median": float(np.median(cells)), "max": float(np.max(cells)),
                       "cells": int(cells.size),
                       "above_1": [r["problem"] for r in mine if r["max"] > 1.0],
                       "larger_k_cells": int(larger.size),
                       "larger_k_median": float(np.median(larger)) if larger.size else None}
    return out
