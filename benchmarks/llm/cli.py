"""Forward-only LoRA fine-tuning (MeZO protocol): FE saved against fixed K=4.

Presets (described in benchmarks/llm/config.py): smoke (tiny model, under a minute), cpu
(SmolLM2-135M, 3 seeds x 5 methods at 6,000 FE each, baselines; about 45 min on 2 CPU
cores), mezo_cpu (MeZO's prompt, 100 steps), paper (the paper's protocol; for a GPU),
anytime (144 FE per method; query regret against the fixed-K envelope). Every option
named like a configuration field overrides the preset's value. ``--budget FE`` turns
any preset into anytime mode (dev loss every ``--eval-every-fe`` FE, default budget / 8).

Methods are specs: BASE or BASE:key=value,... (mezo, radazo, statzo, statzo_norm, zoaq,
auto_k; e.g. radazo:k=1, zoaq:k_max=2; see benchmarks/llm/methods.py).

Writes OUT/llm.json.xz and OUT/llm.png (default OUT: out/llm-<preset>) and the Markdown
page REPORT (default OUT/llm.md) with its figure and JSON in REPORT_DIR/llm/. The run
record in the JSON says which backend and devices the run used.

Examples:
  python -m benchmarks llm --preset smoke --out /tmp/llm
  python -m benchmarks llm --preset cpu --report docs/results/llm.md
  python -m benchmarks llm --preset anytime --report docs/results/llm_anytime.md
  python -m benchmarks llm --render docs/results/llm/llm.json.xz --report docs/results/llm.md
GPU, the paper's protocol (SmolLM2; OPT from a local checkpoint folder):
  python -m benchmarks llm --preset paper --report docs/results/llm_paper.md
  python -m benchmarks llm --preset paper --model opt:/data/opt-1.3b --dtype bfloat16 \\
    --task sst2 --data /data/SST-2 --report docs/results/llm_paper_opt.md
  python -m benchmarks llm --preset paper --model opt:/data/opt-1.3b --dtype bfloat16 \\
    --task copa --data /data/COPA --report docs/results/llm_paper_opt_copa.md
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from benchmarks import common, experiment, flags, pool, presets
from benchmarks.common import to_jsonable
from benchmarks.experiment import read_results
from benchmarks.llm.config import PRESETS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from benchmarks.llm.methods import REGISTRY

    flags.add_preset(parser, {
        "smoke": "a tiny random LLaMA on synthetic data, radazo and zoaq, 12 steps "
                 "(41 s of CPU time; 427 s wall at load 15-20)",
        "paper": "the paper's protocol: 5,000 steps, 3 seeds, every method; meant for a GPU",
        "cpu": "SmolLM2-135M, LoRA on the top layer, 3 seeds x 5 methods at 6,000 FE each, "
               "then the baselines (46.7 min on 2 shared cores, docs/results/llm.md)",
        "mezo_cpu": "the earlier cpu preset: MeZO's prompt, LoRA on every layer, 100 steps, "
                    "one seed (56.9 min, docs/results/llm_mezo_cpu.md)",
        "anytime": "mezo_cpu's model and data, 144 FE per method, query regret (28.5 min, "
                   "docs/results/llm_anytime.md)"}, default="smoke")
    parser.add_argument("--model", help="smollm2 | gguf:PATH | opt:PATH | hf:PATH | "
                        "tiny-llama | tiny-opt (default: the preset's)")
    parser.add_argument("--task", choices=["sst2", "copa"])
    parser.add_argument(
        "--data", help="sst2: a GLUE SST-2 folder (train.tsv, dev.tsv) or a movie-review file; "
        "copa: a SuperGLUE COPA folder (train.jsonl, val.jsonl); 'synthetic': generated "
        "data for the tiny models (default: the embedded movie reviews; synthetic in smoke)")
    flags.add_methods(parser, REGISTRY.bases)
    flags.add_seeds(parser)
    for name, help_text in [
        ("steps", None), ("eval-every", "steps between dev evaluations"),
        ("budget", ("anytime mode: every method runs until it has spent this many FE "
                    "(--steps and --eval-every are then unused)")),
        ("eval-every-fe", "anytime mode: dev loss every this many FE (default: budget / 8)"),
        ("batch-size", None), ("eval-batch-size", None), ("n-train", None), ("n-dev", None),
        ("n-test", None), ("probe-every", "train-loss probe period in steps"),
        ("timing-reps", "repeats of the timing probes"),
        ("max-length", ("fixed sequence length in tokens; with the embedded movie reviews "
                        "longer snippets are dropped, otherwise longer examples are an error "
                        "(default: fit the data)"))]:
        parser.add_argument(f"--{name}", type=flags.positive_int, help=help_text)
    parser.add_argument("--lr", type=float, help="learning rate (paper: 5e-5)")
    parser.add_argument("--mu", type=float, help="perturbation scale (paper: 1e-2)")
    parser.add_argument("--data-seed", type=int, help="seed of the split permutation (0)")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"],
                        help="storage dtype of the frozen base weights; LoRA is float32 "
                        "(default float32)")
    from benchmarks.llm.tasks import PROMPTS

    parser.add_argument("--prompt", choices=list(PROMPTS),
                        help="sst2 prompt (template and options; default it_was, MeZO's)")
    parser.add_argument("--lora-layers", type=flags.positive_int,
                        help="LoRA on the top N layers only; the layers below are computed "
                        "once per example and cached (default: every layer)")
    parser.add_argument("--lora-rank", type=flags.positive_int,
                        help="LoRA rank, with alpha / rank = 2 as MeZO's r = 8, alpha = 16 "
                        "(default 8)")
    parser.add_argument("--sequential", action="store_const", const=True,
                        help="evaluate a step's 2K perturbed forward passes one after "
                        "another (zoaq_jax.sequential) instead of in one vmapped call: "
                        "activation memory does not grow with K")
    parser.add_argument("--no-baselines", action="store_true",
                        help="skip the baselines and the memory table (the cpu preset runs them)")
    parser.add_argument("--baselines", action="store_const", const=True,
                        help="also run the baselines (zero-shot per prompt, linear probe, "
                        "first-order reference) and the compiled-memory table")
    parser.add_argument("--merge", nargs="+", type=Path, metavar="RESULTS",
                        help="instead of training: the results of these llm.json.xz files "
                        "(runs of this preset and options, e.g. one seed each run side by "
                        "side) in one page, with the baselines of --baselines computed here")
    parser.add_argument("--prompt-table", type=Path, metavar="RESULTS",
                        help="with --baselines: reuse the zero-shot prompt table of this JSON "
                        "(written by --prompt-table-only, or a page's llm.json.xz) instead of "
                        "recomputing it")
    parser.add_argument("--prompt-table-only", action="store_true",
                        help="only score every prompt zero-shot (raw and calibrated); "
                        "writes OUT/llm_prompts.json.xz")
    parser.add_argument("--first-order-only", action="store_true",
                        help="only run the first-order reference (every --first-order-lrs "
                        "rate from every seed, anytime mode); writes "
                        "OUT/llm_first_order.json.xz")
    parser.add_argument("--baselines-from", type=Path, metavar="RESULTS",
                        help="with --merge: the zero-shot prompt table, linear probe and "
                        "memory table of this llm.json.xz and the first-order runs of "
                        "--first-order, instead of computing the baselines (loads no model)")
    parser.add_argument("--first-order", nargs="+", type=Path, metavar="RESULTS",
                        help="with --baselines-from: the llm_first_order.json.xz files of "
                        "--first-order-only runs (e.g. one seed each)")
    parser.add_argument("--first-order-lrs", type=float, nargs="+", metavar="LR",
                        help="Adam's learning rates of the first-order reference; the one "
                        "with the lowest mean best dev loss is its row (1e-4 3e-4 1e-3)")
    parser.add_argument("--no-fast-path", dest="fast_path", action="store_const", const=False,
                        help="score single-token options with one sequence per candidate")
    parser.add_argument(
        "--cores", nargs="+", metavar="CORE",
        help="CPU cores the (single) process may run on, e.g. 0 or 0-3 (default: all). The "
        "LLM runs in one process that loads the model once (on a GPU, the one device), so "
        "--workers is 1; this restricts that process, e.g. to time one core")
    flags.add_workers(parser, single="it loads the model once; --cores picks its cores")
    flags.add_outputs(parser, None, "OUT/llm.md; with --render, llm.md next to the results "
                      "file; 'none': no page",
                      out_help="folder for llm.json.xz and llm.png (default out/llm-<preset>)")


def configure(args: argparse.Namespace):
    """The configuration of the preset and the options; fails on bad input before anything
    is loaded."""
    from benchmarks.llm import config, methods

    try:
        chosen = methods.parse(flags.items(args.methods) if args.methods
                               else PRESETS[args.preset].methods)
    except ValueError as err:
        flags.fail(str(err))
    values = dict(vars(args), seeds=flags.seeds(args.seeds),
                  baselines=False if args.no_baselines else args.baselines,
                  methods=[m.spec for m in chosen] if args.methods else None)
    if args.budget is not None and args.eval_every_fe is None:  # not the preset's period
        values["eval_every_fe"] = config.default_eval_every_fe(args.budget)
    cfg = presets.from_args(PRESETS[args.preset], argparse.Namespace(**values))
    return config.complete(cfg, n_dev_given=args.n_dev is not None)


def _configs(args: argparse.Namespace) -> list:
    cfg = configure(args)
    if args.cores:
        pool.pin_to_cores(flags.seeds(args.cores, "--cores"))
    args.methods = list(cfg.methods) if args.methods else None
    args.seeds = cfg.seeds if args.seeds else None
    return [cfg]


def _compute(cfg, args: argparse.Namespace, recorder) -> dict | list:
    """The payload (trained, or merged from ``--merge``), the prompt table's rows, or the
    first-order reference's runs (:func:`benchmarks.llm.experiment.first_order`)."""
    try:
        if args.prompt_table_only or args.first_order_only:
            from benchmarks.llm import baselines, experiment as llm

            setup = llm.prepared(cfg)
            return (baselines.prompt_table(cfg, setup) if args.prompt_table_only
                    else llm.first_order(cfg, setup))
        return _merge(args, cfg, recorder) if args.merge else _run(args, cfg, recorder)
    except (ValueError, FileNotFoundError, RuntimeError, ImportError) as err:
        flags.fail(str(err))


