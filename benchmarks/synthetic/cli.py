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

Writes DIR/synthetic.json (synthetic_<ablation>.json, synthetic_budget*.json), PNG figures
under DIR/synthetic/, and the Markdown report DIR/synthetic.md (and the like).
"""

from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path

from benchmarks import common
from benchmarks import flags
from benchmarks import record as run_record
from benchmarks.synthetic import budget as budgets
from benchmarks.synthetic import protocol as protocols
from benchmarks.synthetic import report, runner
from benchmarks.synthetic.methods import METHODS, REFERENCE, parse_methods


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", choices=("tiny", "quick", "paper"), default="quick",
                        help="quick: ~1 min on 2 cores; paper: the paper's protocol")
    parser.add_argument("--mode", choices=("steps", "budget"), default="steps",
                        help="steps: equal steps (the paper's protocol); budget: equal calls")
    parser.add_argument("--ablation", choices=(*protocols.ABLATIONS, "auto_k", "all"),
                        help="run an ablation instead of the main comparison (budget mode: "
                             "switch or auto_k)")
    parser.add_argument("--functions", nargs="+", choices=budgets.FUNCTIONS,
                        help="objectives (default: the preset's; least_squares: budget mode)")
    parser.add_argument("--methods", nargs="+", metavar="METHOD",
                        help=f"main comparison only; from {', '.join(METHODS)}")
    parser.add_argument("--seeds", type=flags.positive_int,
                        help="number of seeds (default: the preset's)")
    parser.add_argument("--steps", type=flags.positive_int,
                        help="steps per run (default: the preset's)")
    parser.add_argument("--budget", type=flags.positive_int,
                        help="budget mode: oracle calls per run (default: the preset's)")
    parser.add_argument("--out", type=Path, default=Path("out"), help="output folder")
    parser.add_argument("--render", type=Path, metavar="JSON",
                        help="re-render a budget-mode report from its JSON into --out")
    parser.add_argument("--workers", type=flags.positive_int,
                        default=len(run_record.available_cores()),
                        help="worker processes, one pinned core each (1: in-process)")


def _budget_protocols(args: argparse.Namespace) -> list[budgets.BudgetProtocol]:
    if args.steps:
        raise SystemExit("error: --steps applies to the steps mode; use --budget")
    names = {None: ["budget"], "switch": ["budget_switch"], "auto_k": ["budget_auto_k"],
             "all": ["budget_switch", "budget_auto_k"]}.get(args.ablation)
    if names is None:
        raise SystemExit("error: budget mode has the ablations switch and auto_k")
    if args.ablation and args.methods:
        raise SystemExit("error: --methods applies to the main comparison, not to ablations")
    if args.functions and args.ablation in ("switch", "all"):
        raise SystemExit("error: --functions would replace the objective switch; leave it out")
    variants = parse_methods(args.methods) if args.methods else None
    return [budgets.restrict(budgets.protocol(n, args.preset), args.functions, variants,
                             args.seeds, args.budget) for n in names]


def _protocols(args: argparse.Namespace) -> list[protocols.Protocol]:
    if args.budget:
        raise SystemExit("error: --budget applies to --mode budget")
    if args.ablation == "auto_k":
        raise SystemExit("error: the auto_k ablation is a budget-mode ablation (--mode budget)")
    if args.functions and "least_squares" in args.functions:
        raise SystemExit("error: least_squares needs a data key a step: use --mode budget")
    if args.ablation is None:
        base = [protocols.main(args.preset)]
        variants = parse_methods(args.methods) if args.methods else None
    else:
        if args.methods:
            raise SystemExit("error: --methods applies to the main comparison, not to "
                             "ablations")
        if args.functions and args.ablation in ("switch", "all"):
            raise SystemExit("error: --functions would replace the objective switch "
                             "(Rosenbrock then Levy) of the switch ablation; leave it out")
        names = protocols.ABLATIONS if args.ablation == "all" else [args.ablation]
        base = [protocols.ablation(n, args.preset) for n in names]
        variants = None
    return [protocols.restrict(p, args.functions, variants, args.seeds, args.steps)
            for p in base]


def _figures(protocol, results, folder: Path) -> list[tuple[str, Path]]:
    name = report.stem(protocol)
    if protocol.name == "main":
        fixed = [m for m in METHODS if METHODS[m].fixed_k]
        return [
            ("Gap against oracle calls", report.plot_curves(
                results, folder / f"{name}_gap_vs_calls.png", "calls")),
            ("Gap against steps", report.plot_curves(
                results, folder / f"{name}_gap_vs_steps.png", "steps")),
            ("Momentum-consistency score cos(g_t, m_{t-1}) (thin: mean over seeds; thick: "
             "smoothed)", report.plot_diagnostic(
                results, folder / f"{name}_consistency.png", "consistency", "cos(g, m)",
                methods={"zoaq", *fixed})),
            ("ZoAQ threshold tau_t", report.plot_diagnostic(
                results, folder / f"{name}_tau.png", "tau", "tau", methods={"zoaq"})),
            ("ZoAQ accepted budgets", report.plot_k_histogram(
                results, folder / f"{name}_k_hist.png", "zoaq")),
        ]
    figures = [("Gap against oracle calls", report.plot_curves(
        results, folder / f"{name}_gap_vs_calls.png", "calls"))]
    if protocol.name == "switch":
        figures += [
            ("Gap against steps (the objective switches half way)", report.plot_curves(
                results, folder / f"{name}_gap_vs_steps.png", "steps")),
            ("ZoAQ threshold tau_t", report.plot_diagnostic(
                results, folder / f"{name}_tau.png", "tau", "tau", methods={"zoaq"})),
        ]
    return figures


def _markdown(protocol, results, figures, out: Path, machine, wall, command) -> Path:
    rel = [(title, path.relative_to(out)) for title, path in figures]
    images = "\n\n".join(f"**{t}**\n\n![{t}]({p.as_posix()})" for t, p in rel)
    parts = [report.header(protocol, machine, wall, command)]
    if protocol.name == "main":
        parts += ["## Final gap and oracle calls",
                  f"Savings are against {METHODS[REFERENCE].label}. Paper columns are "
                  "filled for the paper preset only.",
                  report.main_tables(results, protocol), "## Figures", images, "## Speed",
                  "Run time excludes compilation; each unit runs all its seeds as one "
                  "vmapped program on one pinned core. Lane use is the sampled share of "
                  "while-loop lane work that was useful: under vmap the expansion loop runs "
                  "until the slowest seed accepts, and the others compute (uncounted) "
                  "evaluations meanwhile.", report.speed_table(results)]
    else:
        parts += ["## Results", report.ablation_table(results, protocol)]
        if protocol.name == "trigger":
            parts += ["Paper (d = 10,000): the norm trigger needs 28.1% more queries to the "
                      "same target; loss drop per 1k queries 1.9 (cosine) vs 1.3 (norm).",
                      report.trigger_metrics(results)]
        parts += ["## Figures", images, "## Speed", report.speed_table(results)]
    title = ("Synthetic benchmark" if protocol.name == "main"
             else f"Synthetic ablation: {protocol.name}")
    return common.write_markdown(out / f"{report.stem(protocol)}.md", title,
                                 "\n\n".join(parts), "synthetic")


_BUDGET_TITLES = {
    "budget": "Synthetic benchmark at equal oracle calls",
    "budget_switch": "Synthetic, equal calls: the objective switch",
    "budget_auto_k": "Synthetic, equal calls: auto_k's sensitivity to its parameters",
}


def _write_budget(p: budgets.BudgetProtocol, results, record: dict, out: Path):
    """JSON, figures and report of a budget-mode run; returns (report, json, regret rows)."""
    rows = budgets.regret_rows(p, results)
    name = f"synthetic_{p.name}"
    json_path = common.write_json(out / f"{name}.json", {
        **record, "protocol": budgets.as_dict(p), "grid": p.grid, "budgets": p.budgets,
        "regret": rows, "results": results})
    figures = [(f"Gap against oracle calls, {bb} backbone", report.plot_budget_curves(
        p, results, out / "synthetic" / f"{name}_{bb}.png", bb))
        for bb in ("radazo", "zo_adamm") if any(r["backbone"] == bb for r in results)]
    figures.append(("K against oracle calls", report.plot_budget_k(
        p, results, out / "synthetic" / f"{name}_k.png")))
    images = "\n\n".join(f"**{t}**\n\n![{t}]({path.relative_to(out).as_posix()})"
                          for t, path in figures)
    parts = [report.budget_header(p, record),
             "## Query regret against the best fixed K", report.budget_regret_table(p, rows),
             "## Gap against the best fixed K's at the same budget",
             report.budget_ratio_table(p, rows),
             "Best fixed K (the envelope) at each budget:", report.budget_best_fixed(p, rows),
             "## Gap at the budget", report.budget_final_table(results), "## Figures", images]
    md = common.write_markdown(out / f"{name}.md", _BUDGET_TITLES[p.name], "\n\n".join(parts),
                               "synthetic")
    return md, json_path, rows


def _run_budget(p: budgets.BudgetProtocol, args: argparse.Namespace, command: str) -> None:
    with common.Stopwatch() as wall:
        results = budgets.execute(p, args.workers, desc=f"synthetic {p.name}")
    record = {"command": command, "date": datetime.date.today().isoformat(),
              "machine": run_record.machine_info(), "wall_seconds": wall.seconds}
    md, json_path, rows = _write_budget(p, results, record, args.out)
    print(f"\n{p.name}: {wall.seconds:.0f} s -> {md}, {json_path}")
    print(report.budget_regret_table(p, rows))


def _render_budget(path: Path, out: Path) -> None:
    """Re-renders a budget-mode report from its JSON (no computation)."""
    if not path.exists():
        raise SystemExit(f"error: {path} does not exist")
    data = json.loads(path.read_text())
    record = {k: data[k] for k in ("command", "date", "machine", "wall_seconds")}
    md, _, _ = _write_budget(budgets.from_dict(data["protocol"]), data["results"], record, out)
    print(f"{path} -> {md}")


def main(args: argparse.Namespace) -> int:
    command = flags.command_line("synthetic", args)
    if args.render:
        _render_budget(args.render, args.out)
        return 0
    if args.mode == "budget":
        for p in _budget_protocols(args):
            _run_budget(p, args, command)
        return 0
    for protocol in _protocols(args):
        with common.Stopwatch() as wall:
            results = runner.execute(protocol, args.workers, desc=f"synthetic {protocol.name}")
        machine = run_record.machine_info()
        stem = report.stem(protocol)
        json_path = report.write_json(args.out / f"{stem}.json", protocol, results, machine,
                                      wall.seconds, command)
        figures = _figures(protocol, results, args.out / "synthetic")
        md = _markdown(protocol, results, figures, args.out, machine, wall.seconds, command)
        print(f"\n{protocol.name}: {wall.seconds:.0f} s -> {md}, {json_path}")
        table = (report.main_tables(results, protocol) if protocol.name == "main"
                 else report.ablation_table(results, protocol))
        print(table)
    return 0
