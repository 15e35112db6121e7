"""JSON records, figures and the Markdown report of a synthetic run."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import anytime, common
from benchmarks import record as run_record
from benchmarks.synthetic import paper
from benchmarks.synthetic import protocol as protocols
from benchmarks.synthetic.methods import REFERENCE, variant
from benchmarks.synthetic.objectives import NOISY, OBJECTIVES
from benchmarks.synthetic.protocol import SWITCH, Protocol

TRACE_POINTS = 200  # trace samples per seed kept in the JSON file


def stem(protocol: Protocol) -> str:
    return "synthetic" if protocol.name == "main" else f"synthetic_{protocol.name}"


def function_label(name: str) -> str:
    if name == SWITCH:
        return "Rosenbrock → Levy"
    return (OBJECTIVES.get(name) or NOISY[name]).label


# --------------------------------------------------------------------------- records


def records(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per function x method x seed, traces subsampled."""
    out = []
    for r in results:
        steps = len(r["trace"]["step"])
        keep = np.unique(np.linspace(0, steps - 1, min(steps, TRACE_POINTS)).round().astype(int))
        for i, seed in enumerate(r["seeds"]):
            trace = {k: (np.asarray(v)[keep] if k == "step" else np.asarray(v)[i][keep]).tolist()
                     for k, v in r["trace"].items()}
            out.append({"function": r["function"], "method": r["method"], "label": r["label"],
                        "seed": seed, "final_gap": r["final_gap"][i],
                        "num_queries": r["num_queries"][i], "trace": trace})
    return out


def summary(r: dict[str, Any]) -> dict[str, Any]:
    gaps, calls = np.asarray(r["final_gap"]), np.asarray(r["num_queries"], np.float64)
    return {
        "gap_mean": float(gaps.mean()), "gap_std": float(gaps.std()),
        "calls_mean": float(calls.mean()), "calls_std": float(calls.std()),
        "calls_per_second": float(calls.sum() / r["run_seconds"]),
        "us_per_call": float(1e6 * r["run_seconds"] / calls.sum()),
    }


_PER_SEED = ("trace", "final_gap", "num_queries")
_SUMMARY = ("gap_mean", "gap_std", "calls_mean", "calls_std", "calls_per_second", "us_per_call")


def write_json(path: Path, protocol: Protocol, results, record: run_record.RunRecord) -> Path:
    units = [{k: v for k, v in r.items() if k not in _PER_SEED} | summary(r) for r in results]
    return common.write_json(path, {
        "record": record.as_dict(), "protocol": protocols.as_dict(protocol), "units": units,
        "records": records(results),
    })


def read_json(data: dict[str, Any]) -> tuple[Protocol, list[dict[str, Any]], run_record.RunRecord]:
    """The protocol, per-unit results and run record of a steps-mode JSON (the inverse of
    :func:`write_json`; traces are the subsampled ones the JSON keeps)."""
    results = []
    for unit in data["units"]:
        recs = [r for r in data["records"]
                if (r["function"], r["method"]) == (unit["function"], unit["method"])]
        recs.sort(key=lambda r: unit["seeds"].index(r["seed"]))
        trace = {k: [r["trace"][k] for r in recs] for k in recs[0]["trace"] if k != "step"}
        results.append({
            **{k: v for k, v in unit.items() if k not in _SUMMARY},
            "final_gap": [r["final_gap"] for r in recs],
            "num_queries": [r["num_queries"] for r in recs],
            "trace": {"step": recs[0]["trace"]["step"], **trace}})
    return (protocols.from_dict(data["protocol"]), results,
            run_record.RunRecord.from_dict(data["record"]))


# --------------------------------------------------------------------------- figures


def _grid(n: int):
    plt = common.pyplot()
    cols = min(n, 3)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.8 * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n])


