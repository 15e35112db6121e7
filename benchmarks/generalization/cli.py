"""Generalization: the query regret of the methods run without tuning (``tuning_free``,
``auto_k``, the untuned baselines) against the (learning rate, K) grid and the best fixed K
in hindsight, on a held-out set of objectives never used to choose a default (and on the
tuning set).

Presets: ``smoke`` (seconds, for tests: one problem, 10^3 calls, one seed), ``quick`` (4
held-out problems, 10^4 calls, 2 seeds: about 3 min on 2 cores),
``full`` (the 14 held-out problems, 10^3 to 10^6 calls, 3 seeds), ``tuning`` (the tuning
set at the same scale). See :mod:`benchmarks.generalization.objectives` for both sets.

Examples:
  python -m benchmarks generalization --preset smoke --out /tmp/generalization   # seconds
  python -m benchmarks generalization --preset quick
  python -m benchmarks generalization --preset full --out docs/results --workers 2
  python -m benchmarks generalization --preset tuning --budget 100000 --methods auto_k:growth=0.5
  python -m benchmarks generalization --render docs/results/generalization_heldout.json.xz
  python -m benchmarks generalization --preset tuning --keep-curves --out OUT
  python -m benchmarks generalization --race OUT/generalization_tuning.json.xz --out OUT
      (racing lanes simulated on a run made with --keep-curves: OUT/racing_tuning.json.xz
      and OUT/racing_tuning.md; --render OUT/racing_tuning.json.xz writes the page again)

Writes OUT/generalization_<set>.json.xz, PNG figures under OUT/generalization/ and the
Markdown report OUT/generalization_<set>.md.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks import common, flags, presets
from benchmarks.experiment import Command, execute, split
from benchmarks.experiment import main as run_command
from benchmarks.generalization import experiment, racing, report
from benchmarks.generalization.objectives import SETS
from benchmarks.record import RunRecord
from benchmarks.methods import SYNTHETIC as REGISTRY
from benchmarks.methods import parse_methods


def add_arguments(parser: argparse.ArgumentParser) -> None:
    flags.add_preset(parser, {
        "smoke": "one problem, 10^3 calls, one seed (20 s of CPU time; 132 s wall at load 14)",
        "quick": "4 held-out problems, 10^4 calls, 2 seeds (about 3 min on 2 cores)",
        "full": "the held-out page: 14 problems, 10^3 to 10^6 calls, 3 seeds (the page, 13 "
                "problems capped at 10^4 calls: 20-46 min wall with --workers 1, as recorded "
                "on it)",
        "tuning": "the tuning set at the full scale (its page, capped at 10^5 calls: 19-42 "
                  "min wall with --workers 1)"}, default="quick")
    parser.add_argument("--set", choices=tuple(SETS), help="problem set (default: the preset's)")
    parser.add_argument("--problems", nargs="+", metavar="NAME",
                        help="problems of the set (default: the preset's)")
    flags.add_methods(parser, REGISTRY.bases)
    flags.add_seeds(parser)
    parser.add_argument("--budget", type=flags.positive_int,
                        help="cap on every problem's largest budget, in calls")
    parser.add_argument("--lr-scales", type=float, nargs="+", metavar="S",
                        help="each fixed K also runs at these multiples of the rule's lr, "
                             "the (lr, K) grid (default: the preset's)")
    parser.add_argument("--keep-curves", action="store_true",
                        help="store every record's per-seed curves, every grid point's "
                             "included (the input of benchmarks.generalization.racing); the "
                             "regrets and the page are the same")
    flags.add_outputs(parser, Path("out"), "OUT/generalization_<set>.md")
    flags.add_workers(parser)
    racing.add_arguments(parser)


def config_of(args: argparse.Namespace) -> experiment.Config:
    config = experiment.preset(args.preset, args.set)
    if args.problems:
        unknown = sorted(set(args.problems) - set(SETS[config.set]))
        if unknown:
            flags.fail(f"--problems: {', '.join(unknown)} not in the {config.set} set "
                       f"({', '.join(SETS[config.set])})")
    methods = [v.name for v in parse_methods(args.methods)] if args.methods else None
    if methods and not any(experiment.variant(m).fixed_k for m in methods):
        flags.fail("--methods needs at least one fixed-K method (radazo:k=K), the envelope")
    if args.budget and args.budget < experiment.FIRST_BUDGET:
        flags.fail(f"--budget must be >= {experiment.FIRST_BUDGET} (the smallest budget scored)")
    if args.lr_scales and (1.0 not in args.lr_scales or min(args.lr_scales) <= 0):
        flags.fail("--lr-scales must be positive and include 1 (the rule's lr)")
    fields = argparse.Namespace(problems=args.problems, methods=methods,
                                seeds=flags.seeds(args.seeds), budget=args.budget,
                                lr_scales=tuple(args.lr_scales) if args.lr_scales else None)
    return presets.from_args(config, fields)


def _derived(results: list) -> tuple[list, list, dict]:
    """The stored records (:func:`experiment.compact`), their regret rows and summary."""
    results = experiment.compact(results)
    rows = experiment.regret_rows(results)
    return results, rows, experiment.overall(rows)


def stored(config, computed: tuple[list, bool], record: RunRecord) -> dict:
    results, keep = computed  # keep: --keep-curves (the records as run, not compacted)
    compacted, rows, summary = _derived(results)
    return {"record": record.as_dict(), "config": presets.as_dict(config), "regret": rows,
            "summary": summary, "results": results if keep else compacted}


def page(config, data: dict, args) -> Path:
    # A run's page shows what it stored; --render derives it again from the stored records.
    results, rows, summary = (_derived(data["results"]) if args.render
                              else (data["results"], data["regret"], data["summary"]))
    stem = f"generalization_{config.set}"
    md = report.page(config, results, rows, summary, RunRecord.from_dict(data["record"]),
                     args.out, args.report or args.out / f"{stem}.md")
    print(f"\n{config.set} -> {md}")
    print(report.summary_table(summary))
    return md


COMMAND = Command(
    "generalization", lambda args: [config_of(args)],
    lambda config, args, _: (execute(experiment.run, split(config, "problems", config.methods),
                                     args.workers, f"generalization {config.set}",
                                     cost=experiment.cost), args.keep_curves),
    stored, lambda config, args: args.out / f"generalization_{config.set}{common.RESULTS}",
    lambda data: presets.from_dict(experiment.Config, data["config"]), page)


def main(args: argparse.Namespace) -> int:
    racing_file = args.race or (args.render and racing.is_racing(args.render))
    return run_command(racing.COMMAND if racing_file else COMMAND, args)
