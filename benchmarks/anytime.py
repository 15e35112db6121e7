"""Anytime evaluation: quality against oracle calls, the fixed-K envelope, query regret.

Shared by the benchmarks that compare methods at equal calls. A *curve* is a method's
mean quality (lower is better: a gap or a loss) over seeds, sampled on a common grid of
call counts. At a budget ``b``:

* the *envelope* ``E(b)`` is the best mean quality any fixed-K method reached within
  ``b`` calls (the best fixed K chosen in hindsight, per budget);
* a method's *query regret* is ``c / b``, with ``c`` the fewest calls on the grid at
  which its own mean quality reaches ``E(b)`` (``inf`` if it never does within the
  run). Regret 1 means "as good as the best fixed K"; 0.5, "half its calls".
* *reaches*, with the near-tie tolerance :data:`TOLERANCE` (1%): quality ``q`` reaches a
  target ``E`` when ``q <= E + TOLERANCE |E|`` (:func:`target`), so a method that ends
  within 1% of the envelope is not scored ``inf`` for a rounding-level difference.

This is the project's one definition of query regret: the synthetic, generalization,
attack and LLM benchmarks all score with :func:`target` and :func:`ratio`.

Calls may be counted from an ``origin`` (e.g. an objective switch): budgets and ``c``
are then both measured from it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

FRACTIONS = (1 / 64, 1 / 32, 1 / 16, 1 / 8, 1 / 4, 1 / 2, 1.0)  # budgets, of the run's
TOLERANCE = 0.01  # a quality within 1% of the target counts as reaching it


def target(quality, tolerance: float = TOLERANCE):
    """The quality that counts as reaching ``quality``: ``quality + tolerance |quality|``."""
    return quality + tolerance * np.abs(quality)


def ratio(calls: float | None, reference: float) -> float:
    """Query regret: the ``calls`` a method needed over the ``reference`` calls (``inf``
    when it never got there: ``calls`` is ``None``, infinite or NaN)."""
    if calls is None or not np.isfinite(calls):
        return float("inf")
    return float(calls / reference)


def call_grid(budget: float, budgets: Sequence[float], points: int = 400,
              origin: float = 0.0, low: float | None = None) -> np.ndarray:
    """Log-spaced call counts from ``low`` (default ``budget / 1024``) to ``budget``,
    shifted by ``origin``, ``budgets`` included."""
    span = np.geomspace(low or budget / 1024, budget, points)
    return np.unique(np.concatenate([origin + span, np.asarray(budgets, np.float64)]))


def sample_curve(calls: np.ndarray, values: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """One run's quality at each grid point: its value at the last log row within it.

    ``calls`` are the run's cumulative calls at its log rows (non-decreasing, row 0 at
    the start) and ``values`` the quality there; before the first row the first value
    holds. Grid points past the run's last row take its last value.
    """
    row = np.searchsorted(np.asarray(calls), grid, side="right") - 1
    return np.asarray(values, np.float64)[np.maximum(row, 0)]


def envelope(fixed: Mapping[str, np.ndarray]) -> tuple[np.ndarray, list[str]]:
    """Pointwise best of the fixed methods' mean curves, and which method it is."""
    names = list(fixed)
    stacked = np.stack([np.asarray(fixed[n], np.float64) for n in names])
    stacked = np.where(np.isnan(stacked), np.inf, stacked)
    best = np.argmin(stacked, axis=0)
    return stacked[best, np.arange(stacked.shape[1])], [names[i] for i in best]


def regret(grid: np.ndarray, curve: np.ndarray, env: np.ndarray, budgets: Sequence[float],
           origin: float = 0.0, tolerance: float = TOLERANCE) -> list[float]:
    """Query regret of ``curve`` against the envelope ``env`` at each budget.

    ``grid``, ``curve`` and ``env`` are aligned; ``budgets`` must be grid points.
    """
    grid = np.asarray(grid, np.float64)
    curve = np.where(np.isnan(curve), np.inf, np.asarray(curve, np.float64))
    out = []
    for b in budgets:
        goal = target(env[np.searchsorted(grid, b)], tolerance)
        reached = np.nonzero(curve <= goal)[0]
        out.append(ratio(grid[reached[0]] - origin if reached.size else None, b - origin))
    return out


def rule(tolerance: float = TOLERANCE) -> str:
    """The definition as one sentence for a report."""
    return (f"Query regret at budget B = calls the method needed to reach the best fixed K's "
            f"mean quality at B, over B; within {tolerance:.0%} of that quality counts as "
            "reached (near-tie tolerance); ∞: not reached within the run.")


