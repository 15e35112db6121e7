"""Anytime evaluation: quality against oracle calls, the fixed-K envelope, query regret.

Shared by the benchmarks that compare methods at equal calls. A *curve* is a method's
mean quality (lower is better: a gap or a loss) over seeds, sampled on a common grid of
call counts. At a budget ``b``:

* the *envelope* ``E(b)`` is the best mean quality any fixed-K method reached within
  ``b`` calls (the best fixed K chosen in hindsight, per budget);
* a method's *query regret* is ``c / b``, with ``c`` the fewest calls on the grid at
  which its own mean quality is at least as good as ``E(b)`` (``inf`` if it never is
  within the run). Regret 1 means "as good as the best fixed K"; 0.5, "half its calls".

Calls may be counted from an ``origin`` (e.g. an objective switch): budgets and ``c``
are then both measured from it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

FRACTIONS = (1 / 64, 1 / 32, 1 / 16, 1 / 8, 1 / 4, 1 / 2, 1.0)  # budgets, of the run's


def call_grid(budget: float, budgets: Sequence[float], points: int = 400,
              origin: float = 0.0) -> np.ndarray:
    """Log-spaced call counts from ``origin`` to ``origin + budget``, ``budgets`` included."""
    span = np.geomspace(budget / 1024, budget, points)
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
           origin: float = 0.0) -> list[float]:
    """Query regret of ``curve`` against the envelope ``env`` at each budget.

    ``grid``, ``curve`` and ``env`` are aligned; ``budgets`` must be grid points.
    """
    grid = np.asarray(grid, np.float64)
    curve = np.where(np.isnan(curve), np.inf, np.asarray(curve, np.float64))
    out = []
    for b in budgets:
        target = env[np.searchsorted(grid, b)]
        reached = np.nonzero(curve <= target)[0]
        out.append(float((grid[reached[0]] - origin) / (b - origin)) if reached.size
                   else float("inf"))
    return out


def summarize(regrets: Sequence[float]) -> dict[str, float]:
    """Worst and median regret over budgets."""
    arr = np.asarray(regrets, np.float64)
    return {"max": float(np.max(arr)), "median": float(np.median(arr))}


def fmt(x: float) -> str:
    """A regret for a table: two decimals, ``∞`` when never reached."""
    return "∞" if not np.isfinite(x) else f"{x:.2f}"
