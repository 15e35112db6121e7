"""The generalization protocol: configuration, runs and query regret.

Each (problem, method) is compiled once and run for every seed (``vmap``); the anytime
curve of that one run gives every budget. The budgets are half-decades from 10^3 calls up
to the problem's largest, ``B`` (:func:`budgets_of`). The envelopes' runs (the fixed K and
the grid points) stop at ``B``; a scored method's run goes on to ``EXTEND B = 2B`` calls
(:func:`runs_to`), so that its query regret at a budget ``b <= B`` is measured up to
``2B / b`` (at ``B``: up to 2, the target's worst) instead of reading ``inf`` past ``B``.
A method told its budget (a cosine decay over the run, ``tuning_free:budget``) is instead
run once per budget of the table, and scored at each budget by the run told that budget
(its regret is at most 1, or ``inf``). Every other method is scored by its query regret
(:mod:`benchmarks.anytime`) against two envelopes: the best fixed K in hindsight at the
rule's learning rate (R-AdaZO, K in {1, 2, 4, 8, 16}: :data:`FIXED`), and the best point
in hindsight of the (learning rate, K) grid (the rule's learning rate times the config's
``lr_scales``, :data:`LR_SCALES` in the full presets, times the same K; each K runs its
learning rates as lanes of one vmapped program).

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

from benchmarks import anytime, loops
from benchmarks.anytime import envelopes, scored_curves
from benchmarks.generalization.objectives import SETS, Problem
from benchmarks.methods import BASELINES, COMPLETE, LR_SCALES, SYNTHETIC_HYPER, Hyper, variant

KS = (1, 2, 4, 8, 16)
FIXED = tuple(f"radazo:k={k}" for k in KS)
# The baselines (benchmarks.methods.BASELINES) and the library's tuning-free optimizer
# (both forms).
ADAPTIVE = BASELINES + tuple(COMPLETE)
FIRST_BUDGET = 1000  # calls: the smallest budget scored
EXTEND = 2  # a scored method's anytime run goes on to EXTEND x the largest budget
# Design rounds that scored the held-out set (round 1: b422e1f, round 2: 72a29a3, round 3:
# b5a1219, round 4: tuning_free's confirmation rule and start-up ramp, round 5: the radius
# that follows the step and the ramp's ceiling, round 6: its
# progress origin, span confirmation, quiet ramp and stall-gated decay, round 7: its ramp
# window that decides nothing, round 8: its undo of a data-noise halving that buys no
# fall (design round 8b), round 9: the 2B measurement (a scored anytime run goes on to
# twice the largest budget; no design change kept), round 10: racing lanes, simulated on
# stored curves (`--race`; not shipped)); the coordinator sets it.
HELDOUT_ROUNDS = 10


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
    heldout_rounds: int = HELDOUT_ROUNDS  # design rounds that scored the held-out set
    lr_scales: tuple[float, ...] = ()  # each fixed K also runs at these x the rule's lr

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
                   1_000_000, lr_scales=LR_SCALES),
    "tuning": Config("tuning", "tuning", tuple(SETS["tuning"]), FIXED + ADAPTIVE, (0, 1, 2),
                     1_000_000, lr_scales=LR_SCALES),
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
    """The call grid the curves are sampled on (fine below the first budget, too): log
    spaced up to ``budget`` (the budgets included), then on at the same spacing to
    ``EXTEND x budget``, where only the scored methods' runs go (:func:`runs_to`)."""
    points, low = 600, FIRST_BUDGET / 64
    grid = anytime.call_grid(budget, budgets_of(budget), points=points, low=low)
    beyond = math.ceil(math.log(EXTEND) / math.log(budget / low) * (points - 1))
    return np.concatenate([grid, budget * EXTEND ** (np.arange(1, beyond + 1) / beyond)])


def is_envelope(fixed_k: int | None, grid_k: int | None) -> bool:
    """Whether a run is one of the envelopes' (a fixed K, or a point of the grid)."""
    return bool(fixed_k or grid_k)


def runs_to(budget: int, envelope: bool, told: bool) -> int:
    """The calls a run goes to on a problem whose largest budget is ``budget``: the
    envelopes' runs (``envelope``: a fixed K or a grid point) and a run told its budget
    (``told``) stop there, a scored method's anytime run goes on to ``EXTEND x budget``."""
    return budget if envelope or told else EXTEND * budget


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
    """One method on every problem of ``config``: compiled once a problem (once a budget
    for a complete optimizer told its budget), run for every seed and lane
    (:func:`benchmarks.loops.lanes`)."""
    v = variant(spec)
    out = []
    for name in config.problems:
        p = config.problem(name)
        settings, budgets = settings_of(p), budgets_of(p.budget)
        for told in budgets if v.told_by_rebuild else (None,):
            build, values, fields = loops.lanes(v, settings, budgets, config.lr_scales)
            program = loops.anytime_program(
                (lambda key, lane: v.build(settings, key, told)) if told else build,
                lambda x, batch, fid: p.fn(x, batch), lambda x, fid: p.gap(x), _start(p),
                told or runs_to(p.budget, is_envelope(v.fixed_k, v.grid_k), v.told_budget),
                config.log_every, lanes=values)
            compile_seconds, [(log, seconds)] = loops.compiled_runs(
                program, config.seeds, [[0, 0]])
            for lane, extra in enumerate(fields):
                calls, gaps, ks = (a[lane] for a in log)
                used = [np.flatnonzero(c < np.iinfo(np.int32).max) for c in calls]
                record = {
                    "problem": name, "method": v.name, "label": v.display, "fixed_k": v.fixed_k,
                    "grid_k": v.grid_k, "lr_scale": v.lr_scale, "told_budget": told,
                    "seeds": list(config.seeds), "budget": p.budget, **extra,
                    **loops.logged_curves(calls, gaps, ks, grid_of(p.budget)),
                    "k_changes": [int(np.count_nonzero(np.diff(k[r][1:])))
                                  for k, r in zip(ks, used)],
                    "lanes": len(fields), "compile_seconds": compile_seconds,
                    "run_seconds": seconds}  # both shared by the program's lanes
                out.append({**record, "lr": settings.lr * record["lr_scale"], "mu": settings.mu})
    return out


