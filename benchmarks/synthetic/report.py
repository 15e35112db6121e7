"""Figures and the Markdown pages of a synthetic run: a steps-mode page opens with the
final gap and calls of every method on every function, a budget-mode page with the median
and worst query regret of every method."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from benchmarks import anytime, pages
from benchmarks import record as run_record
from benchmarks.synthetic import paper
from benchmarks.methods import variant
from benchmarks.objectives import NOISY, OBJECTIVES
from benchmarks.synthetic import budget as budgets
from benchmarks.synthetic.methods import REFERENCE
from benchmarks.synthetic.protocol import SWITCH, Protocol


def stem(protocol: Protocol) -> str:
    return "synthetic" if protocol.name == "main" else f"synthetic_{protocol.name}"


def function_label(name: str) -> str:
    if name == SWITCH:
        return "Rosenbrock → Levy"
    return (OBJECTIVES.get(name) or NOISY[name]).label


# --------------------------------------------------------------------------- figures


def _smooth(y: np.ndarray, width: int) -> np.ndarray:
    if width <= 1 or len(y) < width:
        return y
    kernel = np.ones(width) / width
    return np.convolve(np.pad(y, (width // 2, width - 1 - width // 2), mode="edge"), kernel,
                       mode="valid")


def plot_curves(results, path: Path, x: str) -> Path:
    """Mean gap over seeds against oracle calls (``x="calls"``) or steps."""
    plots = [(function_label(f), [
        (np.mean(r["trace"]["num_queries"], axis=0) if x == "calls" else r["trace"]["step"],
         np.nanmean(np.asarray(r["trace"]["value"], np.float64), axis=0), r["label"],
         {"lw": 1.3}) for r in rs], {})
        for f, rs in pages.grouped(results, "function").items()]
    return pages.curves(path, plots, xscale="linear", yscale="log", ylabel="gap f(x) - f*",
                        xlabel="oracle calls" if x == "calls" else "steps")


def plot_diagnostic(results, path: Path, key: str, ylabel: str, methods=None) -> Path:
    """A per-step diagnostic (consistency score, threshold) averaged over seeds: thin the
    mean, thick smoothed."""
    plots = []
    for function, rs in pages.grouped(results, "function").items():
        lines = []
        for j, r in enumerate(r for r in rs if methods is None or r["method"] in methods):
            y = np.nanmean(np.asarray(r["trace"][key], np.float64)[:, 1:], axis=0)
            steps = r["trace"]["step"][1:]
            lines += [(steps, y, None, {"lw": 0.5, "alpha": 0.3, "color": f"C{j}"}),
                      (steps, _smooth(y, max(1, len(y) // 40)), r["label"],
                       {"lw": 1.5, "color": f"C{j}"})]
        plots.append((function_label(function), lines, {}))
    return pages.curves(path, plots, xscale="linear", xlabel="steps", ylabel=ylabel)


def plot_k_histogram(results, path: Path, method: str) -> Path:
    groups = pages.grouped(results, "function")
    fig, axes = pages.panels(len(groups))
    for ax, (function, rs) in zip(axes, groups.items()):
        for r in rs:
            if r["method"] == method:
                k = np.asarray(r["trace"]["last_k"])[:, 1:].ravel()
                ax.hist(k, bins=np.arange(k.min(), k.max() + 2) - 0.5, rwidth=0.85)
                ax.set_title(f"{function_label(function)}: mean K {k.mean():.2f}")
        ax.set_xlabel("accepted K (sampled at the log points)")
        ax.set_ylabel("count")
    return pages.save_figure(fig, path)


def plot_budget_curves(p, results, path: Path, backbone: str) -> Path:
    """Mean gap against calls: fixed K thin, their envelope dashed, adaptive methods thick."""
    plots = []
    for function, rs in pages.grouped(results, "function").items():
        rs = [r for r in anytime.plotted(rs) if budgets.family(r) == backbone]
        fixed = {r["label"]: np.mean(r["curves"], axis=0) for r in rs if r["fixed_k"]}
        lines = [(p.grid, c, label, {"lw": 0.8, "alpha": 0.6}) for label, c in fixed.items()]
        if fixed:
            lines.append((p.grid, anytime.envelope(fixed)[0], "best fixed K (envelope)",
                          {**pages.ENVELOPE, "lw": 1.6}))
        lines += [(p.grid, np.mean(r["curves"], axis=0), r["label"], {"lw": 2.0})
                  for r in rs if not r["fixed_k"]]
        plots.append((function_label(function), lines, {}))
    return pages.curves(path, plots, legend=(0, 6), yscale="log", ylabel="gap",
                        marks=[p.switch_at] if p.switch_at else ())


def plot_budget_k(p, results, path: Path) -> Path:
    """The adaptive methods' K against calls (mean over seeds)."""
    plots = [(function_label(f), [(p.grid, np.mean(r["k_curves"], axis=0), r["label"],
                                   {"lw": 1.4}) for r in anytime.plotted(rs) if not r["fixed_k"]],
              {})
             for f, rs in pages.grouped(results, "function").items()]
    return pages.curves(path, plots, legend=(0, 6), ylabel="K at the last step")