def _stored(cfg, computed: dict | list, record) -> dict:
    if isinstance(computed, list):
        return {"record": record.as_dict(), "prompts": computed}
    if "first_order_all" in computed:
        return {"record": record.as_dict(), "config": presets.as_dict(cfg), **computed}
    return computed


def _out(args: argparse.Namespace) -> Path:
    return args.out or Path(f"out/llm-{args.preset}")


# The results file and its name of the commands that write no page.
_ONLY = {"prompt_table_only": ("llm_prompts", "prompt table"),
         "first_order_only": ("llm_first_order", "first-order runs")}


def _only(args: argparse.Namespace) -> tuple[Path, str] | None:
    """``(results file, what it holds)`` of ``--prompt-table-only`` or
    ``--first-order-only``; ``None`` for a page's run (:func:`report.write` writes its
    results)."""
    for flag, (stem, what) in _ONLY.items():
        if getattr(args, flag) and not args.render:
            return _out(args) / f"{stem}{common.RESULTS}", what
    return None


def _page(cfg, payload: dict, args: argparse.Namespace) -> None:
    """The page (and the results beside its figure and beside it: :func:`report.write`)."""
    from benchmarks.llm import report

    only = _only(args)
    if only is not None:
        print(f"wrote {only[1]}: {only[0]}", file=sys.stderr)
        return
    out_dir, page = ((args.out, args.render.parent / "llm.md") if args.render
                     else (_out(args), _out(args) / "llm.md"))
    for name, path in report.write(out_dir, _report_path(args, page), payload).items():
        print(f"wrote {name}: {path}", file=sys.stderr)