def _smooth(y: np.ndarray, width: int) -> np.ndarray:
    if width <= 1 or len(y) < width:
        return y
    kernel = np.ones(width) / width
    return np.convolve(np.pad(y, (width // 2, width - 1 - width // 2), mode="edge"), kernel,
                       mode="valid")


def _by_function(results):
    out: dict[str, list] = {}
    for r in results:
        out.setdefault(r["function"], []).append(r)
    return out


def plot_curves(results, path: Path, x: str) -> Path:
    """Mean gap over seeds against oracle calls (``x="calls"``) or steps."""
    groups = _by_function(results)
    fig, axes = _grid(len(groups))
    for ax, (function, rs) in zip(axes, groups.items()):
        for r in rs:
            value = np.nanmean(np.asarray(r["trace"]["value"], np.float64), axis=0)
            xs = (np.mean(r["trace"]["num_queries"], axis=0) if x == "calls"
                  else np.asarray(r["trace"]["step"]))
            ax.plot(xs, value, label=r["label"], lw=1.3)
        ax.set_yscale("log")
        ax.set_title(function_label(function))
        ax.set_xlabel("oracle calls" if x == "calls" else "steps")
        ax.set_ylabel("gap f(x) - f*")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    return common.save_figure(fig, path)


def plot_diagnostic(results, path: Path, key: str, ylabel: str, methods=None) -> Path:
    """A per-step diagnostic (consistency score, threshold) averaged over seeds."""
    groups = _by_function(results)
    fig, axes = _grid(len(groups))
    for ax, (function, rs) in zip(axes, groups.items()):
        for r in rs:
            if methods is not None and r["method"] not in methods:
                continue
            y = np.nanmean(np.asarray(r["trace"][key], np.float64)[:, 1:], axis=0)
            steps = np.asarray(r["trace"]["step"][1:])
            ax.plot(steps, y, lw=0.5, alpha=0.3)
            ax.plot(steps, _smooth(y, max(1, len(y) // 40)), lw=1.5, label=r["label"],
                    color=ax.lines[-1].get_color())
        ax.set_title(function_label(function))
        ax.set_xlabel("steps")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    return common.save_figure(fig, path)


def plot_k_histogram(results, path: Path, method: str) -> Path:
    groups = _by_function(results)
    fig, axes = _grid(len(groups))
    for ax, (function, rs) in zip(axes, groups.items()):
        for r in rs:
            if r["method"] != method:
                continue
            k = np.asarray(r["trace"]["last_k"])[:, 1:].ravel()
            ax.hist(k, bins=np.arange(k.min(), k.max() + 2) - 0.5, rwidth=0.85)
            ax.set_title(f"{function_label(function)}: mean K {k.mean():.2f}")
        ax.set_xlabel("accepted K (sampled at the log points)")
        ax.set_ylabel("count")
    return common.save_figure(fig, path)


# --------------------------------------------------------------------------- markdown


def _fmt(x: float | None) -> str:
    if x is None or not np.isfinite(x):
        return "—"
    return f"{x:.3g}" if abs(x) < 1e4 else f"{x:,.0f}"


def _calls(x: float | None) -> str:
    return "—" if x is None else f"{x:,.0f}"


def main_tables(results, protocol: Protocol) -> str:
    """Final gap and calls per function, savings against R-AdaZO K=10, paper side by side."""
    parts = []
    full = protocol.preset == "paper"
    for function, rs in _by_function(results).items():
        ref = next((summary(r) for r in rs if r["method"] == REFERENCE), None)
        rows = []
        for r in rs:
            s = summary(r)
            saving = (f"{100 * (1 - s['calls_mean'] / ref['calls_mean']):.1f}%"
                      if ref and r["method"] != REFERENCE else "—")
            p_gap, p_calls = paper.MAIN.get((function, r["method"]), (None, None))
            rows.append([r["label"], f"{_fmt(s['gap_mean'])} ± {_fmt(s['gap_std'])}",
                         _calls(s["calls_mean"]), saving,
                         _fmt(p_gap) if full else "—", _calls(p_calls) if full else "—"])
        parts.append(f"### {function_label(function)}\n\n" + common.markdown_table(
            ["method", "final gap (mean ± std)", "oracle calls", "saving vs R-AdaZO K=10",
             "paper gap", "paper calls"], rows))
    return "\n\n".join(parts)


def speed_table(results) -> str:
    rows = []
    for function, rs in _by_function(results).items():
        ref = next((summary(r) for r in rs if r["method"] == REFERENCE), None)
        for r in rs:
            s = summary(r)
            ratio = f"{s['us_per_call'] / ref['us_per_call']:.2f}" if ref else "—"
            rows.append([function_label(function), r["label"], f"{r['compile_seconds']:.1f}",
                         f"{r['run_seconds']:.2f}", f"{s['calls_per_second']:,.0f}",
                         f"{s['us_per_call']:.3f}", ratio, f"{r['lane_utilisation']:.2f}"])
    return common.markdown_table(
        ["function", "method", "compile s", "run s", "calls/s", "µs/call",
         "cost/call vs R-AdaZO K=10", "lane use"], rows)


def ablation_table(results, protocol: Protocol) -> str:
    reference = paper.TABLES.get(protocol.name, {})
    full = protocol.preset == "paper"
    variants = {v.name: v for v in protocol.variants}
    rows = []
    for function, rs in _by_function(results).items():
        for r in sorted(rs, key=lambda r: list(variants).index(r["method"])):
            s = summary(r)
            # the ablated setting is named like the ablation (reset, tau0, controller)
            value = dict(variants[r["method"]].method.params).get(protocol.name)
            p_gap, p_calls = reference.get((function, value), (None, None))
            rows.append([function_label(function), r["label"],
                         f"{_fmt(s['gap_mean'])} ± {_fmt(s['gap_std'])}", _calls(s["calls_mean"]),
                         _fmt(p_gap) if full else "—", _calls(p_calls) if full else "—"])
    return common.markdown_table(["function", "variant", "final gap (mean ± std)",
                                  "oracle calls", "paper gap", "paper calls"], rows)


def trigger_metrics(results) -> str:
    """Queries to reach a common target, and loss drop per 1k queries (paper's metrics),
    per function."""
    rows = []
    for function, rs in _by_function(results).items():
        curves = {}
        for r in rs:
            value = np.mean(np.asarray(r["trace"]["value"], np.float64), axis=0)
            calls = np.mean(np.asarray(r["trace"]["num_queries"], np.float64), axis=0)
            curves[r["label"]] = (calls, value)
        target = max(v[-1] for _, v in curves.values())  # the worse final loss, reached by all
        for label, (calls, value) in curves.items():
            hit = calls[np.argmax(value <= target)]
            drop = (value[0] - value[-1]) / (calls[-1] / 1000)
            rows.append([function_label(function), label, f"{target:.4g}", f"{hit:,.0f}",
                         f"{drop:.3g}"])
    return common.markdown_table(["function", "variant", "target loss", "calls to reach it",
                                  "loss drop per 1k calls"], rows)


def seed_list(seeds) -> str:
    """``[0, 1, 2]``; a long run of consecutive seeds as ``0-999 (1,000 seeds)``."""
    seeds = list(seeds)
    if len(seeds) > 10 and seeds == list(range(seeds[0], seeds[0] + len(seeds))):
        return f"{seeds[0]}-{seeds[-1]} ({len(seeds):,} seeds)"
    return str(seeds)


def _record_lines(record: run_record.RunRecord) -> list[str]:
    return [f"Command: `{record.command}`", "", f"- {run_record.run_line(record)}",
            f"- {run_record.machine_line(record.machine)}"]


def header(protocol: Protocol, record: run_record.RunRecord) -> str:
    methods = ", ".join(v.display for v in protocol.variants)
    return "\n".join([
        *_record_lines(record),
        f"- Protocol: preset `{protocol.preset}`, d = {protocol.dim}, T = {protocol.steps:,} steps"
        f"{' per phase' if SWITCH in protocol.functions else ''}, seeds {seed_list(protocol.seeds)}, "
        f"lr {protocol.settings.lr}, betas ({protocol.settings.b1}, {protocol.settings.b2}), "
        f"mu {protocol.settings.mu}, eps {protocol.settings.eps}, central differences "
        "(StatZO: forward differences with one centre value a step; ZoAR: its forward "
        "averaged-baseline form, K calls a step).",
        f"- Methods: {methods}.",
        "- x0 ~ N(0, I) per seed, the same for every method; optimizer keys matched per seed.",
    ])


# --------------------------------------------------------------------------- budget mode


def budget_header(p, record: run_record.RunRecord) -> str:
    methods = ", ".join(v.display for v in p.variants)
    switch = (f" (the objective switches at {p.switch_at:,} calls; regret counts calls after "
              "it)" if p.switch_at else "")
    return "\n".join([
        *_record_lines(record),
        f"- Protocol: preset `{p.preset}`, d = {p.dim}, every run stops once it has spent "
        f"{p.budget:,} oracle calls{switch}; seeds {seed_list(p.seeds)}, lr {p.settings.lr}, "
        f"betas ({p.settings.b1}, {p.settings.b2}), mu {p.settings.mu}, eps {p.settings.eps}, "
        "central differences (StatZO: forward, one centre value a step).",
        f"- Methods: {methods}. auto_k runs at the library defaults everywhere.",
        "- x0 ~ N(0, I) per seed, the same for every method; optimizer keys matched per seed.",
    ])


def budget_regret_table(p, rows) -> str:
    """Regret per function, backbone and adaptive method at each budget, with the best fixed K."""
    fractions = ["1/64", "1/32", "1/16", "1/8", "1/4", "1/2", "1"]
    table = []
    for row in rows:
        table.append([function_label(row["function"]), row["backbone"], row["label"],
                      *(anytime.fmt(x) for x in row["regret"]), anytime.fmt(row["median"]),
                      anytime.fmt(row["max"])])
    span = "after the switch" if p.switch_at else "of the run"
    return (f"Budgets are fractions of the {p.budget - p.origin:,} calls {span}. "
            f"{anytime.rule()}\n\n"
            + common.markdown_table(["function", "backbone", "method", *fractions, "median",
                                     "max"], table))


def budget_ratio_table(p, rows) -> str:
    """Mean gap of each adaptive method over the envelope's at the same budget."""
    table = [[function_label(row["function"]), row["backbone"], row["label"],
              *(f"{x:.3g}" for x in row["gap_ratio"]), f"{row['gap_ratio_median']:.3g}"]
             for row in rows]
    return ("Mean gap divided by the best fixed K's mean gap at the same budget (1: as good; "
            "below 1: better). Where regret is ∞ this says by how much the method missed.\n\n"
            + common.markdown_table(["function", "backbone", "method", "1/64", "1/32", "1/16",
                                     "1/8", "1/4", "1/2", "1", "median"], table))


def budget_best_fixed(p, rows) -> str:
    """Which fixed K is the envelope at each budget (one row per function and backbone)."""
    seen, table = set(), []
    for row in rows:
        key = (row["function"], row["backbone"])
        if key not in seen:
            seen.add(key)
            table.append([function_label(row["function"]), row["backbone"], *row["best_fixed"]])
    return common.markdown_table(["function", "backbone", "1/64", "1/32", "1/16", "1/8", "1/4",
                                  "1/2", "1"], table)


def budget_final_table(results) -> str:
    rows = [[function_label(r["function"]), r["label"],
             f"{_fmt(np.mean(r['final_gap']))} ± {_fmt(np.std(r['final_gap']))}",
             _calls(np.mean(r["num_queries"])), f"{r['run_seconds']:.1f}"] for r in results]
    return common.markdown_table(["function", "method", "gap at the budget (mean ± std)",
                                  "calls spent", "run s"], rows)


def plot_budget_curves(p, results, path: Path, backbone: str) -> Path:
    """Mean gap against calls: fixed K thin, their envelope dashed, adaptive methods thick."""
    groups = _by_function(results)
    fig, axes = _grid(len(groups))
    grid = p.grid
    for ax, (function, rs) in zip(axes, groups.items()):
        fixed = {r["label"]: np.mean(r["curves"], axis=0) for r in rs
                 if r["fixed_k"] and r["backbone"] == backbone}
        for label, curve in fixed.items():
            ax.plot(grid, curve, lw=0.8, alpha=0.6, label=label)
        if fixed:
            env, _ = anytime.envelope(fixed)
            ax.plot(grid, env, "k--", lw=1.6, label="best fixed K (envelope)")
        for r in rs:
            if not r["fixed_k"] and r["backbone"] == backbone:
                ax.plot(grid, np.mean(r["curves"], axis=0), lw=2.0, label=r["label"])
        if p.switch_at:
            ax.axvline(p.switch_at, color="grey", lw=0.8)
        ax.set_yscale("log")
        _against_calls(ax, function, "gap")
    axes[0].legend(fontsize=6)
    return common.save_figure(fig, path)


def _against_calls(ax, function: str, ylabel: str) -> None:
    """Axes of a per-function panel with oracle calls on a log x axis."""
    ax.set_xscale("log")
    ax.set_title(function_label(function))
    ax.set_xlabel("oracle calls")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)


def plot_budget_k(p, results, path: Path) -> Path:
    """The adaptive methods' K against calls (mean over seeds)."""
    groups = _by_function(results)
    fig, axes = _grid(len(groups))
    for ax, (function, rs) in zip(axes, groups.items()):
        for r in rs:
            if not r["fixed_k"]:
                ax.plot(p.grid, np.mean(r["k_curves"], axis=0), lw=1.4, label=r["label"])
        _against_calls(ax, function, "K at the last step")
    axes[0].legend(fontsize=6)
    return common.save_figure(fig, path)


# --------------------------------------------------------------------------- pages


def _images(figures: list[tuple[str, Path]], report_path: Path) -> str:
    return "\n\n".join(
        f"**{t}**\n\n![{t}]({Path(os.path.relpath(p, report_path.parent)).as_posix()})"
        for t, p in figures)


def steps_figures(protocol: Protocol, results, folder: Path) -> list[tuple[str, Path]]:
    """The figures of a steps-mode run, drawn into ``folder``."""
    name = stem(protocol)
    if protocol.name == "main":
        fixed = {v.name for v in protocol.variants if v.fixed_k}
        return [
            ("Gap against oracle calls", plot_curves(
                results, folder / f"{name}_gap_vs_calls.png", "calls")),
            ("Gap against steps", plot_curves(
                results, folder / f"{name}_gap_vs_steps.png", "steps")),
            ("Momentum-consistency score cos(g_t, m_{t-1}) (thin: mean over seeds; thick: "
             "smoothed)", plot_diagnostic(
                results, folder / f"{name}_consistency.png", "consistency", "cos(g, m)",
                methods={"zoaq", *fixed})),
            ("ZoAQ threshold tau_t", plot_diagnostic(
                results, folder / f"{name}_tau.png", "tau", "tau", methods={"zoaq"})),
            ("ZoAQ accepted budgets", plot_k_histogram(
                results, folder / f"{name}_k_hist.png", "zoaq")),
        ]
    figures = [("Gap against oracle calls", plot_curves(
        results, folder / f"{name}_gap_vs_calls.png", "calls"))]
    if protocol.name == "switch":
        figures += [
            ("Gap against steps (the objective switches half way)", plot_curves(
                results, folder / f"{name}_gap_vs_steps.png", "steps")),
            ("ZoAQ threshold tau_t", plot_diagnostic(
                results, folder / f"{name}_tau.png", "tau", "tau", methods={"zoaq"})),
        ]
    return figures


def steps_page(protocol: Protocol, results, record: run_record.RunRecord, out: Path,
               report_path: Path) -> Path:
    """Figures (into ``out/synthetic``) and the Markdown page of a steps-mode run."""
    figures = steps_figures(protocol, results, out / "synthetic")
    parts = [header(protocol, record)]
    if protocol.name == "main":
        parts += ["## Final gap and oracle calls",
                  f"Savings are against {variant(REFERENCE).display}. Paper columns "
                  "are filled for the paper preset only.",
                  main_tables(results, protocol), "## Figures", _images(figures, report_path),
                  "## Speed",
                  "Run time excludes compilation; each unit runs all its seeds as one "
                  "vmapped program on one pinned core. Lane use is the sampled share of "
                  "while-loop lane work that was useful: under vmap the expansion loop runs "
                  "until the slowest seed accepts, and the others compute (uncounted) "
                  "evaluations meanwhile.", speed_table(results)]
    else:
        parts += ["## Results", ablation_table(results, protocol)]
        if protocol.name == "trigger":
            parts += ["Paper (d = 10,000): the norm trigger needs 28.1% more queries to the "
                      "same target; loss drop per 1k queries 1.9 (cosine) vs 1.3 (norm).",
                      trigger_metrics(results)]
        parts += ["## Figures", _images(figures, report_path), "## Speed",
                  speed_table(results)]
    title = ("Synthetic benchmark" if protocol.name == "main"
             else f"Synthetic ablation: {protocol.name}")
    return common.write_markdown(report_path, title, "\n\n".join(parts), "synthetic")


BUDGET_TITLES = {
    "budget": "Synthetic benchmark at equal oracle calls",
    "budget_switch": "Synthetic, equal calls: the objective switch",
    "budget_auto_k": "Synthetic, equal calls: auto_k's sensitivity to its parameters",
}


def budget_page(p, results, rows, record: run_record.RunRecord, out: Path,
                report_path: Path) -> Path:
    """Figures (into ``out/synthetic``) and the Markdown page of a budget-mode run."""
    name = f"synthetic_{p.name}"
    figures = [(f"Gap against oracle calls, {bb} backbone", plot_budget_curves(
        p, results, out / "synthetic" / f"{name}_{bb}.png", bb))
        for bb in ("radazo", "zo_adamm") if any(r["backbone"] == bb for r in results)]
    figures.append(("K against oracle calls", plot_budget_k(
        p, results, out / "synthetic" / f"{name}_k.png")))
    parts = [budget_header(p, record),
             "## Query regret against the best fixed K", budget_regret_table(p, rows),
             "## Gap against the best fixed K's at the same budget", budget_ratio_table(p, rows),
             "Best fixed K (the envelope) at each budget:", budget_best_fixed(p, rows),
             "## Gap at the budget", budget_final_table(results), "## Figures",
             _images(figures, report_path)]
    return common.write_markdown(report_path, BUDGET_TITLES[p.name], "\n\n".join(parts),
                                 "synthetic")