# --------------------------------------------------------------------------- markdown


def _fmt(x: float | None) -> str:
    return pages.num(x, "{:.3g}" if x is None or abs(x) < 1e4 else "{:,.0f}")


def _paper(pair: tuple, full: bool) -> list[str]:
    """The paper's gap and calls, for the paper preset only."""
    return [_fmt(pair[0]), pages.num(pair[1])] if full else [pages.MISSING] * 2


def _gap_and_calls(r) -> list[str]:
    """The final gap (mean ± population std over the seeds) and the mean oracle calls."""
    return [pages.pm(np.mean(r["final_gap"]), np.std(r["final_gap"]), _fmt),
            pages.num(np.mean(r["num_queries"]))]


def _us_per_call(r) -> float:
    return 1e6 * r["run_seconds"] / np.sum(r["num_queries"])


def main_tables(results, protocol: Protocol) -> str:
    """Final gap and calls per function, savings against R-AdaZO K=10, paper side by side."""
    parts = []
    for function, rs in pages.grouped(results, "function").items():
        ref = next((np.mean(r["num_queries"]) for r in rs if r["method"] == REFERENCE), None)
        rows = [[r["label"], *_gap_and_calls(r),
                 f"{100 * (1 - np.mean(r['num_queries']) / ref):.1f}%"
                 if ref and r["method"] != REFERENCE else pages.MISSING,
                 *_paper(paper.MAIN.get((function, r["method"]), (None, None)),
                         protocol.preset == "paper")] for r in rs]
        parts.append(f"### {function_label(function)}\n\n" + pages.table(
            ["method", "final gap (mean ± std)", "oracle calls", "saving vs R-AdaZO K=10",
             "paper gap", "paper calls"], rows))
    return "\n\n".join(parts)


def answer_table(results) -> str:
    """The steps pages' answer: per method (a row), per function, the final gap (mean ±
    std over seeds) and the mean oracle calls."""
    functions = list(pages.grouped(results, "function"))
    by = {(r["function"], r["label"]): r for r in results}
    rows = [[label, *(cell for f in functions for cell in (
        _gap_and_calls(by[f, label]) if (f, label) in by else [pages.MISSING] * 2))]
        for label in dict.fromkeys(r["label"] for r in results)]
    return pages.table(["method", *(head for f in functions for head in (
        f"{function_label(f)}: final gap", "calls"))], rows)


