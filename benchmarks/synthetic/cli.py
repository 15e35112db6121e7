"""Synthetic benchmark: ZoAQ against its baselines on Quadratic, Cubic, Levy, Rosenbrock
and Ackley (the paper's Section 5.1), and the appendix ablations.

Two modes: ``steps`` (the paper's protocol: every method runs T steps) and ``budget``
(every method runs until it has spent the same number of oracle calls; adaptive methods
are scored by their query regret against the best fixed K in hindsight).

Examples:
  python -m benchmarks synthetic                      # quick preset, about a minute
  python -m benchmarks synthetic --preset paper --out docs/results
  python -m benchmarks synthetic --ablation reset --preset paper --out docs/results
  python -m benchmarks synthetic --mode budget --preset paper --out docs/results
  python -m benchmarks synthetic --mode budget --ablation switch --preset paper
  python -m benchmarks synthetic --preset paper --seeds 0-999 --workers 1   # 1,000 seeds
  python -m benchmarks synthetic --methods zoaq radazo:k=2 zoaq:backbone=zo_adamm
  python -m benchmarks synthetic --render docs/results/synthetic.json.xz --out docs/results

Writes DIR/synthetic.json.xz (synthetic_<ablation>.json.xz, synthetic_budget*.json.xz; see
benchmarks.common.write_json), PNG figures under DIR/synthetic/, and the Markdown report
DIR/synthetic.md (and the like; --report names it for a single protocol). Methods are
specs of benchmarks.methods: zoaq, radazo (R-AdaZO K=10), radazo:k=2, zo_adamm, statzo,
zoar, auto_k, zoaq:reset=half ...
"""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks import common, experiment, flags, pool, presets
from benchmarks.record import RunRecord
from benchmarks.synthetic import budget as budgets
from benchmarks.synthetic import protocol as protocols
from benchmarks.synthetic import report, runner
from benchmarks.methods import SYNTHETIC as REGISTRY
from benchmarks.methods import parse_methods


def add_arguments(parser: argparse.ArgumentParser) -> None:
    flags.add_preset(parser, {
        "smoke": "d = 10, 40 steps, 2 seeds, zoaq and radazo (35 s of CPU time; 231 s wall "
                 "at load 14)",
        "quick": "d = 100, 4,000 steps, 3 seeds (about a minute on 2 cores)",
        "paper": "the paper's protocol: d = 100, 60,000 steps, 5 seeds (84 s on 2 cores "
                 "for the main comparison, 3.3 min "
                 "for --ablation all; --mode budget: 16.7 min on one core)"}, default="quick")
    parser.add_argument("--mode", choices=("steps", "budget"), default="steps",
                        help="steps: equal steps (the paper's protocol); budget: equal calls")
    parser.add_argument("--ablation", choices=(*protocols.ABLATIONS, "auto_k", "all"),
                        help="run an ablation instead of the main comparison (budget mode: "
                             "switch or auto_k)")
    parser.add_argument("--functions", nargs="+", choices=protocols.FUNCTIONS,
                        help="objectives (default: the preset's; least_squares: budget mode)")
    flags.add_methods(parser, REGISTRY.bases)
    flags.add_seeds(parser)
    parser.add_argument("--steps", type=flags.positive_int,
                        help="steps per run (default: the preset's)")
    parser.add_argument("--budget", type=flags.positive_int,
                        help="budget mode: oracle calls per run (default: the preset's)")
    flags.add_outputs(parser, Path("out"), "OUT/synthetic*.md")
    flags.add_workers(parser)


