"""Results of the attack benchmark: records, summaries, figures and the Markdown report.

``attack.json.xz`` accumulates the results of every ``python -m benchmarks attack`` run
written to the same folder: ``records`` (one per method x image x seed x goal x
protocol x dataset) and ``runs`` (settings, machine, timings, the exact command). A new
run replaces the records and the run entry of the same (dataset, protocol, goal,
method). The report is rendered from the whole file, so every number in it comes with
the command and machine that produced it; hand-written analysis lives in the report page
outside its generated block (:func:`benchmarks.pages.write_markdown`).
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

GROUP = ("dataset", "protocol", "goal")
PAPER_SETTING = ("targeted", "paper")  # the only (goal, protocol) the paper's numbers are for


def merge(existing: dict[str, Any] | None, records: list[dict], run: dict) -> dict[str, Any]:
    """``existing`` results with those of ``run`` replacing any of the same group and method."""
    existing = existing or {"records": [], "runs": []}
    key = {k: run[k] for k in GROUP}
    new_methods = set(run["methods"])

    def replaced(item: dict, methods: Iterable[str]) -> bool:
        return all(item[k] == v for k, v in key.items()) and bool(set(methods) & new_methods)

    kept_records = [r for r in existing["records"] if not replaced(r, [r["method"]])]
    kept_runs = []
    for old in existing["runs"]:
        if replaced(old, old["methods"]):
            old = {**old, "methods": {m: v for m, v in old["methods"].items()
                                      if m not in new_methods}}
        if old["methods"]:
            kept_runs.append(old)
    return {"records": kept_records + records, "runs": kept_runs + [run]}


def summarize(records: Sequence[dict]) -> dict[str, Any]:
    """Success rate and query statistics of one method's records."""
    queries = np.array([r["num_queries"] for r in records], float)
    success = np.array([r["success"] for r in records], bool)
    steps = np.array([r["steps"] for r in records], float)
    ok = queries[success]
    return {
        "attacks": len(records),
        "success_rate": float(success.mean()),
        "mean": float(ok.mean()) if ok.size else float("nan"),
        "std": float(ok.std()) if ok.size else float("nan"),
        "median": float(np.median(ok)) if ok.size else float("nan"),
        "mean_all": float(queries.mean()),
        "calls_per_step": float(queries.sum() / max(steps.sum(), 1)),
    }


def _fmt(x: float, digits: int = 0) -> str:
    return pages.num(x, f"{{:,.{digits}f}}")


def _paper(pair: tuple[float, float] | None) -> str:
    return pages.MISSING if pair is None else pages.pm(*pair, "{:,.0f}")


def _groups(results: dict) -> dict[tuple, dict[str, list[dict]]]:
    groups: dict[tuple, dict[str, list[dict]]] = {}
    for r in results["records"]:
        groups.setdefault(tuple(r[k] for k in GROUP), {}).setdefault(r["method"], []).append(r)
    return groups


def _run_of(results: dict, group: tuple, method: str) -> dict | None:
    for run in reversed(results["runs"]):
        if tuple(run[k] for k in GROUP) == group and method in run["methods"]:
            return run
    return None


def _order(specs: Iterable[str]) -> list[str]:
    """Main methods in the paper's order, then the sweeps and comparisons in their own
    order, then others."""
    known = list(methods_lib.ALL_METHODS)
    for members in (*methods_lib.SWEEPS.values(), *methods_lib.COMPARISONS.values()):
        known += [m for m in members if m not in known]
    rank = {spec: i for i, spec in enumerate(known)}
    return sorted(specs, key=lambda s: (rank.get(s, len(rank)), s))