def speed_table(results) -> str:
    rows = []
    for function, rs in pages.grouped(results, "function").items():
        ref = next((_us_per_call(r) for r in rs if r["method"] == REFERENCE), None)
        rows += [[function_label(function), r["label"], f"{r['compile_seconds']:.1f}",
                  f"{r['run_seconds']:.2f}", f"{np.sum(r['num_queries']) / r['run_seconds']:,.0f}",
                  f"{_us_per_call(r):.3f}", f"{_us_per_call(r) / ref:.2f}" if ref else
                  pages.MISSING, f"{r['lane_utilisation']:.2f}"] for r in rs]
    return pages.table(["function", "method", "compile s", "run s", "calls/s", "µs/call",
                        "cost/call vs R-AdaZO K=10", "lane use"], rows)


def ablation_table(results, protocol: Protocol) -> str:
    reference = paper.TABLES.get(protocol.name, {})
    variants = {v.name: v for v in protocol.variants}
    rows = []
    for function, rs in pages.grouped(results, "function").items():
        for r in sorted(rs, key=lambda r: list(variants).index(r["method"])):
            # the ablated setting is named like the ablation (reset, tau0, controller)
            value = dict(variants[r["method"]].method.params).get(protocol.name)
            rows.append([function_label(function), r["label"], *_gap_and_calls(r),
                         *_paper(reference.get((function, value), (None, None)),
                                 protocol.preset == "paper")])
    return pages.table(["function", "variant", "final gap (mean ± std)", "oracle calls",
                        "paper gap", "paper calls"], rows)


def trigger_metrics(results) -> str:
    """Queries to reach a common target, and loss drop per 1k queries (paper's metrics),
    per function."""
    rows = []
    for function, rs in pages.grouped(results, "function").items():
        curves = {r["label"]: (np.mean(np.asarray(r["trace"]["num_queries"], np.float64), 0),
                               np.mean(np.asarray(r["trace"]["value"], np.float64), 0))
                  for r in rs}
        target = max(v[-1] for _, v in curves.values())  # the worse final loss, reached by all
        for label, (calls, value) in curves.items():
            hit = calls[np.argmax(value <= target)]
            drop = (value[0] - value[-1]) / (calls[-1] / 1000)
            rows.append([function_label(function), label, f"{target:.4g}", f"{hit:,.0f}",
                         f"{drop:.3g}"])
    return pages.table(["function", "variant", "target loss", "calls to reach it",
                        "loss drop per 1k calls"], rows)


def seed_list(seeds) -> str:
    """``[0, 1, 2]``; a long run of consecutive seeds as ``0-999 (1,000 seeds)``."""
    seeds = list(seeds)
    if len(seeds) > 10 and seeds == list(range(seeds[0], seeds[0] + len(seeds))):
        return f"{seeds[0]}-{seeds[-1]} ({len(seeds):,} seeds)"
    return str(seeds)


def header(p, record: run_record.RunRecord, length: str, differences: str,
           methods_note: str = "") -> str:
    """The run record lines, the protocol (``length`` of a run and its punctuation, the
    difference scheme's note) and the methods of a run of either mode."""
    s = p.settings
    return "\n".join([
        *pages.record_lines(record),
        f"- Protocol: preset `{p.preset}`, d = {p.dim}, {length} seeds {seed_list(p.seeds)}, "
        f"lr {s.lr}, betas ({s.b1}, {s.b2}), mu {s.mu}, eps {s.eps}, central differences "
        f"({differences}).",
        f"- Methods: {', '.join(v.display for v in p.variants)}.{methods_note}",
        "- x0 ~ N(0, I) per seed, the same for every method; optimizer keys matched per seed.",
    ])


# --------------------------------------------------------------------------- budget mode

FRACTIONS = ["1/64", "1/32", "1/16", "1/8", "1/4", "1/2", "1"]