def _check(args: argparse.Namespace) -> None:
    """Refuses combinations that make no sense, before any computation."""
    budget = args.mode == "budget"
    if budget and args.steps:
        flags.fail("--steps applies to the steps mode; use --budget")
    if not budget and args.budget:
        flags.fail("--budget applies to --mode budget")
    if budget and args.ablation not in (None, "switch", "auto_k", "all"):
        flags.fail("budget mode has the ablations switch and auto_k")
    if not budget and args.ablation == "auto_k":
        flags.fail("the auto_k ablation is a budget-mode ablation (--mode budget)")
    if not budget and args.functions and "least_squares" in args.functions:
        flags.fail("least_squares needs a data key a step: use --mode budget")
    if args.ablation and args.methods:
        flags.fail("--methods applies to the main comparison, not to ablations")
    if args.functions and args.ablation in ("switch", "all"):
        flags.fail("--functions would replace the objective switch (Rosenbrock then Levy) of "
                   "the switch ablation; leave it out")


def protocols_of(args: argparse.Namespace) -> list:
    """The protocols a command runs: the preset's, overridden by the options named like
    their fields (``--functions``, ``--seeds``, ``--budget``, ``--methods``)."""
    _check(args)
    variants = parse_methods(args.methods) if args.methods else None
    seeds = flags.seeds(args.seeds)
    if args.mode == "budget":
        names = {None: ["budget"], "switch": ["budget_switch"], "auto_k": ["budget_auto_k"],
                 "all": ["budget_switch", "budget_auto_k"]}[args.ablation]
        bases = [protocols.budget(n, args.preset) for n in names]
    elif args.ablation is None:
        bases = [protocols.main(args.preset)]
    else:
        names = protocols.ABLATIONS if args.ablation == "all" else [args.ablation]
        bases = [protocols.ablation(n, args.preset) for n in names]
    fields = argparse.Namespace(functions=args.functions, budget=args.budget, seeds=seeds,
                                variants=variants)
    chosen = [presets.from_args(p, fields) for p in bases]
    if args.steps:  # also shortens the log period (see protocol.restrict)
        chosen = [protocols.restrict(p, steps=args.steps) for p in chosen]
    if args.report and len(chosen) > 1:
        flags.fail("--report names one page; this command writes one per protocol")
    return chosen


def stored(p, results, record: RunRecord) -> dict:
    """The results file of a protocol of either mode."""
    derived = ({"grid": p.grid, "budgets": p.budgets, "regret": budgets.regret_rows(p, results)}
               if p.mode == "budget" else {})
    return {"record": record.as_dict(), "protocol": protocols.as_dict(p), **derived,
            "results": results}


def page(p, data: dict, args: argparse.Namespace) -> Path:
    """The page of a protocol of either mode."""
    results, record = data["results"], RunRecord.from_dict(data["record"])
    path = args.report or args.out / f"{report.stem(p)}.md"
    if p.mode == "budget":
        rows = budgets.regret_rows(p, results)
        md = report.budget_page(p, results, rows, record, args.out, path)
        table = report.budget_regret_table(p, rows)
    else:
        md = report.steps_page(p, results, record, args.out, path)
        table = (report.main_tables(results, p) if p.name == "main"
                 else report.ablation_table(results, p))
    print(f"\n{p.name} -> {md}\n{table}")
    return md


def compute(p, args: argparse.Namespace, _) -> list:
    """Every method of ``p`` on the workers, ordered by function then method."""
    mode = budgets if p.mode == "budget" else runner
    methods = [v.name for v in p.variants]
    results = experiment.execute(mode.run, [(p, m) for m in methods], args.workers,
                                 f"synthetic {p.name}", cost=mode.cost)
    order = budgets.record_methods(p) if p.mode == "budget" else methods
    results = pool.ordered(results, "function", p.functions, order)
    if p.mode == "budget" and p.lr_scales:  # the grid: stored compact (docs/results)
        results = budgets.compact(results)
    return results


COMMAND = experiment.Command(
    "synthetic", protocols_of, compute, stored,
    lambda p, args: args.out / f"{report.stem(p)}{common.RESULTS}",
    lambda data: protocols.from_dict(data["protocol"]), page)


def main(args: argparse.Namespace) -> int:
    return experiment.main(COMMAND, args)
