"""The generalization pages: the median and worst query regret over the set (the answer),
which point makes each envelope, how K moved and the figures on ``generalization_<set>.md``;
the query regret per problem and budget against the (learning rate, K) grid's envelope and
the best fixed K's on ``generalization_<set>_problems.md``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import anytime, pages
from benchmarks import record as run_record
from benchmarks.generalization import experiment
from benchmarks.generalization.objectives import SETS

# The targets on the held-out set: against the (lr, K) envelope median <= 1, worst <= 2;
# against the fixed-K envelope at the rule's lr worst <= 1.
TARGETS = {"median_grid": 1.0, "max_grid": 2.0, "max": 1.0}
TITLES = {"heldout": "Held-out objectives: query regret against the (learning rate, K) grid "
                     "and the best fixed K",
          "tuning": "The tuning set: query regret against the (learning rate, K) grid and "
                    "the best fixed K"}
ENVELOPE = "best_fixed_k"  # the fixed-K envelope, scored against the grid's


def _calls(b: float) -> str:
    return f"{b:,.0f}"


def question(config: experiment.Config) -> str:
    """What the page answers."""
    which = {"heldout": "held-out objectives (never used to choose a default)",
             "tuning": "objectives of the tuning set (the set the defaults were chosen on)"}
    return (f"Run without tuning, how close does each method come to the best (learning rate, "
            f"K) point and to the best fixed K chosen in hindsight, on {len(config.problems)} "
            f"{which[config.set]}? Query regret at a budget: the calls a method needs to reach "
            "the envelope's gap there, over the budget (at most 1: as good; ∞: never).")


def header(config: experiment.Config, record: run_record.RunRecord) -> str:
    rows = [[p.label, p.dim, _calls(p.budget), f"U[-{p.box:g}, {p.box:g}]" if p.box else "N(0, 1)",
             f"{experiment.settings_of(p).lr:.3g}", f"{experiment.settings_of(p).mu:.3g}"]
            for p in map(config.problem, config.problems)]
    variants = [experiment.variant(m) for m in config.methods]
    scored = [v for v in variants if not v.fixed_k]
    ks = ", ".join(str(v.fixed_k) for v in variants if v.fixed_k)
    scales = ", ".join(f"x{s:g}" for s in config.lr_scales) or "x1 only"
    return "\n".join([
        *pages.record_lines(record),
        f"- Protocol: preset `{config.preset}`, set `{config.set}`, seeds {list(config.seeds)}, "
        "R-AdaZO backbone (betas 0.9, 0.99, eps 1e-8), central differences; one run a "
        "(problem, method), whose anytime curve gives every budget, except the methods told "
        "the budget (R-AdaZO with a cosine decay over the budget; `tuning_free:budget`, whose "
        "step decays over the budget's last quarter once it has seen a stall): each budget of "
        "the table is its own run, told that budget (its regret is at most 1, or ∞). The "
        "envelopes' runs (the grid's points, fixed K among them) stop at the problem's largest "
        f"budget B; every other scored method's run goes on to {experiment.EXTEND}B calls, so "
        f"that its regret at a budget b of the tables (all <= B) is measured up to "
        f"{experiment.EXTEND}B / b (up to {experiment.EXTEND} at B, the worst target) rather "
        "than reading ∞ past B.",
        f"- The (learning rate, K) grid: the rule's lr {scales}, times K in {{{ks}}} (R-AdaZO); its envelope at budget b is the best mean gap any grid point reached "
        "within b calls. The fixed-K envelope: the same at the rule's lr only.",
        f"- Scored methods, each run without tuning: {', '.join(v.display for v in scored)}. "
        "Parameter-free optimizers (optax.contrib at their defaults) replace the R-AdaZO "
        "backbone and the lr after the R-AdaZO estimator; reduce-on-plateau (optax.contrib "
        "defaults) scales the R-AdaZO step by the free value estimate's plateaus; auto_k at "
        "the library defaults. Schedule-free (optax.contrib.schedule_free_*) is left out: "
        "it queries at one point and returns another (its average), and this harness scores "
        "the point the optimizer queries.",
        f"- Times the held-out set has been scored, this run's included (each score may "
        f"inform a later default): {config.heldout_rounds}.",
        "- lr and mu from one rule chosen on the tuning set: lr = 1e-3 s, mu = 5e-3 s, with "
        "s the RMS of the start distribution (never tuned per problem).",
        f"- {anytime.rule()} Against the grid: the same, with the grid's envelope. A run "
        "whose gap becomes NaN or infinite never reaches a target from there on.",
        "", pages.table(["problem", "d", "largest budget", "x0", "lr", "mu"], rows),
    ])


def _fixed(r_or_s: dict, key: str) -> str:
    """A regret against the fixed-K envelope (``—`` for the envelope itself)."""
    return "—" if r_or_s.get("method", "") == ENVELOPE else anytime.fmt(r_or_s[key])


def summary_table(summary: dict[str, dict[str, Any]]) -> str:
    def met(s, key):
        return "—" if key not in s else ("yes" if s[key] <= TARGETS[key] else "no")

    table = [[s.get("label", m), s["cells"],
              anytime.fmt(s["median_grid"]) if "median_grid" in s else "—",
              anytime.fmt(s["max_grid"]) if "max_grid" in s else "—",
              "—" if m == ENVELOPE else anytime.fmt(s["median"]),
              "—" if m == ENVELOPE else anytime.fmt(s["max"]),
              met(s, "median_grid"), met(s, "max_grid"), "—" if m == ENVELOPE else met(s, "max"),
              ", ".join(_label(p) for p in s.get("above_1_grid", s["above_1"])) or "none"]
             for m, s in summary.items()]
    return pages.table(
        ["method", "(problem, budget) cells", "median vs (lr, K) grid", "worst vs (lr, K) grid",
         "median vs fixed K", "worst vs fixed K", f"grid median <= {TARGETS['median_grid']:g}",
         f"grid worst <= {TARGETS['max_grid']:g}", f"fixed-K worst <= {TARGETS['max']:g}",
         "problems above 1 vs the grid"], table) + "\n\n" + pages.columns({
        "(problem, budget) cells": "the query regrets of the per-problem tables, pooled (the "
                                   "best fixed K's row comes from envelope runs that stop at "
                                   "the largest budget B, so its cell at B reads <= 1 or ∞, "
                                   "where a scored method's is measured up to "
                                   f"{experiment.EXTEND}; compare the two rows below B)",
        "median, worst vs (lr, K) grid": "their median and maximum against the grid's "
                                         "envelope",
        "median, worst vs fixed K": "the same against the best fixed K at the rule's lr",
        f"grid median <= {TARGETS['median_grid']:g}, grid worst <= {TARGETS['max_grid']:g}, "
        f"fixed-K worst <= {TARGETS['max']:g}": "the held-out targets met",
        "problems above 1 vs the grid": "the problems where some budget has regret above 1 "
                                        "against the grid's envelope"})


def regret_table(rows, key: str) -> str:
    width = max(len(r["budgets"]) for r in rows)
    budgets = next(r["budgets"] for r in rows if len(r["budgets"]) == width)
    table = [[_label(r["problem"]), r["label"],
              *(anytime.fmt(x) for x in r[key]), *([""] * (width - len(r[key]))),
              anytime.fmt(r["median" + key[6:]]), anytime.fmt(r["max" + key[6:]])]
             for r in rows if key in r and not (key == "regret" and r["method"] == ENVELOPE)]
    return pages.columns({
        "budget columns": "the query regret at that many oracle calls (blank: beyond the "
                          "problem's largest budget B; an anytime run's regret at b is "
                          f"measured up to {experiment.EXTEND}B / b)",
        "median, worst": f"over the problem's budgets. {anytime.SAVING} on other budgets "
                         "and problems"}) + "\n\n" + pages.table(
        ["problem", "method", *(_calls(b) for b in budgets), "median", "worst"], table)


def envelope_table(rows) -> str:
    table = [[_label(name), " → ".join(rs[0]["best_fixed"]),
              " → ".join(rs[0].get("best_grid", ())) or "—"]
             for name, rs in pages.grouped(rows, "problem").items()]
    return pages.columns({
        "best fixed K at each budget": "the K whose mean gap is the fixed-K envelope at the "
                                       "budgets of the per-problem tables",
        "best (lr, K) point at each budget": "the grid point whose mean gap is the grid's "
                                             "envelope there (xS: S times the rule's lr)"}) + (
        "\n\n" + pages.table(["problem", "best fixed K at each budget",
                               "best (lr, K) point at each budget"], table))


def k_table(rows) -> str:
    table = [[_label(r["problem"]), r["label"],
              " → ".join(f"{k:.3g}" for k in r["k_at"]), f"{np.mean(r['k_changes']):.3g}"]
             for r in rows if r["method"] != ENVELOPE and np.mean(r["k_changes"] or [0]) > 0]
    return pages.columns({
        "mean K at each budget": "the method's K at the budgets of the per-problem tables, mean "
                                 "over the seeds (methods whose K moves)",
        "K changes a run (logged)": "changes of K between log rows, mean over the seeds"}) + (
        "\n\n" + pages.table(["problem", "method", "mean K at each budget",
                               "K changes a run (logged)"], table))


def _label(name: str) -> str:
    return next((s[name].label for s in SETS.values() if name in s), name)


def plot_curves(results, path: Path, key: str, ylabel: str) -> Path:
    """Mean gap (or K) against calls per problem: fixed K thin, scored methods thick."""
    def drawn(r):  # up to the calls the run went to
        grid = experiment.grid_of(r["budget"])
        end = experiment.runs_to(r["budget"],
                                 experiment.is_envelope(r["fixed_k"], r.get("grid_k")),
                                 r.get("told_budget") is not None)
        upto = np.searchsorted(grid, end, side="right")
        return grid[:upto], np.mean(r[key], axis=0)[:upto]

    plots = [(_label(name), [
        (*drawn(r), r["label"],
         {"lw": 0.8, "alpha": 0.7} if r["fixed_k"] else {"lw": 2.0, "alpha": 1.0})
        for r in anytime.plotted(rs) if not (key == "k_curves" and r["fixed_k"])], {})
        for name, rs in pages.grouped(results, "problem").items()]
    return pages.curves(path, plots, cols=4, size=(4.4, 3.3), legend=(0, 6), title_size=9,
                        yscale="log" if key == "curves" else "linear", ylabel=ylabel,
                        xlim=(experiment.FIRST_BUDGET / 4, None))


def plot_summary(rows, summary, path: Path, set_label: str) -> Path:
    """Every (problem, budget) cell's query regret against the (learning rate, K) grid's
    envelope, one row of dots per method (∞ at the right edge), its median marked: how
    close each method, run without tuning, comes to the best grid point in hindsight."""
    plt = pages.pyplot()
    methods = [m for m in summary if "median_grid" in summary[m]]
    fig, ax = plt.subplots(figsize=(7.6, 0.42 * len(methods) + 1.3))
    top, rng = 100.0, np.random.default_rng(0)
    for i, m in enumerate(methods):
        cells = np.concatenate([r["regret_grid"] for r in rows if r["method"] == m])
        shown = np.where(np.isfinite(cells), np.clip(cells, 1e-2, top), 2 * top)
        colour = "C1" if m.startswith("tuning_free") else "C0" if m == ENVELOPE else "0.45"
        ax.scatter(shown, i + rng.uniform(-0.18, 0.18, shown.size), s=9, color=colour,
                   alpha=0.6, linewidths=0)
        median = summary[m]["median_grid"]
        ax.plot([min(median, 2 * top)] * 2, [i - 0.32, i + 0.32], color="k", lw=2)
    ax.axvline(1.0, color="k", ls="--", lw=0.8)
    ax.set(xscale="log", xlim=(1e-2 / 1.5, 3 * top), ylim=(len(methods) - 0.5, -0.5),
           yticks=range(len(methods)), xlabel="query regret against the best (lr, K) point in "
           "hindsight (≤ 1: as good)")
    ax.set_yticklabels([summary[m]["label"] for m in methods], fontsize=8)
    ax.set_xticks([1e-2, 1e-1, 1, 10, 100, 2 * top], ["0.01", "0.1", "1", "10", "100", "∞"])
    ax.set_title(f"{set_label}, every (problem, budget) cell; bar: the median", fontsize=9)
    return pages.save_figure(fig, path)


def page(config: experiment.Config, results, rows, summary, record, out: Path,
         report_path: Path) -> Path:
    """The set's page (the answer: the median and worst regret; the figures) and its
    per-problem page beside it (``<page stem>_problems.md``)."""
    stem = f"generalization_{config.set}"
    report_path = Path(report_path)
    problems_path = report_path.with_name(f"{report_path.stem}_problems.md")
    labels = {"heldout": f"{len(config.problems)} held-out objectives",
              "tuning": f"The tuning set's {len(config.problems)} objectives"}
    figures = [("Query regret of every cell against the (learning rate, K) grid",
                plot_summary(rows, summary, out / "generalization" / f"{stem}_summary.png",
                             labels[config.set])),
               ("Mean gap against oracle calls (fixed K at the rule's lr thin)", plot_curves(
                   results, out / "generalization" / f"{stem}_gap.png", "curves", "gap")),
               ("K against oracle calls (mean over seeds)", plot_curves(
                   results, out / "generalization" / f"{stem}_k.png", "k_curves", "K"))]
    setup = header(config, record)
    pages.page(problems_path, f"{TITLES[config.set]}: per problem",
               question="Per problem and budget, what is each method's query regret against "
                        "the (learning rate, K) grid's envelope and against the best fixed "
                        "K, and which point makes each envelope?",
               answer=pages.images(figures[1:2], problems_path), run=record.command,
               setup=f"As on [the set's page]({pages.link(report_path, problems_path)}), "
                     "whose tables pool these cells.\n\n" + setup,
               sections=["## Query regret against the (learning rate, K) grid's envelope, per "
                         "problem and budget (calls)", regret_table(rows, "regret_grid"),
                         "## Query regret against the best fixed K at the rule's learning "
                         "rate", regret_table(rows, "regret")],
               command="generalization")
    return pages.page(
        report_path, TITLES[config.set], question=question(config),
        answer=summary_table(summary), run=record.command, setup=setup,
        sections=[f"The query regret per problem and budget: [{problems_path.name}]"
                  f"({pages.link(problems_path, report_path)}).",
                  "## Which point makes each envelope", envelope_table(rows),
                  "## How K moved", k_table(rows), "## Figures",
                  pages.images(figures, report_path)],
        command="generalization")