def budget_regret_table(p, rows, key: str = "regret") -> str:
    """Regret per function, backbone and scored method at each budget against the best
    fixed K (``key="regret"``) or the (learning rate, K) grid's best point
    (``"regret_grid"``)."""
    tail = key.removeprefix("regret")
    table = [[function_label(row["function"]), row["backbone"], row["label"],
              *(anytime.fmt(x) for x in (*row[key], row["median" + tail], row["max" + tail]))]
             for row in rows if key in row and not (key == "regret" and _envelope(row))]
    span = "after the switch" if p.switch_at else "of the run"
    rule = anytime.rule() + ("" if key == "regret" else
                             " Here the target is the best mean gap of any (learning rate, "
                             "K) point of the grid at B instead of the best fixed K's.")
    return (f"Budgets are fractions of the {p.budget - p.origin:,} calls {span}. "
            f"{rule}\n\n" + pages.columns(REGRET_COLUMNS) + "\n\n"
            + pages.table(["function", "backbone", "method", *FRACTIONS, "median", "max"], table))


def budget_summary_table(rows) -> str:
    """Per scored method of the R-AdaZO family, over every (function, budget) cell: the
    median and worst regret against the grid's and the fixed-K envelopes."""
    table = []
    for label, mine in pages.grouped([r for r in rows if r["backbone"] == "radazo"
                                      and "regret_grid" in r], "label").items():
        grid = np.concatenate([r["regret_grid"] for r in mine])
        fixed = (np.concatenate([r["regret"] for r in mine]) if not _envelope(mine[0])
                 else None)
        table.append([label, len(grid), anytime.fmt(np.median(grid)), anytime.fmt(grid.max()),
                      *((anytime.fmt(np.median(fixed)), anytime.fmt(fixed.max()))
                        if fixed is not None else ("—", "—")),
                      ", ".join(function_label(r["function"]) for r in mine
                                if r["max_grid"] > 1.0) or "none"])
    return pages.table(
        ["method", "cells", "median vs (lr, K) grid", "worst vs (lr, K) grid",
         "median vs fixed K", "worst vs fixed K", "functions above 1 vs the grid"],
        table) + "\n\n" + pages.columns({
        "method": "the methods of the R-AdaZO family (the family the grid is made of)",
        "cells": "the (function, budget) regrets of the per-budget tables, pooled",
        "median, worst vs (lr, K) grid": "their median and maximum against the grid's envelope",
        "median, worst vs fixed K": "the same against the best fixed K at the lr",
        "functions above 1 vs the grid": "where some budget has regret above 1 against the "
                                         "grid's envelope"})


def budget_answer(rows) -> str:
    """A page without the grid: per backbone and scored method, over every (function,
    budget) cell, the median and worst regret against the best fixed K."""
    table = [[label, backbone, len(cells), anytime.fmt(np.median(cells)),
              anytime.fmt(cells.max()), ", ".join(
                  function_label(r["function"]) for r in mine if r["max"] > 1.0) or "none"]
             for (backbone, label), mine in pages.grouped(
                 [dict(r, key=(r["backbone"], r["label"])) for r in rows if not _envelope(r)],
                 "key").items()
             for cells in [np.concatenate([r["regret"] for r in mine])]]
    return pages.table(["method", "backbone", "(function, budget) cells", "median vs fixed K",
                        "worst vs fixed K", "functions above 1"], table)


def _envelope(row) -> bool:
    """The row of the fixed-K envelope itself (scored against the grid only)."""
    return row["method"] == "best_fixed_k"


def budget_ratio_table(p, rows) -> str:
    """Mean gap of each adaptive method over the envelope's at the same budget."""
    table = [[function_label(row["function"]), row["backbone"], row["label"],
              *(f"{x:.3g}" for x in (*row["gap_ratio"], row["gap_ratio_median"]))]
             for row in rows if not _envelope(row)]
    return ("Mean gap divided by the best fixed K's mean gap at the same budget (1: as good; "
            "below 1: better). Where regret is ∞ this says by how much the method missed.\n\n"
            + pages.columns({"1/64 ... 1, median": "the ratio at that fraction of the budget, "
                                                   "and its median over them"}) + "\n\n"
            + pages.table(["function", "backbone", "method", *FRACTIONS, "median"], table))


