"""The LLM page from its payload: tables, the dev-loss-vs-FE figure, next to the paper's
table (Table "Complete LLM fine-tuning results", OPT-1.3B, three seeds, 5,000 steps), whose
numbers are copied below. :func:`write` says where the files go.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import anytime, common, experiment, pages, record
from benchmarks.pages import mean_std
from benchmarks.llm import tables
from benchmarks.llm.experiment import fe_to_reach
from benchmarks.llm.methods import grid_k, is_fixed

# The paper's Table "Complete LLM fine-tuning results" (OPT-1.3B rows): total FE,
# avg K, FE savings %, best eval loss, last eval loss, accuracy, dev acc, train loss.
PAPER_OPT_1_3B = {
    "sst2": [
        ("MeZO K=4", "40000 ± 0", "4.00", "0.00%", "0.240", "0.240", "0.910", "0.910", "0.476"),
        ("R-AdaZO K=4", "40000 ± 0", "4.00", "0.00%", "0.198", "0.199", "0.920", "0.910", "0.288"),
        ("StatZO K∈[2,4]", "30746 ± 412", "3.07", "23.14%", "0.206", "0.240", "0.910", "0.880",
         "0.302"),
        ("ZoAQ K∈[1,2]", "12662 ± 235", "1.27", "68.35%", "0.209", "0.237", "0.870", "0.910",
         "0.335"),
        ("ZoAQ K∈[1,4]", "21714 ± 318", "2.17", "45.72%", "0.195", "0.198", "0.920", "0.910",
         "0.285"),
    ],
    "copa": [
        ("MeZO K=4", "40000 ± 0", "4.00", "0.00%", "0.532", "0.532", "0.770", "0.750", "0.537"),
        ("R-AdaZO K=4", "40000 ± 0", "4.00", "0.00%", "0.431", "0.476", "0.780", "0.780", "0.423"),
        ("StatZO K∈[2,4]", "30498 ± 505", "3.05", "23.76%", "0.461", "0.461", "0.790", "0.780",
         "0.459"),
        ("ZoAQ K∈[1,2]", "12740 ± 288", "1.27", "68.15%", "0.490", "0.490", "0.790", "0.770",
         "0.499"),
        ("ZoAQ K∈[1,4]", "21946 ± 345", "2.19", "45.14%", "0.485", "0.492", "0.790", "0.770",
         "0.460"),
    ],
}
PAPER_HEADERS = ["Method", "Total FE", "Avg K", "FE savings", "Best eval loss",
                 "Last eval loss", "Accuracy", "Dev acc", "Train loss"]


def _reference(groups: dict[str, list[dict]]) -> str | None:
    """The fixed-K reference of the savings: R-AdaZO K=4, else MeZO, if run."""
    return next((n for n in ("radazo", "mezo") if n in groups), None)


def summary_rows(results: list[dict]) -> list[list[str]]:
    """One row per method: means ± std over seeds; savings relative to fixed K=4."""
    groups = tables.by_method(results)
    ref = _reference(groups)
    reference = None if ref is None else np.mean([r["total_fe"] for r in groups[ref]])
    rows = []
    for name, runs in groups.items():
        fe = [r["total_fe"] for r in runs]
        train = [r["train_loss"] for r in runs if r["train_loss"] is not None]
        rows.append([
            runs[0]["label"], mean_std(fe, "{:.0f}"),
            mean_std([r["avg_k"] for r in runs], "{:.2f}"),
            "–" if reference is None
            else mean_std([100 * (1 - f / reference) for f in fe], "{:.2f}") + "%",
            *(mean_std([r[k] for r in runs], f) for k, f in (
                ("best_eval_loss", "{:.4f}"), ("last_eval_loss", "{:.4f}"),
                ("accuracy", "{:.3f}"), ("dev_accuracy", "{:.3f}"))),
            mean_std(train, "{:.4f}") if train else "–",
            # share of steps accepted at K_min (adaptive methods)
            "–" if is_fixed(name)
            else f"{100 * np.mean([r['immediate_accept_rate'] for r in runs]):.1f}%"])
    return rows


def regret_rows(payload: dict[str, Any], key: str = "regret",
                member=is_fixed) -> list[list[str]]:
    """One row per method: its regret (``payload[key]``) at each budget, the median and
    the maximum; ``member``: whether a method is one of the envelope's."""
    labels = {r["method"]: r["label"] for r in payload["results"]}
    return [[labels[name] + (" (envelope)" if member(name) else ""),
             *(anytime.fmt(float(v))  # JSON stores infinity as "inf"
               for v in (*entry["regret"], entry["median"], entry["max"]))]
            for name, entry in payload[key]["methods"].items()]