def compact(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records as stored (:func:`benchmarks.anytime.compact`, by problem): docs/results
    stays small with 25 grid points a problem. Regrets are computed from the records as
    stored."""
    return anytime.compact(results, lambda r: r["problem"])


def cost(config: Config, spec: str) -> float:
    """Rough relative cost of :func:`run`, to start the slowest first."""
    v = variant(spec)
    k = (v.grid_k or 2) / (1.5 if v.told_budget else 1.0)  # told: 1.46 runs' calls
    k /= len(config.lr_scales) if v.fixed_k and config.lr_scales else 1
    return sum(runs_to(config.problem(n).budget, is_envelope(v.fixed_k, v.grid_k), v.told_budget)
               * SETS[config.set][n].dim ** 0.5 / k
               for n in config.problems)


def regret_rows(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per problem and scored method: the query regret at each budget against the fixed-K
    envelope (``regret``) and the (learning rate, K) envelope (``regret_grid``), which
    point makes each envelope there, and the method's mean K at each budget. The fixed-K
    envelope itself is scored against the grid's envelope too (method ``best_fixed_k``)."""
    out = []
    for name in dict.fromkeys(r["problem"] for r in results):
        rs = [r for r in results if r["problem"] == name]
        budget = rs[0]["budget"]
        grid, budgets = grid_of(budget), budgets_of(budget)
        if not any(r["fixed_k"] for r in rs):
            continue
        envs = envelopes(rs)
        at = [int(np.searchsorted(grid, b)) for b in budgets]
        best = {kind: [labels[i] for i in at] for kind, (_, labels) in envs.items()}

        def score(curve_of, kind):
            env = envs[kind][0]
            return [anytime.regret(grid, curve_of(b), env, [b])[0] for b in budgets]

        if "grid" in envs:
            env_fixed = envs["fixed"][0]
            regrets = score(lambda b: env_fixed, "grid")
            out.append({"problem": name, "method": "best_fixed_k",
                        "label": "best fixed K in hindsight (rule's lr)", "budgets": list(budgets),
                        "regret": [1.0] * len(budgets), "regret_grid": regrets,
                        "best_fixed": best["fixed"], "best_grid": best["grid"],
                        "k_at": [float(best["fixed"][j].split("=")[-1]) for j in range(len(at))],
                        "k_changes": [], **anytime.summarize([1.0] * len(budgets)),
                        **{f"{k}_grid": v for k, v in anytime.summarize(regrets).items()}})
        for method, entry in scored_curves(rs).items():
            curves, r = entry["curves"], entry["record"]
            curve_of = anytime.curve_at(curves)
            row = {"problem": name, "method": method, "label": r["label"],
                   "budgets": list(budgets), "best_fixed": best["fixed"],
                   "told_budget": None not in curves}
            for kind, key in (("fixed", "regret"), ("grid", "regret_grid")):
                if kind in envs:
                    regrets = score(curve_of, kind)
                    row[key] = regrets
                    row[f"best_{kind}"] = best[kind]
                    row.update({(k if kind == "fixed" else f"{k}_grid"): v
                                for k, v in anytime.summarize(regrets).items()})
            k_mean = np.mean(r["k_curves"], axis=0)  # told: the longest run's K
            row.update({"k_at": [float(k_mean[i]) for i in at], "k_changes": r["k_changes"]})
            out.append(row)
    return out


def overall(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per scored method, over every (problem, budget): median and worst regret against
    each envelope, the problems whose worst regret exceeds 1, and the median over the
    cells where a fixed K above ``k_min = 1`` is the best (where a budget rule can beat
    every fixed K; where K = 1 is best, a rule that starts there scores about 1 at best)."""
    out = {}
    for method in dict.fromkeys(r["method"] for r in rows):
        mine = [r for r in rows if r["method"] == method]
        cells = np.concatenate([r["regret"] for r in mine])
        larger = np.asarray([x for r in mine for x, best in zip(r["regret"], r["best_fixed"])
                             if not best.endswith("K=1")], np.float64)
        out[method] = {"label": mine[0]["label"], "median": float(np.median(cells)),
                       "max": float(np.max(cells)), "cells": int(cells.size),
                       "above_1": [r["problem"] for r in mine if r["max"] > 1.0],
                       "larger_k_cells": int(larger.size),
                       "larger_k_median": float(np.median(larger)) if larger.size else None}
        if all("regret_grid" in r for r in mine):
            grid = np.concatenate([r["regret_grid"] for r in mine])
            out[method].update({"median_grid": float(np.median(grid)),
                                "max_grid": float(np.max(grid)),
                                "above_1_grid": [r["problem"] for r in mine
                                                 if r["max_grid"] > 1.0]})
    return out