REGRET_COLUMNS = {
    "backbone": "the fixed-K family (R-AdaZO or ZO-AdaMM) whose envelope the method is "
                "compared with",
    "1/64 ... 1": "the query regret at that fraction of the budget",
    "median, max": f"over those budgets. {anytime.SAVING} and in the gap ratios below"}


def budget_final_table(results) -> str:
    rows = [[function_label(r["function"]), r["label"], *_gap_and_calls(r),
             f"{r['run_seconds']:.1f}"]
            for rs in pages.grouped(results, "function").values() for r in anytime.plotted(rs)]
    return pages.columns({
        "gap at the budget (mean ± std)": "f(x) - f* at the run's last log row, the first at "
                                          "or past the budget, mean ± population std over "
                                          "the seeds",
        "calls spent": "oracle calls at that row, mean over the seeds (the budget, or past it "
                       "by at most the calls of the steps between log rows)",
        "run s": "run time of all the seeds on the function, compilation excluded"}) + (
        "\n\n" + pages.table(["function", "method", "gap at the budget (mean ± std)",
                               "calls spent", "run s"], rows))


# --------------------------------------------------------------------------- pages


def steps_figures(protocol: Protocol, results, folder: Path) -> list[tuple[str, Path]]:
    """The figures of a steps-mode run, drawn into ``folder``."""
    name = stem(protocol)
    figures = [("Gap against oracle calls", plot_curves(
        results, folder / f"{name}_gap_vs_calls.png", "calls"))]
    if protocol.name not in ("main", "switch"):
        return figures
    switch = " (the objective switches half way)" if protocol.name == "switch" else ""
    figures.append((f"Gap against steps{switch}", plot_curves(
        results, folder / f"{name}_gap_vs_steps.png", "steps")))
    if protocol.name == "main":
        fixed = {v.name for v in protocol.variants if v.fixed_k}
        figures.append((
            "Momentum-consistency score cos(g_t, m_{t-1}) (thin: mean over seeds; thick: "
            "smoothed)", plot_diagnostic(results, folder / f"{name}_consistency.png",
                                         "consistency", "cos(g, m)", methods={"zoaq", *fixed})))
    figures.append(("ZoAQ threshold tau_t", plot_diagnostic(
        results, folder / f"{name}_tau.png", "tau", "tau", methods={"zoaq"})))
    if protocol.name == "main":
        figures.append(("ZoAQ accepted budgets", plot_k_histogram(
            results, folder / f"{name}_k_hist.png", "zoaq")))
    return figures


GAP_COLUMNS = {
    "final gap (mean ± std)": "f(x_T) - f* at the end of the run, mean ± population std over "
                              "the seeds",
    "oracle calls": "objective evaluations the method spent, mean over the seeds (the "
                    "estimator's exact count)",
    "paper gap, paper calls": "the paper's numbers for the same setting (paper preset only)",
}
CALL_SAVING = ("1 - calls / R-AdaZO K=10's calls. A saving is bought with fewer directions a "
          "step, a noisier estimate: read it with the final gap beside it (a saving with a "
          "larger gap is a trade, not a win) and with the cost per call under Speed")
SPEED = pages.columns({
    "compile s": "compilation of the unit (all its seeds)",
    "run s": "run time, compilation excluded (each unit runs all its seeds as one vmapped "
             "program on one pinned core)",
    "calls/s, µs/call": "oracle calls per second of run time and its inverse",
    "cost/call vs R-AdaZO K=10": "µs/call over R-AdaZO K=10's on the same function (above 1: "
                                 "the adaptive logic's price per call)",
    "lane use": "the sampled share of while-loop lane work that was useful (under vmap the "
                "expansion loop runs until the slowest seed accepts, and the others compute "
                "uncounted evaluations meanwhile)"})