COMMAND = experiment.Command(
    "llm", _configs, _compute, _stored,
    lambda cfg, args: (_only(args) or (None,))[0],  # None: report.write writes it
    lambda payload: None, _page, skip=("render", "workers"))


def main(args: argparse.Namespace) -> int:
    return experiment.main(COMMAND, args)


def _run(args: argparse.Namespace, cfg, recorder, merged: list[dict] | None = None) -> dict:
    """Trains the methods of ``cfg`` on its seeds (seeds outer; or takes the ``merged``
    results of earlier runs), with the zero-shot row and the baselines; the payload."""
    import jax

    from benchmarks import record
    from benchmarks.experiment import execute, split
    from benchmarks.llm import experiment, train

    prompts = _prompts(args.prompt_table) if args.prompt_table else None
    setup = experiment.prepared(cfg)
    print(f"model {setup.model['name']}, {setup.lora_params:,} LoRA parameters; data "
          f"{setup.data['source']} {setup.data['sizes']}; length "
          f"{setup.data['max_length']}; fast path {setup.data['fast_path']}; "
          f"{len(record.available_cores())} cores; JAX {jax.__version__} on "
          f"{jax.default_backend()}", file=sys.stderr)
    zero = train.zero_shot(setup.bundle, cfg)
    results = merged if merged is not None else execute(
        experiment.run, split(cfg, "seeds", cfg.methods), args.workers, "llm", done=_log)
    extra = (experiment.run_baselines(cfg, setup, results, prompts=prompts)
             if cfg.baselines else None)
    payload = experiment.payload(args.preset, cfg, setup, zero, results,
                                 recorder.snapshot().as_dict(), extra)
    return json.loads(json.dumps(to_jsonable(payload)))  # as --render reads it back


