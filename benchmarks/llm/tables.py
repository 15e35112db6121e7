"""Sections of the LLM page for runs with baselines: accuracy against the targets, the
baselines table, the equal-query (anytime) accuracy table with resolved differences
marked, and the compiled-memory table.

A difference between two methods is *resolved* when their means differ by more than the
sum of their seed standard deviations (the seed spread); unresolved differences are
noise at this number of seeds.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from benchmarks import pages, record
from benchmarks.llm.methods import grid_k, parse_one
from benchmarks.pages import mean_std


def by_method(results: list[dict]) -> dict[str, list[dict]]:
    return pages.grouped(results, "method")


TARGET_ACCURACY = 0.84  # issue 22: best zeroth-order method, mean test accuracy
TARGET_GAIN = 0.05  # ... and at least this much above its prompt's zero-shot accuracy


def _stats(values) -> tuple[float, float]:
    return float(np.mean(values)), float(np.std(values))


def resolved(a: tuple[float, float], b: tuple[float, float], seeds: int = 2) -> bool:
    """Whether means differ by more than the seed spread (sum of the two stds); never with
    fewer than 2 seeds (no spread measured)."""
    return seeds >= 2 and abs(a[0] - b[0]) > a[1] + b[1]


def target_lines(payload: dict[str, Any]) -> list[str]:
    """The targets and whether this run met them (mean test accuracy over seeds)."""
    zero = payload["zero_shot"]["accuracy"]
    groups = by_method(payload["results"])
    acc = {name: _stats([r["accuracy"] for r in runs]) for name, runs in groups.items()}
    best = max(acc, key=lambda n: acc[n][0])

    def met(ok: bool) -> str:
        return f"**{'met' if ok else 'not met'}**"

    lines = [f"best >= {TARGET_ACCURACY}: {met(acc[best][0] >= TARGET_ACCURACY)}"
             f" (shortfall {max(0.0, TARGET_ACCURACY - acc[best][0]):.3f}).",
             f"best >= zero-shot + {TARGET_GAIN} = {zero + TARGET_GAIN:.3f}: "
             f"{met(acc[best][0] >= zero + TARGET_GAIN)}."]
    for name, (mean, std) in acc.items():
        label = groups[name][0]["label"]
        if len(groups[name]) < 2:
            lines.append(f"{label}: {mean:.3f}, gain over zero-shot {mean - zero:+.3f}; seed "
                         "spread not measured (1 seed).")
        else:
            ok = mean - zero > std
            lines.append(f"{label}: {mean:.3f} ± {std:.3f}, gain over zero-shot "
                         f"{mean - zero:+.3f} {'>' if ok else '<='} seed spread {std:.3f}: "
                         f"{met(ok)}.")
    return ["## Accuracy against the targets",
            f"Zero-shot test accuracy of the run's prompt (`{payload['config']['prompt']}`): "
            f"{zero:.3f}. Best zeroth-order method: {groups[best][0]['label']}, "
            f"{acc[best][0]:.3f} ± {acc[best][1]:.3f} over {len(groups[best])} seeds.",
            pages.bullets(lines)]


def baseline_rows(payload: dict[str, Any]) -> list[list[str]]:
    """Zero-shot per prompt, the linear probe, the first-order reference and the
    zeroth-order methods: dev and test accuracy."""
    base = payload["baselines"]
    rows = []
    for p in base["prompts"]:
        shots = f", {p['demonstrations']} demonstrations" if p["demonstrations"] else ""
        for kind in ("raw", "calibrated"):
            rows.append([f"zero-shot `{p['prompt']}` ({kind}{shots})", "–",
                         f"{p[f'dev_{kind}']:.3f}", f"{p[f'test_{kind}']:.3f}"])
    probe = base["linear_probe"]
    rows.append([f"linear probe on frozen features (L2 {probe['l2']:g}, "
                 f"{probe['train_examples']} examples)", "–", f"{probe['dev_accuracy']:.3f}",
                 f"{probe['accuracy']:.3f}"])
    fo = base["first_order"]
    if "first_order_fe" in base:  # the fair reference: same compute and schedule
        what = (f"backprop + Adam (lr {fo[0]['learning_rate']:g} chosen on dev; the "
                f"zeroth-order runs' {base['first_order_fe']:,.0f} FE in forward-pass time)")
    else:
        what = (f"backprop + Adam (lr {fo[0]['learning_rate']:g}, "
                f"{base['first_order_wall_s']:.0f} s per seed)")
    rows.append([what, mean_std([r["steps"] for r in fo], "{:.0f}") + " steps",
                 mean_std([r["dev_accuracy"] for r in fo], "{:.3f}"),
                 mean_std([r["accuracy"] for r in fo], "{:.3f}")])
    for runs in by_method(payload["results"]).values():
        rows.append([runs[0]["label"] + " (zeroth order)",
                     mean_std([r["total_fe"] for r in runs], "{:.0f}") + " FE",
                     mean_std([r["dev_accuracy"] for r in runs], "{:.3f}"),
                     mean_std([r["accuracy"] for r in runs], "{:.3f}")])
    return rows


def first_order_lines(payload: dict[str, Any]) -> list[str]:
    """The first-order reference: its compute, schedule, learning-rate sweep and result
    beside the zeroth-order method with the lowest dev loss (dev loss, dev and test
    accuracy)."""
    base = payload["baselines"]
    if "first_order_all" not in base:
        return []
    runs, fo, evals = base["first_order_all"], base["first_order"], base["first_order_evals"]
    groups = by_method(payload["results"])
    best = min(groups, key=lambda n: np.mean([r["best_eval_loss"] for r in groups[n]]))

    def row(label, rs):
        return [label, mean_std([r["best_eval_loss"] for r in rs], "{:.4f}"),
                mean_std([r["best_step"] for r in rs], "{:.0f}"),
                mean_std([r["dev_accuracy"] for r in rs], "{:.3f}"),
                mean_std([r["accuracy"] for r in rs], "{:.3f}"), str(len(rs))]

    rates = sorted({r["learning_rate"] for r in runs})
    rows = [row(f"backprop + Adam, lr {lr:g}" + (" (chosen)" if lr == base["first_order_lr"]
                                                  else ""),
                [r for r in runs if r["learning_rate"] == lr]) for lr in rates]
    best_runs = groups[best]
    rows.append([groups[best][0]["label"] + " (zeroth order, lowest mean dev loss)",
                 mean_std([r["best_eval_loss"] for r in best_runs], "{:.4f}"),
                 mean_std([r["best_step"] for r in best_runs], "{:.0f}"),
                 mean_std([r["dev_accuracy"] for r in best_runs], "{:.3f}"),
                 mean_std([r["accuracy"] for r in best_runs], "{:.3f}"), str(len(best_runs))])
    costs = [c["forward_passes"] for c in base["first_order_cost"]]
    return [
        "## The first-order reference",
        f"Backpropagation + Adam on the same adapters, data and batches, with the compute "
        f"of the zeroth-order runs' {base['first_order_fe']:,.0f} FE in forward-pass time: "
        f"{mean_std([r['steps'] for r in runs], '{:.0f}')} steps, a backprop step measured "
        f"at {', '.join(f'{c:.2f}' for c in costs)} forward passes of the same batch (one "
        "measurement a process; the step and the forward pass timed back to back, so that "
        "the load of the shared machine cancels; the zeroth-order steps' own time beyond "
        "their forward passes is not counted). Training time inside steps: "
        f"{mean_std([r['train_s'] for r in fo], '{:.0f}')} s per run at the chosen rate, "
        f"against the zeroth-order runs' median {base['zeroth_order_train_s']:.0f} s (each "
        "at the load of its own run). Evaluated on dev exactly as often as the "
        f"zeroth-order runs: before the first step and {evals} times, after each "
        f"{evals}th of its steps (the zeroth-order schedule, every {evals}th of the FE, "
        "in its own steps). Same best-checkpoint rule (lowest dev loss). The learning rate "
        "is the one with the lowest mean best dev loss over the seeds (dev only). Its "
        "curve is in the figure above (black squares; its i-th evaluation at the FE of "
        "the zeroth-order runs' i-th). *Best step*: the step of the best checkpoint.",
        pages.table(["Run", "Best dev loss", "Best step", "Dev acc", "Test acc", "Seeds"],
                    rows)]


def grid_extent(results: list[dict]) -> str:
    """The (learning rate, K) points run, per learning rate with its K and seed count
    (the grid need not be a full product: e.g. K = 4 at the run's learning rate only)."""
    points: dict[float, dict[int, set]] = {}
    for r in results:
        if grid_k(r["method"]):
            scale = parse_one(r["method"]).get("lr_scale") or 1.0
            points.setdefault(scale, {}).setdefault(grid_k(r["method"]), set()).add(r["seed"])

    def one(scale: float, ks: dict[int, set]) -> str:
        counts = sorted({len(seeds) for seeds in ks.values()})
        return (f"x {scale:g} with K in {{{', '.join(map(str, sorted(ks)))}}} "
                f"({'/'.join(map(str, counts))} seed{'s' * (counts != [1])})")

    return "learning rate " + ", ".join(one(*p) for p in sorted(points.items())) + " of the run's"


def grid_lines(payload: dict[str, Any]) -> list[str]:
    """Issue 32's LLM target: each method that is not a grid point (tuning_free, auto_k,
    a schedule) against the best point of the (learning rate, K) grid run (fixed K at
    constant learning rates): best dev loss at equal FE (the run's budget), within the
    seed spread or not (one seed: no spread, :func:`resolved`)."""
    groups = by_method(payload["results"])
    grid = [n for n in groups if grid_k(n)]
    if not grid or len(grid) == len(groups):
        return []
    extent = grid_extent(payload["results"])
    loss = {n: _stats([r["best_eval_loss"] for r in runs]) for n, runs in groups.items()}
    best = min(grid, key=lambda n: loss[n][0])
    lines = [f"{groups[n][0]['label']}: {pages.pm(*loss[n], '{:.4f}')}, "
             f"{loss[n][0] - loss[best][0]:+.4f} from the best grid point; "
             + ("seed spread not measured (1 seed)." if len(groups[n]) < 2 else
                ("within the seed spread" if not resolved(loss[n], loss[best])
                 else ("below it by more than the seed spread" if loss[n][0] < loss[best][0]
                       else "**above it by more than the seed spread**"))
                + f" ({loss[n][1] + loss[best][1]:.4f}).")
             for n in groups if not grid_k(n)]
    return ["## Against the best point of the (learning rate, K) grid",
            f"Best dev loss within the run's {payload['config']['budget']:,} FE (mean ± std "
            f"over seeds). The grid run here: {extent}. Best grid point: "
            f"{groups[best][0]['label']}, "
            f"{pages.pm(*loss[best], '{:.4f}')}. The target: a method run without "
            "tuning within the seed spread of it (the sum of the two stds).",
            pages.bullets(lines)]


def anytime_rows(payload: dict[str, Any], key: str, better, fmt: str) -> tuple[list, list]:
    """``(budgets, rows)``: per method the best dev ``key`` within each budget (mean ±
    std over seeds); the best mean at a budget in bold, a dagger where its difference
    from the best is resolved."""
    cfg = payload["config"]
    every = cfg["eval_every_fe"]
    budgets = list(range(every, cfg["budget"] + 1, every))
    groups = by_method(payload["results"])
    # An evaluation belongs to budget B if made within B FE plus half a period (a
    # method's last step before an evaluation may overshoot the multiple of the period).
    stats = {name: [_stats([better(c[key] for c in r["curve"] if c["fe"] <= b + every / 2)
                            for r in runs]) for b in budgets] for name, runs in groups.items()}
    rows = []
    for name, runs in groups.items():
        cells = []
        for i in range(len(budgets)):
            top = better(s[i][0] for s in stats.values())
            best = next(n for n in stats if stats[n][i][0] == top)
            apart = name != best and resolved(stats[name][i], stats[best][i],
                                              min(len(runs), len(groups[best])))
            cells.append(pages.bold(pages.pm(*stats[name][i], fmt), name == best) + " †" * apart)
        rows.append([runs[0]["label"]] + cells)
    return budgets, rows


def memory_rows(payload: dict[str, Any]) -> list[list[str]]:
    rows = payload["baselines"]["memory"]
    forward = rows[0]["bytes"]
    return [[r["what"], f"{r['bytes'] / 2**20:.1f}", f"{r['bytes'] / forward:.2f}"] for r in rows]


def merged_lines(payload: dict[str, Any]) -> list[str]:
    """The commands and wall times of the runs a ``--merge`` page joins."""
    if not payload.get("merged_runs"):
        return []
    runs = [record.RunRecord.from_dict(rec) for rec in payload["merged_runs"]]
    if payload.get("baselines_from"):
        source = ("the command above loaded no model: the zero-shot row is the first "
                  "file's, the prompt table, linear probe and memory table those of "
                  f"`{payload['baselines_from'][0]}`, the first-order runs those of "
                  + ", ".join(f"`{p}`" for p in payload["baselines_from"][1:]) + ".")
    elif payload["config"].get("baselines"):
        source = ("the command above loaded the model again for the zero-shot row and the "
                  "baselines.")
    else:
        source = "the zero-shot row and any baselines are the first file's."
    return ["## Runs merged into this page",
            "The zeroth-order results come from these runs (side by side, one process "
            "each); " + source,
            pages.bullets(f"`{run.command}`. {record.run_line(run)}" for run in runs)]


def sections(payload: dict[str, Any]) -> list[str]:
    """The page's sections for runs made since the prompt list (none for older JSON)."""
    if "prompt" not in payload["config"]:
        return []
    parts = merged_lines(payload) + target_lines(payload)
    if payload.get("baselines"):
        parts += [
            "## Baselines in the same table",
            "Same data splits; zero-shot rows score the base model with each prompt of the "
            "list (calibrated: the score difference thresholded at its median over 200 "
            "unlabeled training examples); the prompt the zeroth-order methods use was "
            "chosen on dev accuracy. Test accuracy of the best-dev-loss checkpoint for "
            "trained rows.",
            pages.table(["Method", "Cost", "Dev acc", "Test acc"], baseline_rows(payload)),
            *first_order_lines(payload)]
    if payload["config"].get("budget"):
        parts += grid_lines(payload)
    if payload["config"].get("budget"):
        budgets, acc = anytime_rows(payload, "dev_accuracy", max, "{:.3f}")
        _, loss = anytime_rows(payload, "dev_loss", min, "{:.4f}")
        headers = ["Method", *(f"B={b}" for b in budgets)]
        parts += [
            "## Equal queries: best dev accuracy and loss within B FE",
            "Mean ± std over seeds of the best dev value reached within B forward passes; "
            "bold: the best mean at B; †: its difference from the best exceeds the seed "
            "spread (the sum of the two stds; no mark with one seed). Unmarked differences "
            "are not resolved.", pages.table(headers, acc), pages.table(headers, loss)]
    if payload.get("baselines"):
        parts += [
            "## Memory",
            "Compiled memory (temp + output bytes of `jax.jit(f).lower(...).compile()."
            "memory_analysis()`; the frozen weights and the batch are arguments and not "
            "counted) of one step on one training batch, and its ratio to one forward "
            "pass. *Vectorized*: the 2K perturbed passes in one vmapped call; *sequential* "
            "(`--sequential`): one after another (`zoaq_jax.sequential`: a loop from which "
            "nothing is hoisted, so activations are those of one pass; what still grows "
            "with K is the K directions and 2K perturbed copies of the trainable "
            "parameters).",
            pages.table(["Computation", "MiB", "x forward"], memory_rows(payload))]
    return parts