def steps_question(p: Protocol) -> str:
    """What a steps-mode page answers."""
    run = f"d = {p.dim:,}, {p.steps:,} steps, {len(p.seeds)} seeds"
    if p.name == "main":
        return (f"On the paper's synthetic functions ({run}), what final gap does each method "
                "reach and how many oracle calls does it spend?")
    if p.name == "switch":
        return (f"When the objective switches half way (Rosenbrock, then Levy; {run} per "
                "phase), does ZoAQ's controller follow, and at what final gap and calls?")
    return (f"The paper's ablation `{p.name}` on the synthetic functions ({run}): how do the "
            "final gap and the oracle calls change with the setting?")


def steps_page(p: Protocol, results, record: run_record.RunRecord, out: Path,
               report_path: Path) -> Path:
    """Figures (into ``out/synthetic``) and the Markdown page of a steps-mode run."""
    setup = header(p, record, f"T = {p.steps:,} steps"
                   f"{' per phase' if SWITCH in p.functions else ''},",
                   "StatZO: forward differences with one centre value a step; ZoAR: its "
                   "forward averaged-baseline form, K calls a step")
    if p.name == "main":
        parts = ["## Final gap and oracle calls",
                 f"Savings are against {variant(REFERENCE).display}. Paper columns "
                 "are filled for the paper preset only.",
                 pages.columns({**GAP_COLUMNS, "saving vs R-AdaZO K=10": CALL_SAVING}),
                 main_tables(results, p)]
    else:
        parts = ["## Results", pages.columns(
            {"variant": "the method or setting compared (the Methods line above)",
             **GAP_COLUMNS}), ablation_table(results, p)]
    if p.name == "trigger":
        parts += ["Paper (d = 10,000): the norm trigger needs 28.1% more queries to the "
                  "same target; loss drop per 1k queries 1.9 (cosine) vs 1.3 (norm).",
                  trigger_metrics(results)]
    parts += ["## Figures", pages.images(steps_figures(p, results, out / "synthetic"),
                                         report_path),
              "## Speed", SPEED, speed_table(results)]
    title = "Synthetic benchmark" if p.name == "main" else f"Synthetic ablation: {p.name}"
    return pages.page(report_path, title, question=steps_question(p),
                      answer=answer_table(results), run=record.command, setup=setup,
                      sections=parts, command="synthetic")


def grid_note(p) -> str:
    """What the grid is and which methods are told their budget."""
    scales = ", ".join(f"x{s:g}" for s in p.lr_scales)
    return (f"The (learning rate, K) grid: R-AdaZO at lr {p.settings.lr:g} times {scales}, "
            "times the fixed K of the R-AdaZO family; its envelope at budget B is the best "
            "mean gap any grid point reached within B calls (the row *best fixed K in "
            "hindsight* scores the fixed-K envelope at lr x1 against it). The methods told "
            "the budget (R-AdaZO K=1 with a cosine decay over the budget, `tuning_free:budget`)"
            " are scored at each budget by their run told that budget; every other method "
            "by its one anytime run. Parameter-free steps (Prodigy, DoG, DoWG after the "
            "R-AdaZO estimator, optax.contrib defaults), reduce-on-plateau (optax.contrib "
            "defaults, on the free value estimate) and tuning_free are scored against "
            "R-AdaZO's envelopes.")


BUDGET_TITLES = {
    "budget": "Synthetic benchmark at equal oracle calls",
    "budget_switch": "Synthetic, equal calls: the objective switch",
    "budget_auto_k": "Synthetic, equal calls: auto_k's sensitivity to its parameters",
}


def budget_question(p) -> str:
    """What a budget-mode page answers."""
    run = f"d = {p.dim:,}, {p.budget:,} oracle calls, {len(p.seeds)} seeds"
    if p.name == "budget_auto_k":
        return (f"At equal oracle calls ({run}), how much does `auto_k`'s query regret "
                "against the best fixed K move when one of its parameters changes?")
    against = ("the best (learning rate, K) point and the best fixed K chosen in hindsight"
               if p.lr_scales else "the best fixed K chosen in hindsight")
    switch = ", the objective switching part way" if p.switch_at else ""
    return (f"At equal oracle calls ({run}{switch}), how close does each adaptive or untuned "
            f"method come to {against}? Query regret at a budget: the calls a method needs "
            "to reach the envelope's gap there, over the budget (at most 1: as good; ∞: "
            "never).")


