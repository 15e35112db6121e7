"""The speed benchmark's timing protocol, one for every section (compare, dims, seeds,
compile, the parts of a step), meant to make the ratios of two runs of the same command
agree, and to show how far they do:

* interleaved rounds: each round measures every case once, in an order rotated by one
  from round to round (:func:`rotation`), so that no case always runs first or after the
  same neighbour; the 1-minute load average is recorded before every round;
* every measurement takes wall time and the process's CPU time (:func:`timed`), and
  uses the run's basis (:func:`basis`): CPU time when the process is pinned to one core
  (on a shared machine it leaves out the waits for that core; on an idle core the two
  agree), wall time otherwise (threads on several cores, or an accelerator whose work
  the host's CPU time does not count); a time is the minimum over rounds (the
  measurement least disturbed by other processes); the tables and goals of the compare
  and dims sections use the ratio of two such minima, and their repeatability check also
  gives each ratio paired within a round, the median over rounds (:func:`round_ratio`),
  which the compile section states for every ratio (:mod:`benchmarks.overhead.compile`);
* the core: the least busy of the process's cores, measured just before pinning
  (:func:`idlest_core`; other jobs pinned to the first core do not share it), its busy
  share recorded;
* repeatability: two runs of the same command, their ratios compared
  (:func:`ratio_differences`); the pages show both runs (``--previous``).
"""

from __future__ import annotations

import statistics
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
                loads: list | None = None, desc: str | None = "timing rounds") -> None:
    """``measure(case)`` for every case in each of ``rounds`` rounds (order rotated),
    appending the load average before each round to ``loads``; a progress bar named
    ``desc`` (none for ``None``)."""
    for r in range(rounds) if desc is None else progress(range(rounds), desc=desc):
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


def timed_round(case: Any, fn: Callable[[], T]) -> T:
    """``fn()``, its wall and CPU seconds appended to ``case.times`` and ``case.cpu_times``
    (one round of a timed case)."""
    out, wall, cpu = timed(fn)
    case.times.append(wall)
    case.cpu_times.append(cpu)
    return out


def busy_shares(cores: Sequence[int], seconds: float = 1.0,
                stat: str = "/proc/stat") -> dict[int, float]:
    """The share of ``seconds`` each of ``cores`` spent busy (not idle nor waiting for
    I/O), from the kernel's counters; ``{}`` where they cannot be read."""
    def counters() -> dict[int, tuple[int, int]]:
        out = {}
        with open(stat) as f:
            for line in f:
                name, *fields = line.split()
                if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cores:
                    ticks = [int(x) for x in fields]
                    out[int(name[3:])] = (sum(ticks) - ticks[3] - ticks[4], sum(ticks))
        return out

    try:
        before = counters()
        time.sleep(seconds)
        after = counters()
    except OSError:
        return {}
    return {c: (after[c][0] - before[c][0]) / max(after[c][1] - before[c][1], 1)
            for c in before if c in after}


def idlest_core(cores: Sequence[int], shares: Mapping[int, float]) -> int:
    """The core of ``cores`` with the smallest busy share (the first one on a tie or
    without shares)."""
    return min(cores, key=lambda c: shares.get(c, 0.0))


def basis(pinned: bool) -> str:
    """The clock of the statistic: ``"cpu"`` on one pinned core, ``"wall"`` otherwise."""
    return "cpu" if pinned else "wall"


def round_ratio(times: Sequence[float], reference: Sequence[float]) -> float:
    """The median over rounds of ``times[i] / reference[i]``, each pair timed in the same
    round: a slow phase of a shared machine (minutes long, slowing every program by up to
    40% here) slows both, where the ratio of two minima compares rounds of different
    phases. Rounds missing from either (a record of another length) fall back to the
    ratio of the minima."""
    if not times or not reference:
        raise ValueError("round_ratio needs at least one round of each program.")
    if len(times) != len(reference):
        return min(times) / min(reference)
    return float(statistics.median(t / r for t, r in zip(times, reference)))


def ratio_differences(now: Mapping[K, float], before: Mapping[K, float]) -> dict[K, float]:
    """``|now / before - 1|`` for every ratio of both runs (keys of one only are left out)."""
    return {k: abs(now[k] / before[k] - 1.0) for k in now if k in before}


def repeatability(differences: Mapping[Any, float], name: Callable[[Any], str] = str,
                  what: str = "ratios") -> str:
    """One sentence: the largest difference between two runs' ``what``, against :data:`GOAL`."""
    worst = max(differences, key=differences.__getitem__)
    top = differences[worst]
    return (f"Repeatability: the {len(differences)} {what} of this run and the previous one "
            f"differ by at most {100 * top:.1f}% (goal ≤ {100 * GOAL:.0f}%: "
            f"{'met' if top <= GOAL else 'not met'}), the largest for {name(worst)}.")