def write(results: dict, report_path: Path, figures: Path, drawn: Path) -> Path:
    """Writes the report page of ``results``, keeping the hand-written text around its
    generated block.

    ``figures`` is the run folder (``attack.json.xz``, the example and consistency figures
    the runs drew); the figures drawn from the records are written to ``drawn``.
    """
    parts = [
        "Generated by `python -m benchmarks attack` from the `attack.json.xz` next to the "
        "figures; every table names the commands, machine and load it was measured with. "
        "Queries are oracle calls until success: one centre call per iteration plus the "
        "estimator's perturbed calls (forward differences), counted up to and including "
        "the iteration whose centre value succeeds. Mean ± std (population std, as in the "
        "paper) and median are over the successful attacks."]
    groups = _groups(results)
    for group in sorted(groups, key=lambda g: (g[0], g[1] != "paper", g[2])):
        parts += _group(results, group, groups[group], report_path, figures, drawn)
    return pages.page(report_path, TITLE, parts, "attack")


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
        paper = PAPER.get(dataset, {}).get(spec) if (goal, protocol) == PAPER_SETTING else None
        rows.append([methods_lib.label(spec), f"`{spec}`", f"{s['success_rate']:.0%}",
                     *([f"{within:.0%}"] if failures else []), _queries(s), _fmt(s["median"]),
                     _fmt(float(np.mean(shared)) if shared else float("nan")),
                     _fmt(s["calls_per_step"], 2), _paper(paper)])
    parts += [COLUMNS, pages.table(
        ["Method", "Spec", "Success",
         *([f"Success within {budget:,} queries"] if failures else []), "Queries mean ± std",
         "Median", f"Mean on the {len(common_keys)} attacks all solved", "Calls/iter",
         "Paper (targeted, image 1)"], rows)]
    parts += _sweep_tables(dataset, goal, protocol, by_method)
    regret = anytime_regret(by_method) if has_comparison(by_method) else None
    if regret is not None:
        parts += _anytime_tables(regret, _commands(results, group, regret["methods"]))
    parts += _speed_table(results, group, _order(by_method))
    title = f"{dataset.upper()} {protocol} protocol, {goal}"
    tag = f"{dataset}_{protocol}_{goal}"
    if main:
        plot_success_curve(drawn / f"success_{tag}.png",
                           {spec: by_method[spec] for spec in main}, title)
        plot_queries(drawn / f"queries_{tag}.png", {spec: by_method[spec] for spec in main},
                     title)
    if regret is not None:
        plot_success_curve(drawn / f"anytime_{tag}.png",
                           {spec: by_method[spec] for spec in regret["methods"]},
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


def is_extra(spec: str) -> bool:
    """Whether ``spec`` belongs to a sweep or a comparison but not to the main method list."""
    return spec not in methods_lib.ALL_METHODS and any(
        spec in members
        for members in (*methods_lib.SWEEPS.values(), *methods_lib.COMPARISONS.values()))


def has_comparison(by_method: dict[str, list[dict]]) -> bool:
    """Whether the anytime comparison was run: a fixed-K method outside the main list
    (such as ``radazo:k=4``) is present."""
    return any(spec in by_method and is_extra(spec) for spec in methods_lib.FIXED_K)


def anytime_regret(by_method: dict[str, list[dict]],
                   adaptive: Sequence[str] = methods_lib.ADAPTIVE,
                   fixed: Sequence[str] = methods_lib.FIXED_K) -> dict[str, Any] | None:
    """Query regret of each adaptive method against the best fixed K in hindsight.

    Only the attacks (image, seed) that every compared method (those of ``adaptive`` and
    ``fixed`` present in ``by_method``) solved are counted; the others are listed under
    ``excluded`` (the success rates, over all attacks, count them as failures). On the
    counted attacks, the best fixed method is the one of ``fixed`` with the fewest mean
    queries (the first in ``fixed``'s order on a tie), and likewise the best of each
    family (base method); ``family_oracle`` is the mean over the counted attacks of each
    family's fewest queries on that attack (its best K chosen per attack after the fact, a
    bound no fixed K of the family beats). An adaptive method's regret is its mean
    queries over the best fixed method's (:func:`benchmarks.anytime.ratio`, the project's
    one query regret; the target, success, is yes or no, so no near-tie tolerance
    applies); its per-attack regrets are its queries over the best fixed method's on the
    same attack (median given). Means and regrets are NaN, and no best is chosen, when no
    attack counts.

    Returns:
      ``None`` if no adaptive or no fixed method is present, else ``{"attacks",
      "common_attacks", "excluded", "best_fixed", "family_best", "family_oracle",
      "methods"}`` with, per compared spec, ``success_rate``, ``mean``,
      ``calls_per_step`` and, for the adaptive ones, ``regret``, ``median_regret``,
      ``per_attack_regret`` and ``family_regret``.
    """
    adaptive = [s for s in adaptive if s in by_method]
    fixed = [s for s in fixed if s in by_method]
    if not adaptive or not fixed:
        return None
    compared = adaptive + fixed
    solved = {s: {(r["image"], r["seed"]): r["num_queries"] for r in by_method[s] if r["success"]}
              for s in compared}
    attacks = sorted({(r["image"], r["seed"]) for s in compared for r in by_method[s]})
    common = [a for a in attacks if all(a in solved[s] for s in compared)]
    mean = {s: float(np.mean([solved[s][a] for a in common])) if common else float("nan")
            for s in compared}

    def best(specs: list[str]) -> str | None:
        return min(specs, key=lambda s: mean[s]) if common else None

    best_fixed = best(fixed)
    families = {base: members for base in methods_lib.FAMILIES
                if (members := [s for s in fixed if methods_lib.parse(s).base == base])}
    family_best = {base: best(members) for base, members in families.items()}
    family_oracle = {
        base: float(np.mean([min(solved[s][a] for s in members) for a in common]))
        if common else float("nan") for base, members in families.items()}
    methods = {}
    for spec in compared:
        s = summarize(by_method[spec])
        entry = {"success_rate": s["success_rate"], "mean": mean[spec],
                 "calls_per_step": s["calls_per_step"]}
        if spec in adaptive:
            per_attack = ([anytime.ratio(solved[spec][a], solved[best_fixed][a])
                           for a in common] if common else [])
            entry.update(
                regret=anytime.ratio(mean[spec], mean[best_fixed]) if common else float("nan"),
                median_regret=float(np.median(per_attack)) if common else float("nan"),
                per_attack_regret=per_attack,
                family_regret={base: anytime.ratio(mean[spec], mean[b]) if common
                               else float("nan") for base, b in family_best.items()})
        methods[spec] = entry
    return {"attacks": len(attacks), "common_attacks": len(common),
            "excluded": [list(a) for a in attacks if a not in common],
            "best_fixed": best_fixed, "family_best": family_best,
            "family_oracle": family_oracle, "methods": methods}


def anytime_summaries(results: dict) -> list[dict[str, Any]]:
    """:func:`anytime_regret` of every (dataset, protocol, goal) of ``results`` in which the
    anytime comparison was run (:func:`has_comparison`)."""
    summaries = []
    for group, by_method in sorted(_groups(results).items()):
        regret = anytime_regret(by_method) if has_comparison(by_method) else None
        if regret is not None:
            summaries.append({**dict(zip(GROUP, group)), **regret})
    return summaries


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
    fixed = [s for s in methods if "regret" not in methods[s]]
    families = {}
    for spec in fixed:
        families.setdefault(methods_lib.parse(spec).base, []).append(spec)
    ks = sorted({methods_lib.parse(s).get("k") for s in fixed})
    grid = []
    for base, members in families.items():
        cells = {methods_lib.parse(s).get("k"): s for s in members}
        row = [_family_name(base)]
        for k in ks:
            spec = cells.get(k)
            row.append(pages.MISSING if spec is None else pages.bold(
                f"{_fmt(methods[spec]['mean'])} ({methods[spec]['success_rate']:.0%})",
                spec == regret["family_best"][base]))
        grid.append([*row, _fmt(regret["family_oracle"][base])])
    best = regret["best_fixed"]
    best_name = "none" if best is None else f"{methods_lib.label(best)} (`{best}`)"
    rows = []
    for spec, m in methods.items():
        if spec in fixed:
            continue
        rows.append([methods_lib.label(spec), f"`{spec}`", f"{m['success_rate']:.0%}",
                     _fmt(m["mean"]), _fmt(m["calls_per_step"], 2), _fmt(m["regret"], 2),
                     _fmt(m["median_regret"], 2),
                     *(_fmt(m["family_regret"][base], 2) for base in families)])
    excluded = regret["excluded"]
    return [
        f"Anytime comparison: queries to success of the adaptive budgets against fixed K. "
        f"Only the {regret['common_attacks']} of {regret['attacks']} attacks that every "
        f"method below solved within the cap are counted"
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
        pages.table(
            ["Method", "Spec", "Success", "Mean queries", "Calls/iter", "Query regret",
             "Median per-attack regret",
             *(f"Regret vs {_family_name(base)} best K" for base in families)],
            rows)]


def _run_facts(run: dict, commands: list[str], wall: float, load_after: float) -> list[str]:
    """The facts of ``run`` (the run of the first method shown) and the commands of every
    run whose results the group's tables show."""
    model = run["model"]
    # the group's: its slowest method's wall time, the highest load at a method's end
    record = dataclasses.replace(run_record.RunRecord.from_dict(run["record"]), wall_s=wall,
                                 load_after=load_after)
    facts = "  \n".join([
        f"Model: {model['name']} trained on `{model['source']}`, test accuracy "
        f"{model['test_accuracy']:.2%} on {model['num_test']} test images; eps = {run['eps']}, "
        f"cap {run['config']['max_steps']:,} iterations.",
        f"{run_record.machine_line(record.machine)} {run['workers']} worker(s), width "
        f"{run['config']['width']}, chunk {run['config']['chunk']}.",
        run_record.run_line(record)])
    if len(commands) == 1:
        return [f"Command: `{commands[0]}`  \n{facts}"]
    return ["Commands (the rows below come from these runs; the machine, load and wall time "
            "are those of the first):", pages.bullets(f"`{c}`" for c in commands), facts]


def _queries(s: dict[str, Any]) -> str:
    """``mean ± std`` of the queries of the successful attacks (:func:`summarize`)."""
    return f"{_fmt(s['mean'])} ± {_fmt(s['std'])}"


def _sweep_tables(dataset: str, goal: str, protocol: str,
                  by_method: dict[str, list[dict]]) -> list[str]:
    parts = []
    for sweep, param, paper_table, title in (
        ("nhist", "n_hist", PAPER_NHIST, "ZoAQ history window N_hist"),
        ("kmax", "k_max", PAPER_KMAX, "StatZO cap K_max (classical norm test, R-AdaZO backbone)"),
    ):
        present = [s for s in methods_lib.SWEEPS[sweep] if s in by_method]
        if len(present) < 2:
            continue
        rows = []
        for spec in present:
            value = methods_lib.parse(spec).get(param)
            s = summarize(by_method[spec])
            paper = (paper_table.get(dataset, {}).get(value)
                     if (goal, protocol) == PAPER_SETTING else None)
            rows.append([value, f"{s['success_rate']:.0%}", _queries(s), _fmt(s["median"]),
                         _fmt(s["calls_per_step"], 2), _paper(paper)])
        parts += [f"Sweep: {title}.", pages.table(
            [param, "Success", "Queries mean ± std", "Median", "Calls/iter", "Paper (targeted)"],
            rows)]
    return parts


def _speed_table(results: dict, group: tuple, specs: list[str]) -> list[str]:
    rows = []
    for spec in specs:
        run = _run_of(results, group, spec)
        if run is None:
            continue
        m = run["methods"][spec]
        waste = 1 - m["lane_steps_useful"] / max(m["lane_steps_executed"], 1)
        rows.append([f"`{spec}`", m["attacks"], f"{m['seconds']:.1f}",
                     f"{m['attacks'] / m['seconds']:.2f}", f"{m['calls'] / m['seconds']:,.0f}",
                     f"{m['lane_steps_executed']:,}", f"{m['lane_steps_useful']:,}",
                     f"{waste:.1%}"])
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
