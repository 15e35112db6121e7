"""The attack benchmark's Markdown report and figures, rendered from the whole
``attack.json.xz`` (:mod:`benchmarks.attack.results`), so every number comes with the
command and machine that produced it; hand-written analysis lives outside the generated
block (:func:`benchmarks.pages.write_markdown`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import anytime, pages
from benchmarks import record as run_record
from benchmarks.attack import methods as methods_lib
from benchmarks.attack.results import (GROUP, anytime_regret, by_group, has_comparison,
                                       is_extra, summarize)

TITLE = "Black-box adversarial attacks (MNIST, CIFAR-10)"

# The paper's numbers (mean, std of queries over five seeds; targeted, as the ZoAR code's
# attack, see the notes). Keys are our method specs.
PAPER = {
    "mnist": {"radazo": (1527, 701), "statzo": (1996, 1231), "zoar": (1089.2, 92.3),
              "zoar:k=2": (742.8, 99.9), "zoaq": (320, 45)},
    "cifar10": {"radazo": (1006, 100), "statzo": (964, 28), "zoar": (802.0, 38.0),
                "zoar:k=2": (755.4, 39.1), "zoaq": (625, 15)},
}
PAPER_NHIST = {"mnist": {4: (374.4, 126.9), 6: (362.0, 57.6), 8: (319.6, 44.8),
                         10: (335.6, 65.7), 12: (349.2, 88.5)}}
PAPER_KMAX = {"mnist": {2: (1996, 1231), 4: (4089, 953), 6: (5137, 2004), 8: (3937, 1802),
                        10: (4572, 2189)},
              "cifar10": {2: (964, 28), 4: (1134, 73)}}

PAPER_SETTING = ("targeted", "paper")  # the only (goal, protocol) the paper's numbers are for


def _fmt(x: float, digits: int = 0) -> str:
    return pages.num(x, f"{{:,.{digits}f}}")


def _paper(table: dict, group: tuple, key: Any) -> str:
    """The paper's ``mean ± std`` of ``key`` in ``table``, if it reports ``group``'s setting."""
    dataset, protocol, goal = group
    pair = table.get(dataset, {}).get(key) if (goal, protocol) == PAPER_SETTING else None
    return pages.MISSING if pair is None else pages.pm(*pair, _fmt)


def _run_of(results: dict, group: tuple, method: str) -> dict | None:
    return next((run for run in reversed(results["runs"])
                 if tuple(run[k] for k in GROUP) == group and method in run["methods"]), None)


def _order(specs: Iterable[str]) -> list[str]:
    """Main methods in the paper's order, then the sweeps and comparisons in their own
    order, then others."""
    known = list(methods_lib.ALL_METHODS)
    for members in (*methods_lib.SWEEPS.values(), *methods_lib.COMPARISONS.values()):
        known += [m for m in members if m not in known]
    rank = {spec: i for i, spec in enumerate(known)}
    return sorted(specs, key=lambda s: (rank.get(s, len(rank)), s))


PROTOCOLS = {"paper": "the paper's protocol: test image 1, five seeds",
             "extended": "the extended protocol: 100 test images, a 2,000-iteration cap"}
"""Each protocol's page: ``paper`` on the report itself, any other on
``<report stem>_<protocol>.md`` beside it."""


def _answer(groups: dict[tuple, dict[str, list[dict]]]) -> str:
    """Per main method (a row) and group (a column), the mean queries of its successful
    attacks and its success rate."""
    specs = _order(dict.fromkeys(s for by in groups.values() for s in by if not is_extra(s)))
    cells = {group: {spec: summarize(by[spec]) for spec in by if spec in specs}
             for group, by in groups.items()}
    rows = [[methods_lib.label(spec), *(
        f"{cells[g][spec]['mean']:,.0f} ({cells[g][spec]['success_rate']:.0%})"
        if spec in cells[g] else pages.MISSING for g in groups)] for spec in specs]
    return pages.table(["method", *(f"{d.upper()} {p}, {goal}" for d, p, goal in groups)],
                       rows) + "\n\n" + pages.columns({
        "a cell": "queries (oracle calls until success), the mean over the successful attacks, "
                  "and the share of attacks that succeeded within the iteration cap; the "
                  "sections below have the spread, the median, the like-for-like mean on the "
                  "attacks every method solved and the paper's numbers"})


def write(results: dict, report_path: Path, figures: Path) -> Path:
    """Writes the report page of ``results`` (the ``paper`` protocol's groups) and a page
    beside it for every other protocol's (:data:`PROTOCOLS`), keeping the hand-written text
    after their generated blocks; returns the report.

    ``figures`` is the run folder (``attack.json.xz``, the example and consistency figures
    the runs drew). The figures drawn from the records go next to the report, never into
    a run folder the report is not in (a committed results folder stays as it is).
    """
    same = report_path.parent.resolve() == figures.resolve()
    drawn = figures if same else report_path.parent / report_path.stem
    setup = ("Queries are oracle calls until success: one centre call per iteration plus the "
             "estimator's perturbed calls (forward differences), counted up to and including "
             "the iteration whose centre value succeeds. Mean ± std (population std, as in the "
             "paper) and median are over the successful attacks. Every section names the "
             "commands, machine and load its rows were measured with.")
    groups = by_group(results)
    protocols = dict.fromkeys(g[1] for g in sorted(groups, key=lambda g: g[1] != "paper"))
    paths = {p: report_path if p == "paper" or len(protocols) == 1
             else report_path.with_name(f"{report_path.stem}_{p}.md") for p in protocols}
    for protocol in reversed(protocols):  # the report last: its links name the others
        mine = {g: groups[g] for g in sorted(groups, key=lambda g: (g[0], g[2]))
                if g[1] == protocol}
        path = paths[protocol]
        parts = [part for group, by in mine.items()
                 for part in _group(results, group, by, path, figures, drawn)]
        others = [f"[{protocol}]({pages.link(paths[p], path)})" for p in protocols
                  if p != protocol]
        run = list(dict.fromkeys(c for group, by in mine.items() for c in _commands(
            results, group, [s for s in _order(by) if not is_extra(s)])[:1]))
        what = PROTOCOLS.get(protocol, f"the `{protocol}` protocol")
        pages.page(path, TITLE if path == report_path else f"{TITLE}: {protocol} protocol",
                   question=f"How many queries does each method need to attack the "
                            f"{' and '.join(dict.fromkeys(g[0].upper() for g in mine))} "
                            f"model, with {what} ("
                            f"{' and '.join(dict.fromkeys(g[2] for g in mine))})?",
                   answer=_answer(mine), run=run,
                   setup=setup + (f" The other protocols: {', '.join(others)}." if others
                                  else ""),
                   sections=parts, command="attack")
    return report_path


COLUMNS = pages.columns({
    "Success": "share of the attacks that succeeded within the iteration cap",
    "Success within N queries": "where some failed, the share that succeeded within the "
                                "smallest query count every method reached",
    "Queries mean ± std, Median": "over the method's own successful attacks",
    "Mean on the N attacks all solved": "mean queries on the attacks every method of the "
                                        "table solved, the like-for-like comparison. Fewer "
                                        "queries are bought with fewer perturbed calls an "
                                        "iteration: read them with Success (a method that "
                                        "fails on hard attacks has a lower mean over the "
                                        "rest)",
    "Calls/iter": "queries per iteration, the centre call plus the perturbed ones",
    "Paper": "the paper's queries (targeted, test image 1, five seeds)"})


def _commands(results: dict, group: tuple, specs: Iterable[str]) -> list[str]:
    """The commands of the runs that produced the rows of ``specs``, each once."""
    runs = (_run_of(results, group, spec) for spec in specs)
    return list(dict.fromkeys(r["record"]["command"] for r in runs if r is not None))


def _group(results: dict, group: tuple, by_method: dict[str, list[dict]], report_path: Path,
           figures: Path, drawn: Path) -> list[str]:
    """The sections of one (dataset, protocol, goal): run facts, tables, figures."""
    dataset, protocol, goal = group
    main = [s for s in _order(by_method) if not is_extra(s)]
    parts = [f"## {dataset.upper()}, `{protocol}` protocol, {goal}"]
    run = _run_of(results, group, main[0] if main else next(iter(by_method)))
    if run is not None:
        same = [r["record"] for r in results["runs"] if tuple(r[k] for k in GROUP) == group
                and r["record"]["started"] == run["record"]["started"]]
        parts += _run_facts(run, _commands(results, group, _order(by_method)),
                            max(r["wall_s"] for r in same), max(r["load_after"] or 0 for r in same))
    common_keys = set.intersection(*(
        {(r["image"], r["seed"]) for r in by_method[spec] if r["success"]} for spec in main
    )) if main else set()
    # With failures, the iteration cap is a different query cap for each method; success
    # rates are comparable at the smallest query count every method reached.
    failures = any(not r["success"] for spec in main for r in by_method[spec])
    budget = min(max(r["num_queries"] for r in by_method[spec]) for spec in main) if main else 0
    rows = []
    for spec in main:
        s = summarize(by_method[spec])
        within = np.mean([r["success"] and r["num_queries"] <= budget for r in by_method[spec]])
        shared = [r["num_queries"] for r in by_method[spec]
                  if (r["image"], r["seed"]) in common_keys]
        rows.append([methods_lib.label(spec), f"`{spec}`", f"{s['success_rate']:.0%}",
                     *([f"{within:.0%}"] if failures else []),
                     pages.pm(s["mean"], s["std"], _fmt), _fmt(s["median"]),
                     _fmt(float(np.mean(shared)) if shared else float("nan")),
                     _fmt(s["calls_per_step"], 2), _paper(PAPER, group, spec)])
    parts += [COLUMNS, pages.table(
        ["Method", "Spec", "Success",
         *([f"Success within {budget:,} queries"] if failures else []), "Queries mean ± std",
         "Median", f"Mean on the {len(common_keys)} attacks all solved", "Calls/iter",
         "Paper (targeted, image 1)"], rows)]
    parts += _sweep_tables(group, by_method)
    regret = anytime_regret(by_method) if has_comparison(by_method) else None
    if regret is not None:
        parts += _anytime_tables(regret, _commands(results, group,
                                                   [*regret["methods"], *regret["grid"]]))
    parts += _speed_table(results, group, _order(by_method))
    title = f"{dataset.upper()} {protocol} protocol, {goal}"
    tag = f"{dataset}_{protocol}_{goal}"
    if main:
        plot_success_curve(drawn / f"success_{tag}.png", {s: by_method[s] for s in main}, title)
        plot_queries(drawn / f"queries_{tag}.png", {s: by_method[s] for s in main}, title)
    if regret is not None:
        plot_success_curve(drawn / f"anytime_{tag}.png",
                           {s: by_method[s] for s in regret["methods"]},
                           f"{title}: adaptive and fixed budgets",
                           _anytime_styles(regret["methods"]))
    for folder, name, caption in (
            (drawn, "success", "Success rate against the query budget"),
            (drawn, "anytime", "Adaptive and fixed budgets: success against the query budget"),
            (drawn, "queries", "Query distributions"),
            (figures, "examples", "Original, adversarial and perturbation"),
            (figures, "consistency", "Momentum consistency cos(g_t, m_{t-1})")):
        png = folder / f"{name}_{tag}.png"
        if png.exists():
            parts.append(f"![{caption}]({pages.link(png, report_path)})")
    return parts


def _anytime_styles(specs: Iterable[str]) -> dict[str, dict]:
    """Adaptive methods in thick solid lines; fixed K coloured by family, dashed by K."""
    dashes = {1: ":", 2: "--", 4: "-."}
    styles, adaptive = {}, 0
    for spec in specs:
        method = methods_lib.parse(spec)
        if spec in methods_lib.FIXED_K:
            family = methods_lib.FAMILIES.index(method.base)
            styles[spec] = {"color": f"C{3 + family}", "lw": 1.2,
                            "linestyle": dashes.get(method.get("k"), "-")}
        else:
            styles[spec] = {"color": f"C{adaptive}", "lw": 2.2}
            adaptive += 1
    return styles


def _family_name(base: str) -> str:
    """``"R-AdaZO"`` for ``"radazo"``: the label of a fixed-K family without its K."""
    return methods_lib.label(base).rsplit(" K=", 1)[0]


def _anytime_tables(regret: dict[str, Any], commands: Sequence[str] = ()) -> list[str]:
    """The fixed-K grid and the adaptive methods' regret table of :func:`anytime_regret`,
    with the ``commands`` that produced their records."""
    methods = regret["methods"]
    parsed = {s: methods_lib.parse(s) for s in methods if "regret" not in methods[s]}
    fixed = {(m.base, m.get("k")): s for s, m in parsed.items()}  # the grid's cells
    families = list(dict.fromkeys(base for base, _ in fixed))
    ks = sorted({k for _, k in fixed})
    grid = []
    for base in families:
        row = [_family_name(base)]
        for k in ks:
            spec = fixed.get((base, k))
            row.append(pages.MISSING if spec is None else pages.bold(
                f"{_fmt(methods[spec]['mean'])} ({methods[spec]['success_rate']:.0%})",
                spec == regret["family_best"][base]))
        grid.append([*row, _fmt(regret["family_oracle"][base])])
    best = regret["best_fixed"]
    best_name = "none" if best is None else f"{methods_lib.label(best)} (`{best}`)"
    # the grid ran when a point off the dataset's lr is present
    with_grid = regret.get("best_grid") is not None and any(
        methods_lib.parse(spec).get("lr_scale") != 1.0 for spec in regret["grid"])
    rows = [[methods_lib.label(spec), f"`{spec}`", f"{m['success_rate']:.0%}", _fmt(m["mean"]),
             _fmt(m["calls_per_step"], 2), _regret(m["regret"]), _regret(m["median_regret"]),
             *(_regret(m["family_regret"][base]) for base in families),
             *([_regret(m["grid_regret"])] if with_grid else [])]
            for spec, m in methods.items() if "regret" in m]
    excluded = regret["excluded"]
    return [
        f"Anytime comparison: queries to success of the adaptive budgets against fixed K. "
        f"Only the {regret['common_attacks']} of {regret['attacks']} attacks that every "
        f"fixed K and every adaptive budget of the original comparison (ZoAQ, StatZO, "
        f"auto_k) solved within the cap are counted; a method added since (the baselines, "
        f"tuning_free) that failed one of them has no mean (—) and regret ∞"
        + (f" (the {len(excluded)} others are listed under `anytime` in `attack.json.xz`)"
           if excluded else "")
        + "; success rates are over all attacks. "
        + "".join(f"Command: `{c}`. " for c in commands)
        + "Fixed K: mean queries on the counted "
        "attacks (success rate), the best of each family in bold; the last column takes "
        "each attack's best K of the family after the fact (no fixed K can beat it).",
        pages.table(["Family", *(f"K={k}" for k in ks), "Per-attack best K"], grid),
        f"Query regret = mean queries / those of the best fixed K in hindsight, "
        f"{best_name}; the median is over the per-attack ratios against the same method. "
        f"Per family, against its best K: "
        + ", ".join("none" if b is None else methods_lib.label(b)
                    for b in regret["family_best"].values()) + ".",
        *(_grid_table(regret) if with_grid else []),
        pages.table(
            ["Method", "Spec", "Success", "Mean queries", "Calls/iter", "Query regret",
             "Median per-attack regret",
             *(f"Regret vs {_family_name(base)} best K" for base in families),
             *(["Regret vs (lr, K) grid"] if with_grid else [])],
            rows)]


def _regret(x: float) -> str:
    """A query regret: two decimals, ∞ for a failed attack, — when nothing counts."""
    return pages.MISSING if np.isnan(x) else anytime.fmt(x)


def _grid_table(regret: dict[str, Any]) -> list[str]:
    """The (learning rate, K) grid of R-AdaZO: mean queries on the counted attacks (success
    rate) of every point run, the best point in bold."""
    grid, best = regret["grid"], regret["best_grid"]
    scales = sorted({methods_lib.parse(s).get("lr_scale") for s in grid})
    ks = sorted({methods_lib.parse(s).get("k") for s in grid})
    rows = []
    for scale in scales:
        row = [f"x{scale:g}"]
        for k in ks:
            spec = methods_lib.parse(f"radazo:k={k},lr_scale={scale}").spec
            e = grid.get(spec)
            row.append(pages.MISSING if e is None else pages.bold(
                f"{_fmt(e['mean'])} ({e['success_rate']:.0%})", spec == best))
        rows.append(row)
    failed = regret["grid_failed"]
    return [
        "The (learning rate, K) grid of R-AdaZO: the dataset's lr times the row's factor, "
        "K = the column's; mean queries on the counted attacks (success rate over all "
        "attacks); a point that failed a counted attack (—, or no mean) cannot be the best"
        + (f" ({', '.join(f'`{s}`' for s in failed)})" if failed else "")
        + ". The best point in hindsight among these and the fixed K above: "
        + f"{methods_lib.label(best)} (`{best}`). Methods told the budget are told "
        + f"{methods_lib.TOLD_BUDGET:,} calls.",
        pages.table(["lr \\ K", *(f"K={k}" for k in ks)], rows)]


def _run_facts(run: dict, commands: list[str], wall: float, load_after: float) -> list[str]:
    """The facts of ``run`` (the run of the first method shown) and the commands of every
    run whose results the group's tables show."""
    model = run["model"]
    # the group's: its slowest method's wall time, the highest load at a method's end
    record = dataclasses.replace(run_record.RunRecord.from_dict(run["record"]), wall_s=wall,
                                 load_after=load_after)
    facts = "  \n".join([
        f"Model: {model['name']} trained on `{model['source']}`, test accuracy "
        f"{model['test_accuracy']:.2%} on {model['num_test']} test images, weights SHA-256 "
        f"`{model['weights_sha256'][:12]}…`; eps = {run['eps']}, "
        f"cap {run['config']['max_steps']:,} iterations.",
        f"{run_record.machine_line(record.machine)} {run['workers']} worker(s), width "
        f"{run['config']['width']}, chunk {run['config']['chunk']}.",
        run_record.run_line(record)])
    if len(commands) == 1:
        return [f"Command: `{commands[0]}`  \n{facts}"]
    return ["Commands (the rows below come from these runs; the machine, load and wall time "
            "are those of the first):", pages.bullets(f"`{c}`" for c in commands), facts]


def _sweep_tables(group: tuple, by_method: dict[str, list[dict]]) -> list[str]:
    parts = []
    for sweep, param, paper, title in (
        ("nhist", "n_hist", PAPER_NHIST, "ZoAQ history window N_hist"),
        ("kmax", "k_max", PAPER_KMAX, "StatZO cap K_max (classical norm test, R-AdaZO backbone)")):
        present = [s for s in methods_lib.SWEEPS[sweep] if s in by_method]
        if len(present) < 2:
            continue
        rows = []
        for spec in present:
            value, s = methods_lib.parse(spec).get(param), summarize(by_method[spec])
            rows.append([value, f"{s['success_rate']:.0%}", pages.pm(s["mean"], s["std"], _fmt),
                         _fmt(s["median"]),
                         _fmt(s["calls_per_step"], 2), _paper(paper, group, value)])
        parts += [f"Sweep: {title}.", pages.table(
            [param, "Success", "Queries mean ± std", "Median", "Calls/iter", "Paper (targeted)"],
            rows)]
    return parts


def _speed_table(results: dict, group: tuple, specs: list[str]) -> list[str]:
    runs = {spec: run["methods"][spec] for spec in specs
            if (run := _run_of(results, group, spec)) is not None}
    rows = [[f"`{spec}`", m["attacks"], f"{m['seconds']:.1f}",
             f"{m['attacks'] / m['seconds']:.2f}", f"{m['calls'] / m['seconds']:,.0f}",
             f"{m['lane_steps_executed']:,}", f"{m['lane_steps_useful']:,}",
             f"{1 - m['lane_steps_useful'] / max(m['lane_steps_executed'], 1):.1%}"]
            for spec, m in runs.items()]
    return ["Speed (wall time per method includes compilation; with several workers it is "
            "the slowest worker's share):", pages.table(
                ["Method", "Attacks", "Seconds", "Attacks/s", "Calls/s", "Lane-iters executed",
                 "Useful", "Waste"], rows)] if rows else []


def plot_queries(path: Path, by_method: dict[str, list[dict]], title: str) -> Path:
    """Per-method distribution of queries (successful attacks; failures marked at the cap)."""
    plt = pages.pyplot()
    specs = list(by_method)
    fig, ax = plt.subplots(figsize=(1.6 + 1.3 * len(specs), 4.2))
    rng = np.random.default_rng(0)
    for i, spec in enumerate(specs):
        q = np.array([r["num_queries"] for r in by_method[spec]], float)
        ok = np.array([r["success"] for r in by_method[spec]], bool)
        if ok.any():
            ax.boxplot([q[ok]], positions=[i], widths=0.5, showfliers=False)
        ax.scatter(i + rng.uniform(-0.18, 0.18, ok.sum()), q[ok], s=8, alpha=0.5)
        if (~ok).any():
            ax.scatter(np.full((~ok).sum(), i), q[~ok], marker="x", color="red",
                       label="failed (cap)")
    ax.set_xticks(range(len(specs)), [methods_lib.label(s) for s in specs],
                  rotation=25, ha="right", fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("queries until success")
    ax.set_title(title, fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(handles[:1], labels[:1], fontsize=7)
    return pages.save_figure(fig, path)


def plot_success_curve(path: Path, by_method: dict[str, list[dict]], title: str,
                       styles: dict[str, dict] | None = None) -> Path:
    """Fraction of attacks that succeeded within a query budget, per method (``styles``:
    line keyword arguments per spec)."""
    lines = []
    for spec, records in by_method.items():
        q = np.sort([r["num_queries"] for r in records if r["success"]])
        lines.append((np.concatenate([[1], q]), np.arange(len(q) + 1) / len(records),
                      methods_lib.label(spec), {"where": "post", **(styles or {}).get(spec, {})}))
    return pages.curves(path, [(title, lines, {})], size=(6.5, 3.8), title_size=10,
                        xlabel="query budget", ylabel="fraction of attacks succeeded",
                        ylim=(0, 1))


def plot_examples(path: Path, image0: np.ndarray, adversarial: dict[str, np.ndarray],
                  succeeded: dict[str, bool], eps: float, title: str) -> Path:
    """The clean image, then per method its final image (top) and perturbation."""
    plt = pages.pyplot()
    cols = 1 + len(adversarial)
    fig, axes = plt.subplots(2, cols, figsize=(1.5 * cols, 3.6), squeeze=False)
    gray = image0.shape[-1] == 1

    def show(ax, img):
        ax.imshow(img[..., 0] if gray else np.clip(img, 0, 1), cmap="gray" if gray else None,
                  vmin=0, vmax=1)

    show(axes[0, 0], image0)
    axes[0, 0].set_title("original", fontsize=7)
    axes[1, 0].axis("off")
    for c, (spec, adv) in enumerate(adversarial.items(), start=1):
        show(axes[0, c], adv)
        verdict = "success" if succeeded[spec] else "failed (cap)"
        axes[0, c].set_title(f"{methods_lib.label(spec)}\n{verdict}", fontsize=6)
        axes[1, c].imshow((adv - image0).mean(-1), cmap="seismic", vmin=-eps, vmax=eps)
    for ax in axes.flat:
        ax.set_xticks([]), ax.set_yticks([])
    axes[1, 1].set_ylabel(f"perturbation\n(±{eps})", fontsize=7)
    fig.suptitle(title, fontsize=8)
    return pages.save_figure(fig, path)


def plot_traces(path: Path, traces: dict[str, np.ndarray], ylabel: str, title: str,
                smooth: int = 20) -> Path:
    """Mean over attacks of a per-iteration trace (NaN after an attack stopped), smoothed."""
    lines = []
    for spec, trace in traces.items():
        alive = np.isfinite(trace).sum(0)
        mean = np.where(alive > 0, np.nansum(trace, 0) / np.maximum(alive, 1), np.nan)
        valid = np.flatnonzero(np.isfinite(mean))
        if len(valid) > smooth:
            mean = np.convolve(np.nan_to_num(mean[: valid[-1] + 1]), np.ones(smooth) / smooth,
                               mode="valid")
        lines.append((np.arange(len(mean)), mean, methods_lib.label(spec), {"lw": 1.2}))
    return pages.curves(path, [(title, lines, {})], size=(7, 3.6), title_size=10,
                        xscale="linear", xlabel="iteration", ylabel=ylabel)