def budget_page(p, results, rows, record: run_record.RunRecord, out: Path,
                report_path: Path) -> Path:
    """Figures (into ``out/synthetic``) and the Markdown page of a budget-mode run; with
    the (learning rate, K) grid, the per-budget tables against the best fixed K go to a
    second page beside it (``<page stem>_fixed_k.md``)."""
    folder, name = out / "synthetic", stem(p)
    report_path = Path(report_path)
    # With the grid (many more curves) only the R-AdaZO family's gap figure, the family the
    # grid and the baselines are scored in: docs/results stays under its size cap.
    figures = [(f"Gap against oracle calls, {bb} backbone", plot_budget_curves(
        p, results, folder / f"{name}_{bb}.png", bb))
        for bb in ("radazo", "zo_adamm")[:1 if p.lr_scales else 2]
        if any(r["backbone"] == bb for r in results)]
    if not p.lr_scales:
        figures.append(("K against oracle calls",
                        plot_budget_k(p, results, folder / f"{name}_k.png")))
    switch = (f" (the objective switches at {p.switch_at:,} calls; regret counts calls after "
              "it)" if p.switch_at else "")
    title = BUDGET_TITLES[p.name] + (": the (learning rate, K) grid and untuned baselines"
                                     if p.lr_scales else "")
    setup = header(p, record, f"every run stops once it has spent {p.budget:,} oracle calls"
                   f"{switch};", "StatZO: forward, one centre value a step",
                   " auto_k runs at the library defaults everywhere.")
    envelope = ["Best fixed K (the envelope) at each budget:", pages.table(
        ["function", "backbone", *FRACTIONS],
        {(r["function"], r["backbone"]): [function_label(r["function"]), r["backbone"],
                                          *r["best_fixed"]] for r in rows}.values())]
    fixed_k = ["## Query regret against the best fixed K", budget_regret_table(p, rows),
               "## Gap against the best fixed K's at the same budget",
               budget_ratio_table(p, rows), *envelope]
    final = ["## Gap at the budget", budget_final_table(results)]
    if not p.lr_scales:
        return pages.page(report_path, title, question=budget_question(p),
                          answer=budget_answer(rows), run=record.command, setup=setup,
                          sections=[*fixed_k, *final, "## Figures",
                                    pages.images(figures, report_path)],
                          command="synthetic")
    second = report_path.with_name(f"{report_path.stem}_fixed_k.md")
    pages.page(second, f"{title}: against the best fixed K",
               question="Per function and budget, what is each method's query regret "
                        "against the best fixed K chosen in hindsight, and its mean gap "
                        "over that K's?", answer=pages.images(figures[:1], second),
               run=record.command,
               setup=f"As on [the grid's page]({pages.link(report_path, second)}).\n\n"
                     + setup, sections=fixed_k, command="synthetic")
    return pages.page(report_path, title, question=budget_question(p),
                      answer=budget_summary_table(rows), run=record.command, setup=setup,
                      sections=[
        f"Against the best fixed K per function and budget: [{second.name}]"
        f"({pages.link(second, report_path)}).",
        "## Query regret against the (learning rate, K) grid", grid_note(p),
        budget_regret_table(p, rows, "regret_grid"),
        "Best (learning rate, K) point of the grid at each budget (xS: S times the lr):",
        pages.table(["function", "backbone", *FRACTIONS],
                    {(r["function"], r["backbone"]): [
                        function_label(r["function"]), r["backbone"], *r["best_grid"]]
                     for r in rows if "best_grid" in r}.values()),
        *final, "## Figures", pages.images(figures, report_path)], command="synthetic")