SAVING = ("A regret below 1 is a saving at equal quality (the best fixed K's mean gap at "
          "that budget); what it costs shows where regret is above 1 or ∞")


def summarize(regrets: Sequence[float]) -> dict[str, float]:
    """Worst and median regret over budgets."""
    arr = np.asarray(regrets, np.float64)
    return {"max": float(np.max(arr)), "median": float(np.median(arr))}


def fmt(x: float) -> str:
    """A regret for a table: two decimals, ``∞`` when never reached."""
    return "∞" if not np.isfinite(x) else f"{x:.2f}"


# --------------------------------------------------------------------------- records
# A run's record (generalization, synthetic budget mode) holds ``curves`` (per seed, or
# their mean as stored), ``fixed_k`` (a fixed K at the rule's learning rate), ``grid_k``
# (any point of the (learning rate, K) grid), ``lr_scale`` and, for a method told its
# budget, ``told_budget`` (one record a budget).


def off_lr(r: Mapping[str, Any]) -> bool:
    """A grid point off the rule's learning rate."""
    return bool(r.get("grid_k")) and r.get("lr_scale", 1.0) != 1.0


def grid_label(r: Mapping[str, Any]) -> str:
    """A grid point's name in the tables: ``x2 K=4`` (``K=4`` at the rule's lr)."""
    scale = r.get("lr_scale", 1.0)
    return (f"x{scale:g} " if scale != 1.0 else "") + f"K={r.get('grid_k') or r['fixed_k']}"


def envelopes(rs: Sequence[Mapping[str, Any]]) -> dict[str, tuple[np.ndarray, list[str]]]:
    """A problem's envelopes: ``fixed``, the best fixed K at the rule's learning rate, and
    ``grid``, the best (learning rate, K) point (present when the grid was run)."""
    fixed = {grid_label(r): np.mean(r["curves"], axis=0) for r in rs if r["fixed_k"]}
    grid = {grid_label(r): np.mean(r["curves"], axis=0) for r in rs
            if off_lr(r) and r["curves"]}  # stored without a curve: never the envelope
    out = {"fixed": envelope(fixed)}
    if grid:
        out["grid"] = envelope({**fixed, **grid})
    return out


def scored_curves(rs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per scored method (neither a fixed K nor a grid point), its mean curve for each
    budget: one curve, or for a method told its budget the run told each budget."""
    out: dict[str, Any] = {}
    for r in rs:
        if r["fixed_k"] or r.get("grid_k"):
            continue
        entry = out.setdefault(r["method"], {"curves": {}})
        entry["record"] = r  # told: the last (longest) run, for its K
        entry["curves"][r.get("told_budget")] = np.mean(r["curves"], axis=0)
    return out


def curve_at(curves: Mapping[Any, np.ndarray]):
    """``budget -> curve`` of :func:`scored_curves`' ``curves``: the run told that budget,
    or the one anytime run."""
    return (lambda b: curves[b]) if None not in curves else (lambda b: curves[None])


def plotted(rs: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The runs a figure or a final table shows: fixed K at the rule's lr, and every scored
    method once (a method told its budget: its run told the largest)."""
    last = {r["method"]: r for r in rs}
    return [r for r in rs if r["fixed_k"] or (not r.get("grid_k") and last[r["method"]] is r)]


DIGITS = 4  # significant digits of a stored mean gap


def compact(results: Sequence[Mapping[str, Any]],
            group: Callable[[Mapping[str, Any]], Any]) -> list[dict[str, Any]]:
    """The records as stored: each curve as its mean over the seeds (all the regrets and
    the figures read; per-seed final gaps and calls stay), no K curve for a grid point (its
    K is fixed), and no curve for a grid point off the rule's lr that is nowhere its
    ``group``'s grid envelope (it changes no envelope); mean gaps at :data:`DIGITS`
    significant digits (the 1% near-tie tolerance is far coarser)."""
    groups: dict[Any, list] = {}
    for r in results:
        groups.setdefault(group(r), []).append(r)
    on_envelope = {key: set(envelopes(rs).get("grid", ((), ()))[1])
                   for key, rs in groups.items() if any(r["fixed_k"] for r in rs)}
    return [{**r, "curves": [] if off_lr(r) and grid_label(r) not in on_envelope[group(r)]
             else [[float(f"{x:.{DIGITS}g}") for x in np.mean(r["curves"], axis=0)]],
             "k_curves": [] if r.get("grid_k") else [np.mean(r["k_curves"], axis=0).tolist()]}
            for r in results]