def matched_rows(results: list[dict]) -> list[list[str]]:
    """FE the fixed-K reference (same seed) needs to reach each method's best dev loss."""
    groups = tables.by_method(results)
    ref_name = _reference(groups)
    if ref_name is None:
        return []
    ref = {r["seed"]: r for r in groups[ref_name]}
    rows = []
    for name, runs in groups.items():
        pairs = [(r["total_fe"], fe_to_reach(ref[r["seed"]]["curve"], r["best_eval_loss"]))
                 for r in runs if r["seed"] in ref]
        if name == ref_name or not pairs:
            continue
        reached = [(fe, need) for fe, need in pairs if need is not None]
        if len(reached) == len(pairs):
            need = mean_std([n for _, n in reached], "{:.0f}")
            saved = mean_std([100 * (1 - fe / n) for fe, n in reached], "{:.1f}") + "%"
        else:
            need, saved = f"not reached in {len(pairs) - len(reached)} of {len(pairs)} seeds", "–"
        rows.append([runs[0]["label"], mean_std([fe for fe, _ in pairs], "{:.0f}"),
                     mean_std([r["best_eval_loss"] for r in runs], "{:.4f}"), need, saved])
    return rows


def _interleaved(timings: list[dict]) -> str:
    probes = [x["interleaved"] for x in timings if "interleaved" in x]
    if not probes:
        return "–"
    share = 100 * np.mean([p["overhead_share"] for p in probes])
    return f"{share:.1f}% (K={probes[0]['k']}, {probes[0]['step_s']:.2f} s/step)"


def timing_rows(results: list[dict]) -> list[list[str]]:
    rows = []
    for runs in tables.by_method(results).values():
        t = [r["timing"] for r in runs]
        mean = {key: float(np.mean([x[key] for x in t])) for key in (
            "fe_per_s", "step_s_mean", "overhead_share", "compile_s", "eval_s", "wall_s")}
        rows.append([runs[0]["label"], f"{mean['fe_per_s']:.2f}", f"{mean['step_s_mean']:.2f}",
                     f"{100 * mean['overhead_share']:.1f}%", _interleaved(t),
                     ", ".join(f"{k}: {v:.3f}" for k, v in t[0]["forward_call_s"].items()),
                     f"{mean['compile_s']:.1f}", f"{mean['eval_s']:.0f}", f"{mean['wall_s']:.0f}"])
    return rows


def plot(results: list[dict], path: Path, title: str, envelope: list[dict] = (),
         first_order: list[dict] = (), budget: int | None = None,
         grid_envelope: list[dict] = ()) -> Path:
    """Dev loss and dev accuracy against cumulative FE, one line per method and seed (the
    points of the (learning rate, K) grid at other learning rates only through their
    envelope); the fixed-K envelope (anytime mode) as a dashed black line on the dev
    loss, the grid's as a dotted one; the first-order reference (``first_order`` runs)
    in black, its i-th evaluation at the i-th of the zeroth-order runs (the same share
    of the ``budget``, in its own steps)."""
    colors, lines = {}, {"dev_loss": [], "dev_accuracy": []}
    shown = [r for r in results if is_fixed(r["method"]) or not grid_k(r["method"])]
    for r in shown:
        style = {"marker": "o", "ms": 3, "color": colors.setdefault(r["method"], f"C{len(colors)}")}
        first = r["seed"] == min(x["seed"] for x in shown if x["method"] == r["method"])
        for key, keyed in lines.items():
            keyed.append(([c["fe"] for c in r["curve"]], [c[key] for c in r["curve"]],
                          r["label"] if first else None, style))
    # (records before the fair reference had no schedule to place them on)
    for i, r in enumerate(r for r in first_order if budget and "share" in r["curve"][0]):
        label = f"backprop + Adam (lr {r['learning_rate']:g})" if i == 0 else None
        for key, keyed in lines.items():
            keyed.append(([c["share"] * budget for c in r["curve"]], [c[key] for c in r["curve"]],
                          label, {"marker": "s", "ms": 3, "color": "k", "lw": 0.8}))
    for env, label, style in ((envelope, "fixed-K envelope E(B)", {}),
                              (grid_envelope, "(lr, K) envelope", {"linestyle": ":"})):
        if env:
            lines["dev_loss"].append(([e["budget"] for e in env], [e["dev_loss"] for e in env],
                                      label, {**pages.ENVELOPE, "lw": 1, **style}))
    return pages.curves(path, [("", keyed, {"ylabel": key.replace("_", " ")})
                               for key, keyed in lines.items()],
                        cols=2, size=(5.5, 4), legend=(0, 8), suptitle=title, xscale="linear",
                        xlabel="forward evaluations (FE); backprop: the same share of "
                               "its steps")


