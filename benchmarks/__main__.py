"""The benchmarks of zoaq_jax: python -m benchmarks COMMAND [options].

Run "python -m benchmarks COMMAND --help" for a command's options, presets and examples.

Options every command takes with one meaning:
  --preset   how much to run: smoke (every command, under a minute on 2 cores), quick
             (minutes: synthetic, generalization), paper (the paper's protocol: synthetic,
             attack, llm), then each command's own protocols, listed in its --help
  --seeds    seeds: 0 1 2, 0,1,2 or ranges 0-999 (devices times one seed)
  --steps    iterations per run (synthetic, attack, llm, devices)
  --workers  processes, one pinned core each
  --out      folder for the results file, figures and report
  --report   the Markdown page to write
  --render   re-render the report from a results file, computing nothing
  --quiet    no progress bars
"""

# Each command lives in benchmarks/<command>/cli.py (devices: overhead/devices.py) and
# exposes add_arguments(parser) and main(args) -> int, the command template
# benchmarks.experiment.main filled in by its Command. Commands are imported only when
# chosen, so a command's optional dependencies never break the others. The help shown
# is plain text: the docstrings' reStructuredText markup is removed (plain()).

from __future__ import annotations

import argparse
import importlib
import re
import sys

from benchmarks import common

COMMANDS = {
    "synthetic": ("benchmarks.synthetic.cli", "synthetic objectives (the paper's Section 5.1)"),
    "attack": ("benchmarks.attack.cli", "black-box adversarial attacks on MNIST / CIFAR-10"),
    "generalization": ("benchmarks.generalization.cli",
                       "auto_k against the best fixed K on held-out objectives"),
    "llm": ("benchmarks.llm.cli", "forward-only LoRA fine-tuning of language models"),
    "overhead": ("benchmarks.overhead.cli", "speed: calls/s against evosax Open_ES"),
    "devices": ("benchmarks.overhead.devices",
                "speed: calls/s with each step's directions split over n devices"),
}


def plain(text: str | None) -> str:
    """``text`` without reStructuredText markup: ``code`` and :role:`target` as plain text."""
    return re.sub(r":[a-z]+:`~?([^`]+)`", r"\1", text or "").replace("``", "")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", metavar="command", required=True)
    for name, (_, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        parser.parse_args(argv)  # prints help or a usage error
        return 2
    module = importlib.import_module(COMMANDS[argv[0]][0])
    command = argparse.ArgumentParser(prog=f"python -m benchmarks {argv[0]}",
                                      description=plain(module.__doc__),
                                      formatter_class=argparse.RawDescriptionHelpFormatter)
    module.add_arguments(command)
    args = command.parse_args(argv[1:])
    with common.quiet_bars(args.quiet):
        return int(module.main(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