def _prompts(path: Path) -> list[dict]:
    """The zero-shot prompt table of a ``--prompt-table-only`` file or of a page's JSON."""
    payload = flags.read_results(path, "--prompt-table")
    table = payload.get("prompts") or payload.get("baselines", {}).get("prompts")
    if not table:
        flags.fail(f"{path} holds no prompt table.")
    return table


def _log(cfg, method: str, records: list[dict]) -> None:
    for r in records:
        print(f"{method} seed {r['seed']}: FE {r['total_fe']}, best dev loss "
              f"{r['best_eval_loss']:.4f}, test acc {r['accuracy']:.3f}, "
              f"{r['timing']['fe_per_s']:.2f} FE/s, overhead "
              f"{100 * r['timing']['overhead_share']:.1f}%", file=sys.stderr)


def _merge(args: argparse.Namespace, cfg, recorder) -> dict:
    """One payload from the results of several runs of the same configuration (their
    seeds and methods may differ); the model is loaded here for the zero-shot row and the
    baselines, unless they come from earlier runs (``--baselines-from``)."""
    from benchmarks.llm import experiment

    payloads = [read_results(p, "--merge") for p in args.merge]
    # What the merged runs may differ in: their seeds and methods (each record names its
    # own), and the settings of the baselines, computed here.
    ignore = ("seeds", "methods", "baselines", "preset", "first_order_lr", "first_order_lrs")
    want = {k: v for k, v in json.loads(json.dumps(presets.as_dict(cfg))).items()
            if k not in ignore}
    for path, p in zip(args.merge, payloads):
        got = {k: v for k, v in p["config"].items() if k not in ignore}
        # a setting an older run did not record is at its default, None
        diff = sorted(k for k in want.keys() | got.keys() if got.get(k) != want.get(k))
        if diff:
            flags.fail(f"{path} was run with other settings ({', '.join(diff)}); pass the "
                       "same preset and options as its run.")
    results = [r for p in payloads for r in p["results"]]
    cfg = dataclasses.replace(cfg, seeds=tuple(sorted({r["seed"] for r in results})),
                              methods=tuple(dict.fromkeys(r["method"] for r in results)))
    # The runs that trained (a merged page's own runs, not the command that merged them).
    trained = [rec for p in payloads for rec in p.get("merged_runs") or [p["record"]]]
    if args.baselines_from:  # nothing to compute: the baselines of earlier runs
        if not args.first_order:
            flags.fail("--baselines-from needs the first-order runs (--first-order).")
        base = read_results(args.baselines_from, "--baselines-from")["baselines"]
        parts = [flags.read_results(p, "--first-order") for p in args.first_order]
        extra = experiment.with_first_order(
            {k: base[k] for k in ("prompts", "linear_probe", "memory")}, parts, results)
        cfg = dataclasses.replace(cfg, baselines=True)
        payloads[0] = {**payloads[0], "baselines": extra, "baselines_from": [
            str(path) for path in (args.baselines_from, *args.first_order)]}
    if not cfg.baselines or args.baselines_from:  # the runs' model, data and zero-shot row
        first = {**payloads[0], "record": recorder.snapshot().as_dict()}
        payload = {**first, "config": {"preset": args.preset, **presets.as_dict(cfg)},
                   "results": results, "merged_runs": trained,
                   **(experiment.regrets(results, cfg.budget, cfg.eval_every_fe)
                      if cfg.budget is not None else {})}
        return json.loads(json.dumps(to_jsonable(payload)))  # as --render reads it back
    payload = _run(args, cfg, recorder, merged=results)
    payload["merged_runs"] = trained
    return payload


def _report_path(args: argparse.Namespace, default: Path) -> Path | None:
    if args.report is not None and str(args.report) == "none":
        return None
    return Path(args.report) if args.report else default