def title(payload: dict[str, Any]) -> str:
    """The page's ``#`` title: the model, task, preset, length, seeds and cores of the run,
    which tell one LLM page from another (for a ``--merge`` page, the cores of the runs
    that trained, not of the run that merged them)."""
    cfg = payload["config"]
    model = payload["model"]["name"].split(" (")[0]
    length = f"{cfg['budget']:,} FE per method" if cfg.get("budget") else f"{cfg['steps']} steps"
    trained = payload.get("merged_runs") or [payload["record"]]
    seeds, cores = len(cfg["seeds"]), max(r["machine"]["cores"] for r in trained)
    return (f"Forward-only LoRA fine-tuning of {model} on {cfg['task']}: preset "
            f"{cfg['preset']}, {length}, {seeds} seed{'s' * (seeds > 1)}, "
            f"{cores} core{'s' * (cores > 1)}")


def question(payload: dict[str, Any]) -> str:
    """What an LLM page answers."""
    cfg = payload["config"]
    model = payload["model"]["name"].split(" (")[0]
    length = (f"{cfg['budget']:,} forward passes (FE) each" if cfg.get("budget")
              else f"{cfg['steps']:,} steps each")
    return (f"Fine-tuning {model}'s LoRA adapters on {cfg['task']} with forward passes only "
            f"({length}), which method reaches the lowest dev loss and the best test "
            "accuracy, and at how many forward passes?")


