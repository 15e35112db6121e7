"""The results file ``attack.json.xz``: merging runs, summaries and the anytime regret.

The file accumulates every ``python -m benchmarks attack`` run written to the same folder:
``results`` (one record per method x image x seed x goal x protocol x dataset), ``runs``
(one entry per method run: settings, machine, timings, the exact command) and ``anytime``
(:func:`anytime_summaries`). A new run of a method replaces its records and run entry of
the same (dataset, protocol, goal).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from benchmarks import anytime
from benchmarks.attack import methods as methods_lib

GROUP = ("dataset", "protocol", "goal")


def merge(existing: dict[str, Any] | None, records: list[dict], run: dict) -> dict[str, Any]:
    """``existing`` results with the ``records`` and entry of ``run`` (one method) replacing
    those of the same group and method."""
    existing = existing or {"results": [], "runs": []}
    [method] = run["methods"]

    def kept(item: dict, item_method: str) -> bool:
        return item_method != method or any(item[k] != run[k] for k in GROUP)

    return {"results": [r for r in existing["results"] if kept(r, r["method"])] + records,
            "runs": [r for r in existing["runs"] if kept(r, *r["methods"])] + [run]}


def by_group(results: dict) -> dict[tuple, dict[str, list[dict]]]:
    """The records of ``results`` by (dataset, protocol, goal), then by method."""
    out: dict[tuple, dict[str, list[dict]]] = {}
    for r in results["results"]:
        out.setdefault(tuple(r[k] for k in GROUP), {}).setdefault(r["method"], []).append(r)
    return out


def summarize(records: Sequence[dict]) -> dict[str, Any]:
    """Success rate and query statistics (over the successful attacks) of one method."""
    queries = np.array([r["num_queries"] for r in records], float)
    success = np.array([r["success"] for r in records], bool)
    steps = np.array([r["steps"] for r in records], float)
    ok = queries[success]
    return {"attacks": len(records), "success_rate": float(success.mean()),
            "mean": float(ok.mean()) if ok.size else float("nan"),
            "std": float(ok.std()) if ok.size else float("nan"),
            "median": float(np.median(ok)) if ok.size else float("nan"),
            "mean_all": float(queries.mean()),
            "calls_per_step": float(queries.sum() / max(steps.sum(), 1))}


def is_extra(spec: str) -> bool:
    """Whether ``spec`` belongs to a sweep or a comparison but not to the main method list."""
    return spec not in methods_lib.ALL_METHODS and any(
        spec in members for members in (*methods_lib.SWEEPS.values(),
                                        *methods_lib.COMPARISONS.values()))


def has_comparison(by_method: dict[str, list[dict]]) -> bool:
    """Whether the anytime comparison was run: a fixed-K method outside the main list
    (such as ``radazo:k=4``) is present."""
    return any(spec in by_method and is_extra(spec) for spec in methods_lib.FIXED_K)


def anytime_regret(by_method: dict[str, list[dict]],
                   adaptive: Sequence[str] = methods_lib.SCORED,
                   fixed: Sequence[str] = methods_lib.FIXED_K,
                   grid: Sequence[str] = methods_lib.GRID) -> dict[str, Any] | None:
    """Query regret of each adaptive method against the best fixed K in hindsight, and
    against the best point of the (learning rate, K) grid.

    Only the attacks (image, seed) that every fixed method and every method of the
    original comparison (:data:`methods.ADAPTIVE`) present solved count (the others are
    listed under ``excluded``). On them the best fixed method has the fewest
    mean queries (the first of ``fixed`` on a tie), likewise the best of each family;
    ``family_oracle`` is the mean of each attack's fewest queries within a family (a bound
    no fixed K beats). An adaptive method's ``regret`` is its mean queries over the best
    fixed method's (:func:`benchmarks.anytime.ratio`; success is yes or no, so no near-tie
    tolerance), ``per_attack_regret`` the same per attack; a method added since (issue
    32's baselines) that failed a counted attack has no mean (NaN) and regret ``inf`` (its
    per-attack regret there ``inf``). NaN,
    and no best, when no attack counts. The grid's points present (``grid``, with the fixed
    methods) that solved every counted attack compete for ``best_grid`` (fewest mean
    queries on the counted attacks; a point that failed one is listed in
    ``grid_failed``); an adaptive method's ``grid_regret`` is its mean queries over the
    best grid point's.

    Returns:
      ``None`` if no adaptive or no fixed method is present, else ``{"attacks",
      "common_attacks", "excluded", "best_fixed", "family_best", "family_oracle",
      "best_grid", "grid", "grid_failed", "methods"}`` with, per compared spec,
      ``success_rate``, ``mean``, ``calls_per_step`` and, for the adaptive ones,
      ``regret``, ``median_regret``, ``per_attack_regret``, ``family_regret`` and
      ``grid_regret``; ``grid`` holds the same first three for every grid point present.
    """
    adaptive = [s for s in adaptive if s in by_method]
    fixed = [s for s in fixed if s in by_method]
    if not adaptive or not fixed:
        return None
    points = [s for s in grid if s in by_method]
    present = list(dict.fromkeys(adaptive + fixed + points))
    solved = {s: {(r["image"], r["seed"]): r["num_queries"] for r in by_method[s] if r["success"]}
              for s in present}
    attacks = sorted({(r["image"], r["seed"]) for s in adaptive + fixed for r in by_method[s]})
    defining = fixed + [s for s in adaptive if s in methods_lib.ADAPTIVE]
    common = [a for a in attacks if all(a in solved[s] for s in defining)]
    nan = float("nan")
    mean = {s: float(np.mean([solved[s][a] for a in common]))
            if common and all(a in solved[s] for a in common) else nan for s in present}

    def best(specs: list[str]) -> str | None:
        return min(specs, key=lambda s: mean[s]) if common else None

    best_fixed = best(fixed)
    families = {base: members for base in methods_lib.FAMILIES
                if (members := [s for s in fixed if methods_lib.parse(s).base == base])}
    family_best = {base: best(members) for base, members in families.items()}
    family_oracle = {base: float(np.mean([min(solved[s][a] for s in members) for a in common]))
                     if common else nan for base, members in families.items()}
    grid_failed = [s for s in points if np.isnan(mean[s])]
    best_grid = best([*fixed, *(s for s in points if s not in grid_failed)]) if points else None
    methods = {}
    for spec in adaptive + fixed:
        entry = _entry(by_method[spec], mean[spec])
        if spec in adaptive:
            per_attack = [anytime.ratio(solved[spec].get(a), solved[best_fixed][a])
                          for a in common]
            entry.update(
                regret=anytime.ratio(mean[spec], mean[best_fixed]) if common else nan,
                median_regret=float(np.median(per_attack)) if common else nan,
                per_attack_regret=per_attack,
                family_regret={base: anytime.ratio(mean[spec], mean[b]) if common else nan
                               for base, b in family_best.items()},
                grid_regret=anytime.ratio(mean[spec], mean[best_grid]) if best_grid else nan)
        methods[spec] = entry
    return {"attacks": len(attacks), "common_attacks": len(common),
            "excluded": [list(a) for a in attacks if a not in common],
            "best_fixed": best_fixed, "family_best": family_best,
            "family_oracle": family_oracle, "best_grid": best_grid,
            "grid": {s: _entry(by_method[s], mean[s]) for s in points},
            "grid_failed": grid_failed, "methods": methods}


def _entry(records: Sequence[dict], mean: float) -> dict[str, float]:
    """A compared method's success rate (over all its attacks), its ``mean`` queries on
    the counted attacks and its calls an iteration."""
    s = summarize(records)
    return {"success_rate": s["success_rate"], "mean": mean,
            "calls_per_step": s["calls_per_step"]}


def anytime_summaries(results: dict) -> list[dict[str, Any]]:
    """:func:`anytime_regret` of every group of ``results`` that ran the comparison."""
    summaries = []
    for group, by_method in sorted(by_group(results).items()):
        regret = anytime_regret(by_method) if has_comparison(by_method) else None
        if regret is not None:
            summaries.append({**dict(zip(GROUP, group)), **regret})
    return summaries
