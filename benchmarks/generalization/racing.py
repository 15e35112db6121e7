"""Racing lanes: several (learning rate, K) lanes or ``tuning_free`` first steps raced
inside one budget by successive halving, simulated on stored curves and scored by the
generalization pages' own query regret. A measurement, not an optimizer
(``docs/design/tuning_free_rounds_8b_to_10.md``, "Design round 10").

The input is a generalization results file written with ``--keep-curves`` (every lane's
per-seed gap curve). A race on a problem and a seed:

* **told** a budget ``B`` (one race a budget of the table, as ``tuning_free:budget``):
  ``L`` lanes, ``R = ceil(log2 L) + 1`` rounds of equal calls; in round ``r`` the
  ``n_r`` survivors run side by side (one vmapped program) to ``c_r = c_{r-1} + run /
  (R n_r)`` calls each, ``run = B`` less the comparison calls; after every round but the
  last the survivors are compared (one call a survivor: its value at its point) and the
  better half (rounded up) goes on; the last round is the winner's alone. It never spends
  more than ``B``.
* **anytime** (untold): the same halving told ``B_j = B_0 2^j`` (``B_0`` =
  :data:`FIRST`), ``j = 0, 1, ...``, every lane back in the race at each phase and resumed
  where it stopped (its state kept: a lane's calls are only its new ones), until the
  problem's scored end (``2B``).

What the race returns at any moment (its curve) is its *incumbent*: the lane with the best
observed value at the last comparison (before any, the first lane), at the point it has
reached. Its gap there is the lane's stored gap at its calls so far (the curve's value at
the last grid point within them), which is what a shorter run of that lane gives only if
the lane's curve has the prefix property (:func:`prefix_mismatch`: true for a constant-lr
grid point and for untold ``tuning_free``, not for a run told its budget).

The value a comparison observes (``noise``): ``"oracle"``, the lane's true gap (exact for a
deterministic objective, whose value is the gap plus a constant); ``"seeds"``, on an
objective whose value depends on the data key (a minibatch, call noise) the true gap plus
Gaussian noise of the standard deviation between the seeds of that lane's gap at that many
calls (a model, not a measured one-batch spread; on deterministic objectives as
``"oracle"``). Each comparison costs one call a compared lane either way.

``python -m benchmarks generalization --race RESULTS`` is a command of the template
(:class:`benchmarks.experiment.Command`, :data:`COMMAND`): a run record, the results file
``OUT/racing_<set>.json.xz`` (every race's regret rows under both selections, the prefix
check's rows) and the page ``OUT/racing_<set>.md``, which ``--render`` writes again from
that file alone.

Example:
  python -m benchmarks generalization --race /tmp/race12/tuning/generalization_tuning.json.xz \
      --out /tmp/race12/tuning
  python -m benchmarks generalization --render /tmp/race12/tuning/racing_tuning.json.xz \
      --out /tmp/race12/tuning
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import anytime, common, flags, pages, presets
from benchmarks.experiment import Command, read_results
from benchmarks.generalization import experiment
from benchmarks.generalization.objectives import SETS
from benchmarks.record import RunRecord

FIRST = 250  # calls: the anytime race's first phase (B_0)
TF = "tuning_free"  # the lane names of tuning_free's first steps (x1/4, x1, x4 of 8e-3)
TF_STEPS = {"tuning_free:learning_rate=0.002": "tf x1/4", TF: "tf x1",
            "tuning_free:learning_rate=0.032": "tf x4"}


@dataclass(frozen=True)
class Race:
    """A racing configuration: its lanes (record names, :func:`lane_name`; the first is the
    incumbent before any comparison) and whether it is told each budget."""

    name: str
    lanes: tuple[str, ...]
    told: bool


# Candidates, scored on the tuning set; the one chosen there is the only one scored on the
# held-out set.
SETS_OF_LANES = {
    "K1 x0.5-x4": ("K=1", "x0.5 K=1", "x2 K=1", "x4 K=1"),
    "K1 x0.25-x4": ("K=1", "x0.25 K=1", "x0.5 K=1", "x2 K=1", "x4 K=1"),
    "K1,4 x1-x4": ("K=1", "x2 K=1", "x4 K=1", "K=4", "x2 K=4", "x4 K=4"),
    "tf x1/4,1,4": ("tf x1", "tf x1/4", "tf x4"),
    "tf + K1 x2,x4": ("tf x1", "x2 K=1", "x4 K=1"),
}
RACES = {f"{name}, {'told' if told else 'anytime'}": Race(
    f"race {name}, {'told' if told else 'anytime'}", lanes, told)
    for name, lanes in SETS_OF_LANES.items() for told in (False, True)}
NOISE = ("oracle", "seeds")
REPS = 8  # noise draws a cell (seeds selection)


def lane_name(r: Mapping[str, Any]) -> str:
    """A record's lane name: a grid point's label (``x2 K=1``), ``tf x4`` for a
    ``tuning_free`` first step, else its method."""
    if r.get("grid_k") or r.get("fixed_k"):
        return anytime.grid_label(r)
    return TF_STEPS.get(r["method"], r["method"]) if r.get("told_budget") is None else ""


def value_at(grid: np.ndarray, curve: np.ndarray, calls: float) -> float:
    """A lane's gap after ``calls`` calls: its curve at the last grid point within them
    (the first point's value before it; NaN reads ``inf``)."""
    i = max(int(np.searchsorted(grid, calls, side="right")) - 1, 0)
    x = float(curve[min(i, len(curve) - 1)])
    return x if np.isfinite(x) else math.inf


@dataclass
class Timeline:
    """A race's calls: ``(t0, t1, p0, p1, incumbent)`` segments (total calls from ``t0``
    to ``t1``, every lane's calls going from ``p0`` to ``p1`` linearly, the incumbent
    during it), the calls spent, and the comparisons made."""

    segments: list
    spent: float = 0.0
    compared: int = 0  # calls spent on comparisons

    def incumbent_calls(self, t: float) -> tuple[int, float]:
        """The incumbent at total calls ``t`` and the calls it has made (past the end: the
        last segment's)."""
        for t0, t1, p0, p1, inc in self.segments:
            if t <= t1:
                f = 1.0 if t1 <= t0 else max(t - t0, 0.0) / (t1 - t0)
                return inc, float(p0[inc] + f * (p1[inc] - p0[inc]))
        t0, t1, p0, p1, inc = self.segments[-1]
        return inc, float(p1[inc])


def halving(observe: Callable[[int, float], float], lanes: int, budget: float,
            timeline: Timeline, progress: np.ndarray, incumbent: int) -> int:
    """Successive halving told ``budget`` calls on top of ``timeline`` (lanes resumed at
    ``progress``, updated in place); returns the winner. ``observe(lane, calls)`` is the
    value a comparison sees."""
    rounds = math.ceil(math.log2(lanes)) + 1 if lanes > 1 else 1
    alive = list(range(lanes))
    sizes = [math.ceil(lanes / 2 ** r) for r in range(rounds)]
    run = budget - sum(sizes[:-1])  # calls for the lanes, the comparisons' taken out
    target = 0.0
    for r, n in enumerate(sizes):
        target += run / (rounds * n)
        p0 = progress.copy()
        for i in alive:
            progress[i] = max(progress[i], target)
        cost = float(np.sum(progress - p0))
        timeline.segments.append((timeline.spent, timeline.spent + cost, p0, progress.copy(),
                                  incumbent))
        timeline.spent += cost
        if r == rounds - 1:
            break
        seen = {i: observe(i, progress[i]) for i in alive}
        keep = sorted(alive, key=lambda i: (seen[i], i))[:sizes[r + 1]]
        incumbent = keep[0]
        timeline.segments.append((timeline.spent, timeline.spent + n, progress.copy(),
                                  progress.copy(), incumbent))
        timeline.spent += n
        timeline.compared += n
        alive = sorted(keep)
    return alive[0]


def race_timeline(observe: Callable[[int, float], float], lanes: int, budget: float | None,
                  end: float) -> Timeline:
    """The race's timeline: told ``budget`` (one halving), or anytime (``budget`` None:
    doubling phases from :data:`FIRST` until ``end`` calls are spent)."""
    timeline, progress = Timeline([]), np.zeros(lanes)
    if budget is not None:
        halving(observe, lanes, budget, timeline, progress, 0)
        return timeline
    phase, incumbent = float(FIRST), 0
    while timeline.spent < end:
        incumbent = halving(observe, lanes, phase, timeline, progress, incumbent)
        phase *= 2
    return timeline


def race_curve(grid: np.ndarray, curves: Sequence[np.ndarray], timeline: Timeline
               ) -> np.ndarray:
    """The race's gap at every grid point: its incumbent's gap at the calls it has made
    (past a told race's end: its last value)."""
    out = []
    for t in grid:
        inc, calls = timeline.incumbent_calls(t)
        out.append(value_at(grid, curves[inc], calls))
    return np.asarray(out)


def observer(grid: np.ndarray, curves: Sequence[np.ndarray], spread: Sequence[np.ndarray] | None,
             rng: np.random.Generator) -> Callable[[int, float], float]:
    """What a comparison sees of lane ``i`` after ``calls``: its gap, plus Gaussian noise of
    the lane's spread between seeds there when ``spread`` is given."""
    def observe(i: int, calls: float) -> float:
        x = value_at(grid, curves[i], calls)
        return x + float(rng.standard_normal()) * value_at(grid, spread[i], calls) \
            if spread is not None and np.isfinite(x) else x
    return observe


def prefix_mismatch(short: Mapping[str, Any], long: Mapping[str, Any]) -> float:
    """The largest relative difference between two runs of one lane and seeds, the shorter
    one's whole curve (up to the calls it went to) against the longer one's at the same
    call counts: 0 when the shorter run is a prefix of the longer."""
    grids = [experiment.grid_of(r["budget"]) for r in (short, long)]
    end = experiment.runs_to(short["budget"], experiment.is_envelope(
        short["fixed_k"], short.get("grid_k")), short.get("told_budget") is not None)
    end = short.get("told_budget") or end
    common_calls = np.intersect1d(grids[0][grids[0] <= end], grids[1])
    a, b = (np.asarray(r["curves"], np.float64)[:, np.searchsorted(g, common_calls)]
            for r, g in zip((short, long), grids))
    with np.errstate(invalid="ignore"):  # equal infinities differ by 0
        diff = np.where(a == b, 0.0, np.abs(a - b) / np.maximum(np.abs(b), 1e-30))
    return float(np.max(np.nan_to_num(diff, nan=np.inf)))


def prefix_rows(short: Sequence[Mapping[str, Any]], long: Sequence[Mapping[str, Any]]
                ) -> list[list[str]]:
    """The prefix check on two runs of the same lanes, ``short`` with a smaller largest
    budget than ``long``: every run of ``short`` not told its budget against the same
    lane's run in ``long``, and every told run of ``long`` against its run told the
    largest budget (``[problem, lane, shorter run, largest relative difference]``)."""
    def key(r):
        return r["problem"], r["method"], r.get("told_budget")

    longest = {key(r)[:2]: r for r in long if r.get("told_budget") is not None}
    by_key = {key(r): r for r in long}
    pairs = [(r, by_key[key(r)], f"{r['budget']:,} calls") for r in short
             if r.get("told_budget") is None and key(r) in by_key]
    pairs += [(r, longest[key(r)[:2]], f"told {r['told_budget']:,}") for r in long
              if r.get("told_budget") is not None and r is not longest[key(r)[:2]]]
    return [[a["problem"], lane_name(a) or a["method"], what, f"{prefix_mismatch(a, b):.3g}"]
            for a, b, what in pairs]


def stochastic(problem: str, set_name: str) -> bool:
    """Whether the problem's value depends on the data key (minibatch, call noise)."""
    import jax
    import jax.numpy as jnp

    p = SETS[set_name][problem]
    x = jnp.full(min(p.dim, 100_000), 0.3)
    return float(p.fn(x, jax.random.key(0))) != float(p.fn(x, jax.random.key(1)))


def race_records(race: Race, rs: Sequence[Mapping[str, Any]], noisy: bool,
                 rng: np.random.Generator) -> list[dict[str, Any]]:
    """A race's records on one problem (one a budget when told), as the harness writes a
    scored method's, from the problem's records ``rs`` (per-seed curves)."""
    by_name = {lane_name(r): r for r in rs}
    missing = [n for n in race.lanes if n not in by_name]
    if missing:
        raise ValueError(f"{race.name}: no curves for lanes {missing} on {rs[0]['problem']}")
    lanes = [np.asarray(by_name[n]["curves"], np.float64) for n in race.lanes]
    budget = rs[0]["budget"]
    grid = experiment.grid_of(budget)
    spread = ([np.nan_to_num(np.nanstd(np.where(np.isfinite(c), c, np.nan), axis=0))
               for c in lanes] if noisy else None)
    seeds = len(lanes[0])
    out = []
    for told in experiment.budgets_of(budget) if race.told else (None,):
        curves, compared = [], []
        for s in range(seeds):
            observe = observer(grid, [c[s] for c in lanes], spread, rng)
            timeline = race_timeline(observe, len(lanes), told, grid[-1])
            curves.append(race_curve(grid, [c[s] for c in lanes], timeline).tolist())
            compared.append(timeline.compared)
        out.append({"problem": rs[0]["problem"], "method": race.name, "label": race.name,
                    "fixed_k": None, "grid_k": None, "lr_scale": 1.0, "told_budget": told,
                    "seeds": rs[0]["seeds"], "budget": budget, "curves": curves,
                    "k_curves": np.zeros((seeds, len(grid))).tolist(), "k_changes": [0] * seeds,
                    "compared_calls": compared})
    return out


def score(results: Sequence[Mapping[str, Any]], races: Sequence[Race], noise: str,
          set_name: str, reps: int, seed: int = 0) -> list[dict[str, Any]]:
    """Each race's regret rows (:func:`experiment.regret_rows`, against the page's own
    envelopes from the compacted records), per problem; with noise, each cell is the
    median over ``reps`` draws. The scored methods' rows of the file come too."""
    rng = np.random.default_rng(seed)
    base = experiment.compact(list(results))
    rows = [r for r in experiment.regret_rows(base) if r["method"] != "best_fixed_k"]
    for name in dict.fromkeys(r["problem"] for r in results):
        rs = [r for r in results if r["problem"] == name]
        noisy = noise == "seeds" and stochastic(name, set_name)
        mine = [r for r in base if r["problem"] == name]
        for race in races:
            draws = [next(row for row in experiment.regret_rows(
                mine + experiment.compact(race_records(race, rs, noisy, rng)))
                if row["method"] == race.name) for _ in range(reps if noisy else 1)]
            row = dict(draws[0])
            for key in ("regret", "regret_grid"):
                row[key] = np.median([d[key] for d in draws], axis=0).tolist()
                suffix = "" if key == "regret" else "_grid"
                row.update({k + suffix: v for k, v in anytime.summarize(row[key]).items()})
            rows.append(row)
    order = {name: i for i, name in enumerate(dict.fromkeys(r["problem"] for r in results))}
    return sorted(rows, key=lambda r: order[r["problem"]])


def table(rows: Sequence[Mapping[str, Any]], key: str) -> str:
    """Per problem and method, the regret at each budget against ``key``'s envelope."""
    width = max(len(r["budgets"]) for r in rows)
    budgets = next(r["budgets"] for r in rows if len(r["budgets"]) == width)
    body = [[r["problem"], r["label"], *(anytime.fmt(x) for x in r[key]),
             *([""] * (width - len(r[key])))] for r in rows]
    return pages.table(["problem", "method", *(f"{b:,.0f}" for b in budgets)], body)


def summary(rows: Sequence[Mapping[str, Any]], methods: Sequence[str] | None = None) -> str:
    """Per method (of ``methods`` only, if given), median and worst over the cells against
    both envelopes."""
    body = []
    for method, stats in experiment.overall(list(rows)).items():
        if methods is not None and method not in methods:
            continue
        grid = np.concatenate([r["regret_grid"] for r in rows if r["method"] == method])
        body.append([stats["label"], str(stats["cells"]), anytime.fmt(stats["median_grid"]),
                     anytime.fmt(stats["max_grid"]), str(int(np.sum(grid > 2.0))),
                     str(int(np.sum(~np.isfinite(grid)))), anytime.fmt(stats["median"]),
                     anytime.fmt(stats["max"]), ", ".join(stats["above_1_grid"]) or "none"])
    return pages.table(["method", "cells", "median vs grid", "worst vs grid",
                        "cells > 2 vs grid", "∞ vs grid", "median vs fixed K",
                        "worst vs fixed K", "problems above 1 vs grid"], body)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The generalization command's racing options (``--race RESULTS``)."""
    parser.add_argument("--race", type=Path, metavar="RESULTS",
                        help="simulate racing lanes on this results file (written with "
                             "--keep-curves) and write OUT/racing_<set>.md; runs nothing")
    parser.add_argument("--races", nargs="+", choices=list(RACES), metavar="RACE",
                        help=f"with --race: the races scored (default all: {'; '.join(RACES)})")
    parser.add_argument("--prefix", type=Path, nargs=2, metavar=("SHORT", "LONG"),
                        help="with --race: the prefix check (prefix_rows) on two results "
                             "files of the same lanes with --keep-curves, SHORT run to a "
                             "smaller --budget")
    parser.add_argument("--reps", type=flags.positive_int,  # unset: not in a run's record
                        help=f"with --race: noise draws a cell, its median scored "
                             f"(default {REPS})")


@dataclass(frozen=True)
class Config:
    """A race scoring: the results file raced (written with ``--keep-curves``), its set, the
    races, the noise draws a cell, and the prefix check's two files (or none)."""

    source: str
    set: str
    races: tuple[str, ...]
    reps: int = REPS
    prefix: tuple[str, ...] = ()


def configs(args: argparse.Namespace) -> list[Config]:
    """The scoring of ``--race`` (its file read and checked before anything is scored)."""
    data = experiment_read(args.race)
    return [Config(str(args.race), data["config"]["set"], tuple(args.races or RACES),
                   args.reps or REPS, tuple(map(str, args.prefix or ())))]


def compute(config: Config, args: argparse.Namespace, _) -> dict[str, list]:
    """Every race's regret rows under both selections (:data:`NOISE`) and the prefix
    check's rows."""
    data = experiment_read(Path(config.source))
    races = [RACES[n] for n in config.races]
    scored = [{**row, "selection": noise} for noise in NOISE
              for row in score(data["results"], races, noise, config.set, config.reps)]
    prefix = (prefix_rows(*(experiment_read(Path(p))["results"] for p in config.prefix))
              if config.prefix else [])
    return {"results": scored, "prefix": prefix}


def stored(config: Config, computed: dict[str, list], record: RunRecord) -> dict[str, Any]:
    return {"record": record.as_dict(), "config": presets.as_dict(config), **computed}


def _floats(value: Any) -> Any:
    """``value`` with the infinities a results file stores as ``"inf"`` / ``"-inf"``
    (:func:`benchmarks.common.to_jsonable`) read back as floats."""
    if isinstance(value, dict):
        return {k: _floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_floats(v) for v in value]
    return float(value) if value in ("inf", "-inf") else value


def page(config: Config, data: dict[str, Any], args: argparse.Namespace) -> Path:
    """The racing page of a results file: the races against ``tuning_free`` (the answer,
    oracle selection), then every row under both selections and the prefix check."""
    rows = {noise: [_floats(r) for r in data["results"] if r["selection"] == noise]
            for noise in NOISE}
    races = [RACES[n].name for n in config.races]
    parts = []
    for noise, mine in rows.items():
        parts += [f"## Selection: {noise}", summary(mine),
                  "### Against the (lr, K) grid's envelope", table(mine, "regret_grid"),
                  "### Against the fixed-K envelope", table(mine, "regret")]
    if data.get("prefix"):
        parts += ["## Prefix check", pages.table(
            ["problem", "lane", "shorter run", "largest relative difference"], data["prefix"])]
    record = RunRecord.from_dict(data["record"])
    path = args.report or args.out / f"racing_{config.set}.md"
    return pages.page(
        path, f"Racing lanes on the {config.set} set (simulated)",
        question="Would racing several lanes inside one budget (successive halving, simulated "
                 "on the stored curves of a generalization run) beat one `tuning_free` run, "
                 "in query regret against the (learning rate, K) grid and the best fixed K?",
        answer=summary(rows["oracle"], [*races, TF]) + "\n\n" + pages.columns({
            "selection": "oracle: a comparison sees each lane's true gap (the section "
                         "Selection: seeds below has the noisy one)",
            "cells > 2, ∞ vs grid": "cells of regret above 2 and never reached"}),
        run=record.command,
        setup="\n".join([*pages.record_lines(record), pages.bullets([
            f"Raced: `{config.source}` ({config.set} set), its records' per-seed curves.",
            f"Races: {', '.join(races)}; {config.reps} noise draws a cell under the seeds "
            "selection (its median scored).",
            "Each comparison costs one call a compared lane."])]),
        sections=parts, command="generalization")


COMMAND = Command(
    "generalization", configs, compute, stored,
    lambda config, args: args.out / f"racing_{config.set}{common.RESULTS}",
    lambda data: presets.from_dict(Config, data["config"]), page,
    skip=("render", "preset", "set", "problems", "methods", "seeds", "budget", "lr_scales",
          "keep_curves", "workers"))
"""``generalization --race``, on the command template."""


def is_racing(path: Path) -> bool:
    """Whether ``path`` is a racing results file (one :data:`COMMAND` wrote)."""
    return "races" in flags.read_results(path, "--render").get("config", {})


def experiment_read(path: Path) -> dict[str, Any]:
    """The results file, which must hold every lane's per-seed curves."""
    data = read_results(path, "--race")
    if not all(len(r["curves"]) == len(r["seeds"]) for r in data["results"]):
        flags.fail(f"{path} holds no per-seed curves: write it with --keep-curves")
    return data