def markdown(payload: dict[str, Any], figure: str) -> dict[str, Any]:
    """The parts of the generated block of the results page (:func:`benchmarks.pages.page`'s
    keywords): the question, the answer (our table), the command, the setup, then the
    matched-quality table, the figure, timing, the paper's table, how the run differs from
    the paper."""
    cfg, results, data = payload["config"], payload["results"], payload["data"]
    zs = payload.get("zero_shot") or {}
    run = record.RunRecord.from_dict(payload["record"])
    rank = cfg.get("lora_rank") or 8  # None, or a page written before the option: MeZO's
    setup = [
        f"Model: {payload['model']['name']} ({payload['model']['architecture']}), base "
        f"weights {payload['model']['dtype']}, LoRA r={rank}, alpha={2 * rank} on q/v "
        f"projections ({payload['lora_params']:,} trainable parameters, float32).",
        f"Task: {cfg['task']} on {data['source']}; splits {data['sizes']}; sequences padded "
        f"to {data['max_length']} tokens; single-token fast path: {data['fast_path']}.",
        f"Preset `{cfg['preset']}`: {cfg['steps']} steps, eval every {cfg['eval_every']} steps, "
        f"batch {cfg['batch_size']}, lr {cfg['lr']}, mu {cfg['mu']}, seeds {cfg['seeds']}.",
        "FE = forward passes made by the method (the estimator's `num_queries`); "
        "evaluation and the train-loss probe are not FE. Best checkpoint = lowest dev loss; "
        "Accuracy = test accuracy of that checkpoint; Dev acc = its dev accuracy."]
    if zs:
        setup.append(f"Base model before any update (B = 0): dev loss {zs['dev_loss']:.4f}, "
                     f"dev accuracy {zs['dev_accuracy']:.3f}, test accuracy "
                     f"{zs['accuracy']:.3f}.")
    if cfg.get("budget") is not None:
        setup.append(f"Anytime mode: every method runs until it has spent {cfg['budget']} FE "
                     f"(its last step may overshoot), dev loss every {cfg['eval_every_fe']} "
                     "FE; the preset's step count is not used.")
    answer = (pages.table(PAPER_HEADERS + ["Accept at K_min"], summary_rows(results))
              + "\n\nMean ± std over seeds. " + result_columns(results))
    return {"question": question(payload), "answer": answer, "run": run.command,
            "setup": pages.bullets([record.machine_line(run.machine), record.run_line(run),
                                    *setup]), "sections": [
        "## FE to matched quality",
        "FE to matched quality: the FE the fixed-K reference (R-AdaZO K=4, else MeZO; same "
        "seed) needed to reach each method's best dev loss, interpolated linearly between "
        "evaluations, and the FE saved at that matched loss.",
        pages.table(["Method", "FE used", "Best dev loss", "Reference FE at that loss",
                     "FE saved at matched loss"], matched_rows(results)),
        f"![dev loss and accuracy vs FE]({figure})",
        *(_regret_section(payload) if payload.get("regret") else ()),
        *(_regret_section(payload, "grid_regret") if payload.get("grid_regret") else ()),
        *tables.sections(payload),
        "## Speed",
        "FE/s = FE / time inside training steps. Overhead = share of step time outside the "
        "forward passes, where forward time is the step's oracle calls (one vmapped call "
        "per acquisition chunk) timed in isolation. *Run*: all steps of the run against "
        "call times measured once after training (sensitive to changes in machine load "
        "during the run; can come out negative). *Back to back*: one step repeated "
        f"{cfg.get('timing_reps', 3)} times from the final state, each repeat followed at "
        "once by its oracle calls (the more robust figure). Oracle call lists the call "
        "times (s) by the number of forward passes batched in the call.",
        pages.table(["Method", "FE/s", "s/step", "Overhead (run)", "Overhead (back to back)",
                     "Oracle call (s)", "Compile (s)", "Eval (s)", "Wall (s)"],
                    timing_rows(results)),
        f"## The paper (OPT-1.3B, {cfg['task'].upper()}, 3 seeds, 5,000 steps, fp16, GPU)",
        pages.table(PAPER_HEADERS, PAPER_OPT_1_3B.get(cfg["task"], [])),
        "## How this run differs from the paper", _run_notes(cfg) + NOTES]}


def result_columns(results: list[dict]) -> str:
    """The definitions of the columns of :func:`summary_rows`."""
    groups = tables.by_method(results)
    ref = _reference(groups)
    return pages.columns({
        "Total FE": "forward passes the method spent", "Avg K": "directions a step",
        "FE savings": "1 - Total FE / that of the fixed-K reference, "
                      f"{groups[ref][0]['label'] if ref else 'none'}. A saving is bought with "
                      "fewer directions a step, a noisier estimate: read it with the loss and "
                      "accuracy columns beside it (a saving with a worse loss is a trade, not "
                      "a win)",
        "Best eval loss, Last eval loss": "lowest and last dev loss of the run",
        "Train loss": "the last train-loss probe (one forward pass on the current batch)",
        "Accept at K_min": "share of steps an adaptive method accepted at its smallest K"})


def _run_notes(cfg: dict[str, Any]) -> str:
    """The notes that depend on the run: prompt, adapted layers, length and learning rate."""
    prompt = cfg.get("prompt", "it_was")
    layers = cfg.get("lora_layers")
    where = ("every layer" if layers is None else
             f"the top {layers} layer(s) only, the layers below computed once per example "
             "and cached")
    length = (f"{cfg['budget']:,} FE per method and seed" if cfg.get("budget")
              else f"{cfg['steps']:,} steps")
    return (f"- Prompt and adapters: prompt `{prompt}` (MeZO's is `it_was`, `<s> It was` "
            f"terrible/great); LoRA on q/v of {where} (the paper: every layer).\n"
            f"- Length of the run: {length}, {len(cfg['seeds'])} seed(s), learning rate "
            f"{cfg['lr']:g} (the paper: 5,000 steps of K = 4, 3 seeds, 5e-5).\n")


