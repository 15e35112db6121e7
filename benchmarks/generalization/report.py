"""The generalization page: query regret per problem and budget, its median and worst over
the set, how K moved, and the anytime figures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import anytime, pages
from benchmarks import record as run_record
from benchmarks.generalization import experiment
from benchmarks.generalization.objectives import SETS

TARGETS = {"median": 0.5, "max": 1.0}  # the targets on the held-out set
TITLES = {"heldout": "auto_k on held-out objectives: query regret against the best fixed K",
          "tuning": "auto_k on the tuning set: query regret against the best fixed K"}


def _calls(b: float) -> str:
    return f"{b:,.0f}"


def header(config: experiment.Config, record: run_record.RunRecord) -> str:
    rows = [[p.label, p.dim, _calls(p.budget), f"U[-{p.box}, {p.box}]" if p.box else "N(0, 1)",
             f"{experiment.settings_of(p).lr:.3g}", f"{experiment.settings_of(p).mu:.3g}"]
            for p in map(config.problem, config.problems)]
    return "\n".join([
        *pages.record_lines(record),
        f"- Protocol: preset `{config.preset}`, set `{config.set}`, seeds {list(config.seeds)}, "
        "R-AdaZO backbone (betas 0.9, 0.99, eps 1e-8), central differences; every run stops "
        "at its problem's largest budget and its anytime curve gives the smaller ones.",
        f"- Methods: {', '.join(experiment.variant(m).display for m in config.methods)}; "
        "auto_k at the library defaults.",
        "- lr and mu from one rule chosen on the tuning set: lr = 1e-3 s, mu = 5e-3 s, with "
        "s the RMS of the start distribution (never tuned per problem).",
        f"- {anytime.rule()}",
        "", pages.table(["problem", "d", "largest budget", "x0", "lr", "mu"], rows),
    ])


def regret_table(rows) -> str:
    width = max(len(r["budgets"]) for r in rows)
    budgets = next(r["budgets"] for r in rows if len(r["budgets"]) == width)
    table = [[_label(r["problem"]), r["label"],
              *(anytime.fmt(x) for x in r["regret"]), *([""] * (width - len(r["regret"]))),
              anytime.fmt(r["median"]), anytime.fmt(r["max"])] for r in rows]
    return pages.columns({
        "budget columns": "the query regret at that many oracle calls (blank: beyond the "
                          "problem's largest budget)",
        "median, worst": f"over the problem's budgets. {anytime.SAVING} on other budgets "
                         "and problems"}) + "\n\n" + pages.table(
        ["problem", "method", *(_calls(b) for b in budgets), "median", "worst"], table)


def summary_table(summary: dict[str, dict[str, Any]]) -> str:
    table = [[m, s["cells"], anytime.fmt(s["median"]), anytime.fmt(s["max"]),
              "yes" if s["median"] <= TARGETS["median"] else "no",
              "yes" if s["max"] <= TARGETS["max"] else "no",
              ", ".join(_label(p) for p in s["above_1"]) or "none",
              s["larger_k_cells"],
              "—" if s["larger_k_median"] is None else anytime.fmt(s["larger_k_median"])]
             for m, s in summary.items()]
    return pages.columns({
        "(problem, budget) cells": "the query regrets of the table below, pooled",
        "median regret, worst regret": "their median and maximum",
        f"median <= {TARGETS['median']}, worst <= {TARGETS['max']}": "the targets on the "
        "held-out set met",
        "problems above 1": "the problems where some budget has regret above 1 (more calls "
                            "than the best fixed K)",
        "cells where a K > 1 is best, median regret there": "the cells whose best fixed K is "
        "above 1 (where a budget rule can beat every fixed K), and their median regret"}) + (
        "\n\n" + pages.table(
        ["method", "(problem, budget) cells", "median regret", "worst regret",
         f"median <= {TARGETS['median']}", f"worst <= {TARGETS['max']}", "problems above 1",
         "cells where a K > 1 is best", "median regret there"], table))


def k_table(rows) -> str:
    table = [[_label(r["problem"]), r["label"],
              " → ".join(f"{k:.3g}" for k in r["k_at"]),
              " → ".join(r["best_fixed"]).replace("R-AdaZO ", ""),
              f"{np.mean(r['k_changes']):.3g}"] for r in rows]
    return pages.columns({
        "mean K at each budget": "the method's K at the budgets of the table above, mean over "
                                 "the seeds",
        "best fixed K at each budget": "the fixed K whose mean gap is the envelope there",
        "K changes a run (logged)": "changes of K between log rows, mean over the seeds"}) + (
        "\n\n" + pages.table(["problem", "method", "mean K at each budget",
                               "best fixed K at each budget", "K changes a run (logged)"], table))


def _label(name: str) -> str:
    return next((s[name].label for s in SETS.values() if name in s), name)


def plot_curves(results, path: Path, key: str, ylabel: str) -> Path:
    """Mean gap (or K) against calls per problem: fixed K thin, auto_k thick."""
    plots = [(_label(name), [
        (experiment.grid_of(r["budget"]), np.mean(r[key], axis=0), r["label"],
         {"lw": 0.8, "alpha": 0.7} if r["fixed_k"] else {"lw": 2.0, "alpha": 1.0})
        for r in rs if not (key == "k_curves" and r["fixed_k"])], {})
        for name, rs in pages.grouped(results, "problem").items()]
    return pages.curves(path, plots, cols=4, size=(4.4, 3.3), legend=(0, 6), title_size=9,
                        yscale="log" if key == "curves" else "linear", ylabel=ylabel,
                        xlim=(experiment.FIRST_BUDGET / 4, None))


def page(config: experiment.Config, results, rows, summary, record, out: Path,
         report_path: Path) -> Path:
    stem = f"generalization_{config.set}"
    figures = [("Mean gap against oracle calls", plot_curves(
                   results, out / "generalization" / f"{stem}_gap.png", "curves", "gap")),
               ("auto_k's K against oracle calls (mean over seeds)", plot_curves(
                   results, out / "generalization" / f"{stem}_k.png", "k_curves", "K"))]
    return pages.page(report_path, TITLES[config.set], [
        header(config, record),
        "## Median and worst query regret over the set", summary_table(summary),
        "## Query regret per problem and budget (calls)", regret_table(rows),
        "## How K moved", k_table(rows), "## Figures", pages.images(figures, report_path)],
        "generalization")
