"""One CLI for all benchmarks:
``python -m benchmarks {synthetic,generalization,attack,llm,overhead,devices} ...``.

Each command lives in ``benchmarks/<command>/cli.py`` and exposes
``add_arguments(parser)`` and ``main(args) -> int``. Commands are imported only when
chosen, so a command's optional dependencies never break the others. Every command
takes the flags of :mod:`benchmarks.flags` with one meaning: ``--preset`` (``smoke``:
seconds, for tests), ``--seeds`` (except ``devices``, which times one seed),
``--workers``, ``--out``, ``--report``, ``--render`` and ``--quiet`` (no progress bars,
in its process and the workers it starts).
"""

from __future__ import annotations

import argparse
import importlib
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


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    sub = parser.add_subparsers(dest="command", metavar="command", required=True)
    for name, (_, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        parser.parse_args(argv)  # prints help or a usage error
        return 2
    module = importlib.import_module(COMMANDS[argv[0]][0])
    command = argparse.ArgumentParser(prog=f"python -m benchmarks {argv[0]}",
                                      description=module.__doc__,
                                      formatter_class=argparse.RawDescriptionHelpFormatter)
    module.add_arguments(command)
    args = command.parse_args(argv[1:])
    with common.quiet_bars(args.quiet):
        return int(module.main(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