def _regret_section(payload: dict[str, Any], key: str = "regret") -> list[str]:
    """The query regret against the fixed-K envelope (``key="regret"``) or the (learning
    rate, K) envelope (``"grid_regret"``)."""
    reg = payload[key]
    env = ", ".join(f"{e['budget']}: {e['dev_loss']:.4f} ({e['method']})" for e in reg["envelope"])
    if key == "regret":
        name, which, member = "the fixed-K envelope", "fixed-K method", is_fixed
    else:
        name = "the (learning rate, K) envelope"
        which = (f"point of the (learning rate, K) grid ({tables.grid_extent(payload['results'])}"
                 "; a smaller grid than a full 4 x 5 one, for the CPU time)")
        member = (lambda spec: grid_k(spec) is not None)
    return [
        f"## Anytime: query regret against {name}",
        f"E(B) = lowest mean dev loss any {which} reached within B FE (linear "
        "interpolation between evaluations); a method's regret at B = the FE its mean "
        "curve needed to first reach E(B), divided by B (∞: never reached within its "
        f"run; within {anytime.TOLERANCE:.0%} of E(B) counts as reached, the near-tie "
        "tolerance of `benchmarks/anytime.py`). Regret <= 1 means the method was at least as "
        f"good as the best {'fixed K' if key == 'regret' else 'grid point'} chosen in "
        "hindsight for that budget.",
        f"Envelope (B: E(B), from): {env}.",
        pages.table(["Method", *(f"B={b}" for b in reg["budgets"]), "Median", "Max"],
                    regret_rows(payload, key, member))]


NOTES = """\
- Model and precision: the paper fine-tunes OPT-1.3B / OPT-13B in fp16 on GPUs; the `cpu`
  preset uses SmolLM2-135M-Instruct (LLaMA architecture, the Q4_1 GGUF dequantized to
  float32) in float32 on CPU. `--model opt:PATH` runs OPT checkpoints with the same code.
- Data: the `cpu` preset uses the movie-review snippets that ship with vaderSentiment
  (same Rotten Tomatoes source as SST-2, labels = sign of the human rating), keeping
  snippets that fit in 32 tokens with MeZO's prompt so that every batch has one short
  fixed shape; GLUE SST-2 and SuperGLUE COPA folders are read with `--data`.
- StatZO: `statzo` is the classical norm test (Bollapragada et al.) as `zoaq_jax`
  implements it: forward differences with one centre forward pass a step, so a step costs
  K_t + 1 FE, and its "FE savings" include that cheaper difference scheme. The paper
  counts 2 K_t FE for its StatZO; the momentum-relative rule it writes down runs as
  `--methods statzo_norm` (central differences, 2 K_t FE).
- Evaluation and the train-loss probe (one forward pass on the current batch every 10
  steps) are not counted as FE, as in the paper's accounting (40,000 FE = 8 x 5,000).
"""


def write(out_dir: Path | None, report_path: Path | None,
          payload: dict[str, Any]) -> dict[str, Path]:
    """Writes ``llm.json.xz`` and ``llm.png`` under ``out_dir`` (if given) and the Markdown
    page ``report_path`` (if given; text outside its generated block is kept) with its
    figure and JSON in ``llm/`` beside it (``<page stem>_<preset>_<task>.png``,
    ``<page stem>.json.xz``)."""
    cfg = payload["config"]
    caption = f"{payload['model']['name']} / {cfg['task']} / preset {cfg['preset']}"
    curves = {"envelope": payload.get("regret", {}).get("envelope", ()),
              "grid_envelope": payload.get("grid_regret", {}).get("envelope", ()),
              "first_order": (payload.get("baselines") or {}).get("first_order", ()),
              "budget": cfg.get("budget")}
    paths = {}
    if out_dir is not None:
        out_dir = Path(out_dir)
        paths["json"] = experiment.save(out_dir / f"llm{common.RESULTS}", payload)
        paths["png"] = plot(payload["results"], out_dir / "llm.png", caption, **curves)
    if report_path is not None:
        report_path = Path(report_path)
        beside = report_path.parent / "llm"
        fig = plot(payload["results"],
                   beside / f"{report_path.stem}_{cfg['preset']}_{cfg['task']}.png", caption,
                   **curves)
        paths["report json"] = experiment.save(beside / f"{report_path.stem}{common.RESULTS}",
                                               payload)
        paths["markdown"] = pages.page(report_path, title(payload), command="llm",
                                      **markdown(payload, pages.link(fig, report_path)))
        paths["figure"] = fig
    return paths
