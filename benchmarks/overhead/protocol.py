"""The speed benchmark's timing protocol, one for every section (compare, dims, seeds,
compile, the parts of a step), so that the ratios of two runs of the same command agree:

* interleaved rounds: each round measures every case once, in an order rotated by one
  from round to round (:func:`rotation`), so that no case always runs first or after the
  same neighbour; the 1-minute load average is recorded before every round;
* every measurement takes wall time and the process's CPU time (:func:`timed`); the
  statistic is the minimum over rounds (the measurement least disturbed by other
  processes) of the run's basis (:func:`basis`): CPU time when the process is pinned to
  one core (on a shared machine it leaves out the waits for that core; on an idle core
  the two agree), wall time otherwise (threads on several cores, or an accelerator whose
  work the host's CPU time does not count);
* repeatability: two runs of the same command, their ratios compared
  (:func:`ratio_differences`); the pages show both runs (``--previous``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, TypeVar

from benchmarks import record as run_record
from benchmarks.common import progress

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)
GOAL = 0.10  # the largest relative difference of a ratio between two runs (issue 36)


def rotation(n: int, r: int) -> list[int]:
    """The order in which round ``r`` measures ``n`` cases: ``r mod n`` first."""
    return [(r + i) % n for i in range(n)]


def interleaved(cases: Sequence[T], rounds: int, measure: Callable[[T], Any],
                loads: list | None = None, desc: str = "timing rounds") -> None:
    """``measure(case)`` for every case in each of ``rounds`` rounds (order rotated),
    appending the load average before each round to ``loads``."""
    for r in progress(range(rounds), desc=desc):
        if loads is not None:
            loads.append(run_record.load_average())
        for i in rotation(len(cases), r):
            measure(cases[i])


def timed(fn: Callable[[], T]) -> tuple[T, float, float]:
    """``fn()``, its wall seconds and the process's CPU seconds (``fn`` blocks until its
    work is done)."""
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def basis(pinned: bool) -> str:
    """The clock of the statistic: ``"cpu"`` on one pinned core, ``"wall"`` otherwise."""
    return "cpu" if pinned else "wall"


def ratio_differences(now: Mapping[K, float], before: Mapping[K, float]) -> dict[K, float]:
    """``|now / before - 1|`` for every ratio of both runs (keys of one only are left out)."""
    return {k: abs(now[k] / before[k] - 1.0) for k in now if k in before}


def repeatability(differences: Mapping[Any, float], name: Callable[[Any], str] = str) -> str:
    """One sentence: the largest difference between two runs' ratios, against :data:`GOAL`."""
    worst = max(differences, key=differences.__getitem__)
    top = differences[worst]
    return (f"Repeatability: the {len(differences)} ratios of this run and the previous one "
            f"differ by at most {100 * top:.1f}% (goal ≤ {100 * GOAL:.0f}%: "
            f"{'met' if top <= GOAL else 'not met'}), the largest for {name(worst)}.")
