"""Forward-only LoRA fine-tuning (MeZO protocol): FE saved against fixed K=4.

Presets:
  smoke  tiny random LLaMA on synthetic data, seconds (CI).
  cpu    SmolLM2-135M-Instruct on the movie-review snippets (snippets that fit in 32
         tokens), 100 steps, one seed, R-AdaZO K=4 as the fixed-K reference (MeZO K=4
         costs the same FE), sized to finish within an hour on 2 shared CPU cores: a
         small real run, not the paper's protocol.
  paper  the paper's protocol: 5,000 steps, eval every 250, 1000/500/1000 examples,
         3 seeds (meant for a GPU).
  anytime  the cpu preset's model and data in anytime mode: every method spends the same
         budget of 144 FE (R-AdaZO K=4 runs 18 steps, K=1 72), dev loss every 24 FE on
         100 dev examples; fixed K in {1, 2, 4} give the envelope, and the report gives
         the query regret of each method (see report.py).
Any preset value can be overridden by the matching option. ``--budget FE`` turns any
preset into anytime mode (steps then follow from each method's FE per step; dev loss is
evaluated every ``--eval-every-fe`` FE, default budget / 8).

Writes OUT/llm.json and OUT/llm.png (default OUT: out/llm-<preset>) and the Markdown
page REPORT (default OUT/llm.md) with its figure and JSON in REPORT_DIR/llm/.

Examples:
  python -m benchmarks llm --preset smoke --out /tmp/llm
  python -m benchmarks llm --model smollm2 --task sst2 --preset cpu
  python -m benchmarks llm --model smollm2 --task sst2 --preset cpu --report docs/results/llm.md
  python -m benchmarks llm --preset anytime --report docs/results/llm_anytime.md
  python -m benchmarks llm --model opt:/data/opt-1.3b --task sst2 --data /data/SST-2 --preset paper
  python -m benchmarks llm --model opt:/data/opt-1.3b --task copa --data /data/COPA --preset paper
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from pathlib import Path

from benchmarks import flags
from benchmarks import pool
from benchmarks import record as run_record

PRESETS = {
    "smoke": dict(
        model="tiny-llama",
        steps=12,
        eval_every=6,
        batch_size=4,
        n_train=32,
        n_dev=8,
        n_test=8,
        seeds=[0],
        max_length=None,
        eval_batch_size=8,
        probe_every=3,
        timing_reps=1,
    ),
    "cpu": dict(
        model="smollm2",
        steps=100,
        eval_every=20,
        batch_size=16,
        n_train=1000,
        n_dev=200,
        n_test=400,
        seeds=[0],
        max_length=32,
        eval_batch_size=16,
        probe_every=10,
        timing_reps=3,
        methods=("radazo", "statzo", "zoaq-1-4", "zoaq-1-2"),
    ),
    "paper": dict(
        model="smollm2",
        steps=5000,
        eval_every=250,
        batch_size=16,
        n_train=1000,
        n_dev=500,
        n_test=1000,
        seeds=[0, 1, 2],
        max_length=None,
        eval_batch_size=16,
        probe_every=10,
        timing_reps=3,
    ),
}
PRESETS["anytime"] = dict(
    PRESETS["cpu"],
    n_dev=100,
    n_test=100,
    timing_reps=1,
    budget=144,
    eval_every_fe=24,
    methods=("radazo-k1", "radazo-k2", "radazo", "auto-k", "zoaq-1-2", "zoaq-1-4"),
)
COPA_DEV = 100  # MeZO's COPA dev size


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from benchmarks.llm.methods import DEFAULT, METHODS

    parser.add_argument("--preset", choices=sorted(PRESETS), default="smoke")
    parser.add_argument(
        "--model",
        help="smollm2 | gguf:PATH | opt:PATH | hf:PATH | tiny-llama | "
        "tiny-opt (default: the preset's)",
    )
    parser.add_argument("--task", choices=["sst2", "copa"], default="sst2")
    parser.add_argument(
        "--data",
        help="sst2: a GLUE SST-2 folder (train.tsv, dev.tsv) or a "
        "movie-review file (default: the embedded movie reviews; synthetic in "
        "smoke); copa: a SuperGLUE COPA folder (train.jsonl, val.jsonl)",
    )
    parser.add_argument(
        "--methods",
        nargs="+",
        help=f"from {' '.join(METHODS)} (default: {' '.join(DEFAULT)}); "
        "space- or comma-separated",
    )
    parser.add_argument("--seeds", nargs="+", help="integers, space- or comma-separated")
    parser.add_argument("--steps", type=flags.positive_int)
    parser.add_argument("--eval-every", type=flags.positive_int)
    parser.add_argument(
        "--budget",
        type=flags.positive_int,
        help="anytime mode: every method runs until it has spent this many FE "
        "(--steps and --eval-every are then unused)",
    )
    parser.add_argument(
        "--eval-every-fe",
        type=flags.positive_int,
        help="anytime mode: dev loss every this many FE (default: budget / 8)",
    )
    parser.add_argument("--batch-size", type=flags.positive_int)
    parser.add_argument("--eval-batch-size", type=flags.positive_int)
    parser.add_argument("--lr", type=float, default=5e-5, help="learning rate (paper: 5e-5)")
    parser.add_argument("--mu", type=float, default=1e-2, help="perturbation scale (paper: 1e-2)")
    parser.add_argument("--n-train", type=flags.positive_int)
    parser.add_argument("--n-dev", type=flags.positive_int)
    parser.add_argument("--n-test", type=flags.positive_int)
    parser.add_argument("--data-seed", type=int, default=0, help="seed of the split permutation")
    parser.add_argument(
        "--max-length",
        type=flags.positive_int,
        help="fixed sequence length in tokens; with "
        "the embedded movie reviews longer snippets are dropped, otherwise "
        "longer examples are an error (default: fit the data)",
    )
    parser.add_argument(
        "--dtype",
        choices=["float32", "bfloat16"],
        default="float32",
        help="storage dtype of the frozen base weights (LoRA is float32)",
    )
    parser.add_argument(
        "--no-fast-path",
        action="store_true",
        help="score single-token options with one sequence per candidate",
    )
    parser.add_argument(
        "--cores", nargs="+", help="CPU cores to pin the process to, space- or comma-separated"
    )
    parser.add_argument("--out", help="folder for llm.json and llm.png (default out/llm-<preset>)")
    parser.add_argument(
        "--report",
        help="Markdown page (default: OUT/llm.md; with --render, llm.md next to "
        "LLM_JSON); 'none' to skip",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument(
        "--render",
        metavar="LLM_JSON",
        help="only rewrite the Markdown page (and its figure and JSON beside it) "
        "from an existing llm.json, no training; with --out also OUT/llm.json and llm.png",
    )


def _ints(values: list[str]) -> list[int]:
    try:
        return [int(x) for x in flags.items(values)]
    except ValueError:
        raise SystemExit(f"Expected integers, got {' '.join(values)!r}.") from None


def main(args: argparse.Namespace) -> int:
    if args.render:
        return _render(args)
    if args.cores:
        pool.pin_to_cores(_ints(args.cores))
    preset = dict(PRESETS[args.preset])
    for key in (
        "model",
        "steps",
        "eval_every",
        "batch_size",
        "eval_batch_size",
        "n_train",
        "n_dev",
        "n_test",
        "max_length",
        "budget",
        "eval_every_fe",
    ):
        value = getattr(args, key)
        if value is not None:
            preset[key] = value
    if args.seeds:
        preset["seeds"] = _ints(args.seeds)
    if preset.get("budget") is not None and preset.get("eval_every_fe") is None:
        preset["eval_every_fe"] = max(1, preset["budget"] // 8)
    if args.task == "copa" and args.n_dev is None and args.preset != "smoke":
        preset["n_dev"] = COPA_DEV
    try:
        return _run(args, preset, run_record.available_cores())
    except (ValueError, FileNotFoundError, RuntimeError, ImportError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


def _run(args, preset: dict, cores: list[int]) -> int:
    import jax

    from benchmarks.llm import data, fetch, lora, methods, models, report, tasks, train

    wall0 = time.perf_counter()
    load_before = run_record.load_average()
    names = (
        flags.items(args.methods)
        if args.methods
        else list(preset.get("methods", methods.DEFAULT))
    )
    chosen = methods.get_methods(names)
    sizes = dict(n_train=preset["n_train"], n_dev=preset["n_dev"], n_test=preset["n_test"])
    task = tasks.get_task(args.task)

    # Data first (the tiny models' vocabulary comes from it).
    filter_long = False
    if args.data:
        source = Path(args.data)
    elif args.preset == "smoke":
        source = None  # synthetic: smoke runs never download anything
    elif args.task == "sst2":
        source, filter_long = fetch.movie_reviews(), True
    else:
        raise ValueError(
            "COPA has no embedded data: pass --data with a SuperGLUE COPA folder "
            "(train.jsonl, val.jsonl)."
        )
    if source is None:
        splits = data.synthetic_splits(args.task, seed=args.data_seed, **sizes)
    elif filter_long:
        splits = None  # the filter needs the tokenizer
    else:
        splits = data.load_splits(args.task, source, seed=args.data_seed, **sizes)
    words = (
        data.vocabulary(splits)
        if splits is not None and preset["model"].startswith("tiny-")
        else ()
    )
    if preset["model"].startswith("tiny-") and not words:
        raise ValueError("Tiny random models are for synthetic data (the smoke preset).")

    model, tokenizer, info = models.load_model(preset["model"], dtype=args.dtype, words=words)
    if filter_long:
        pool = data.load_movie_reviews(source)
        dropped = 0
        if preset["max_length"] is not None:
            keep = [ex for ex in pool if _fits(task, tokenizer, ex, preset["max_length"])]
            dropped, pool = len(pool) - len(keep), keep
        splits = data.single_pool_splits(
            pool,
            seed=args.data_seed,
            source=(
                f"movie-review snippets ({source.name}"
                + (
                    f"; {dropped} snippets longer than {preset['max_length']} tokens dropped)"
                    if dropped
                    else ")"
                )
            ),
            **sizes,
        )

    layout = tasks.measure(
        task, tokenizer, splits.train + splits.dev + splits.test, max_length=preset["max_length"]
    )
    fast = layout.single_token and not args.no_fast_path
    encoded = {
        "train": tasks.encode(
            task,
            tokenizer,
            splits.train,
            layout,
            fast_path=fast,
            only_correct=task.loss_kind == "option_lm",
        ),
        "dev": tasks.encode(task, tokenizer, splits.dev, layout, fast_path=fast),
        "test": tasks.encode(task, tokenizer, splits.test, layout, fast_path=fast),
    }
    lora.apply_lora(model, key=0)
    graphdef, adapters, base = lora.split(model)
    bundle = train.Bundle(
        graphdef=graphdef, lora=adapters, base=base, loss_kind=task.loss_kind, **encoded
    )
    cfg = train.TrainConfig(
        steps=preset["steps"],
        eval_every=preset["eval_every"],
        batch_size=preset["batch_size"],
        learning_rate=args.lr,
        mu=args.mu,
        eval_batch_size=preset["eval_batch_size"],
        probe_every=preset["probe_every"],
        timing_reps=preset["timing_reps"],
        budget=preset.get("budget"),
        eval_every_fe=preset.get("eval_every_fe"),
    )
    print(
        f"model {info['name']}, {lora.num_params(adapters):,} LoRA parameters; data "
        f"{splits.source} {splits.sizes()}; length {layout.max_length}; fast path {fast}; "
        f"{len(cores)} cores; JAX {jax.__version__}",
        file=sys.stderr,
    )

    zero = train.zero_shot(bundle, cfg)
    results = []
    for seed in preset["seeds"]:
        for method in chosen:
            results.append(train.run(method, seed, bundle, cfg, show=not args.quiet))
            r = results[-1]
            print(
                f"{method.name} seed {seed}: FE {r['total_fe']}, best dev loss "
                f"{r['best_eval_loss']:.4f}, test acc {r['accuracy']:.3f}, "
                f"{r['timing']['fe_per_s']:.2f} FE/s, overhead "
                f"{100 * r['timing']['overhead_share']:.1f}%",
                file=sys.stderr,
            )

    out_dir = Path(args.out or f"out/llm-{args.preset}")
    payload = {
        "command": flags.command_line("llm", args, skip=("render",)),
        "finished": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": run_record.machine_info(),
        "load_before": load_before,
        "load_after": run_record.load_average(),
        "wall_s": time.perf_counter() - wall0,
        "config": {
            "preset": args.preset,
            "task": args.task,
            "methods": [m.name for m in chosen],
            **{k: preset[k] for k in ("steps", "eval_every", "batch_size", "seeds", "timing_reps")},
            **{k: preset.get(k) for k in ("budget", "eval_every_fe")},
            "learning_rate": args.lr,
            "mu": args.mu,
            "data_seed": args.data_seed,
        },
        "model": info,
        "lora_params": lora.num_params(adapters),
        "data": {
            "source": splits.source,
            "sizes": splits.sizes(),
            "max_length": layout.max_length,
            "option_length": layout.option_length,
            "fast_path": fast,
        },
        "zero_shot": zero,
        "results": results,
    }
    if cfg.budget is not None:
        payload["regret"] = report.regret(results, cfg.budget, cfg.eval_every_fe)
    paths = report.write(out_dir, _report_path(args, out_dir / "llm.md"), payload)
    for name, path in paths.items():
        print(f"wrote {name}: {path}", file=sys.stderr)
    return 0


def _fits(task, tokenizer, ex, max_length: int) -> bool:
    ctx = tokenizer.prefix() + tokenizer.encode(task.context(ex))
    return len(ctx) + max(len(tokenizer.encode(o)) for o in task.options(ex)) <= max_length


def _report_path(args, default: Path) -> Path | None:
    if args.report == "none":
        return None
    return Path(args.report) if args.report else default


def _render(args) -> int:
    import json

    from benchmarks.llm import report

    path = Path(args.render)
    if not path.is_file():
        print(f"error: {path} does not exist.", file=sys.stderr)
        return 2
    payload = json.loads(path.read_text())
    out_dir = Path(args.out) if args.out else None
    for name, p in report.write(out_dir, _report_path(args, path.parent / "llm.md"),
                                payload).items():
        print(f"wrote {name}: {p}", file=sys.stderr)
    return 0
