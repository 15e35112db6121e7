"""The flags every benchmark command shares, with one meaning each, and one error style.

=============  ==============================================================
``--out``      folder for the results files, figures and (by default) the report
``--report``   the Markdown page to write (default: inside ``--out``)
``--render``   re-render the report from a results file, computing nothing
``--workers``  processes, one pinned core each (1: in this process; a command that runs
               in one process takes only 1 and says why)
``--seeds``    seeds as a list: ``0 1 2``, ``0,1,2`` or ranges ``0-999``
``--methods``  method specs of :mod:`benchmarks.methods` (``zoaq``, ``radazo:k=4``)
``--preset``   sizes, one vocabulary (:func:`add_preset`): ``smoke`` (every command,
               under a minute on 2 cores), ``quick`` (minutes), ``paper`` (the paper's
               protocol), then a command's own protocols
``--steps``    iterations (steps) per run, where a command has them
``--quiet``    no progress bars
=============  ==============================================================

Errors a user can fix end the command through :func:`fail`: ``error: ...`` on stderr
and exit status 1, before any data, training or compilation where it can be checked.
``--out`` and ``--report`` are checked while the command line is parsed (argparse
types :func:`writable_dir` and :func:`writable_file`): a path that cannot be written
ends the command at once (exit status 2), not after the run.
"""

from __future__ import annotations

import argparse
import os
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NoReturn

from benchmarks.record import available_cores


def fail(message: str) -> NoReturn:
    """Ends the command with ``error: message`` (exit status 1)."""
    raise SystemExit(f"error: {message}")


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def split(text: str) -> list[str]:
    """``text`` split at the commas outside brackets: ``"a=(1,2),b"`` -> ``["a=(1,2)", "b"]``."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += char in "([{"
        depth -= char in ")]}"
        if char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return [p.strip() for p in [*parts, text[start:]] if p.strip()]


def items(values: Sequence[str] | None) -> list[str]:
    """The items of a list option given as separate words, comma-separated, or both.

    ``--methods a b,c`` gives ``["a", "b", "c"]``. A ``key=value`` after a method spec
    with overrides belongs to it: ``zoaq:n_hist=4,k_max=2`` is one item, and so is
    ``radazo:k=4,directions=sparse:0.1`` (a ``:`` after the ``=`` is part of the value).
    """
    out: list[str] = []
    for value in values or ():
        for part in split(value):
            key, eq, _ = part.partition("=")
            if out and eq and ":" not in key and ":" in out[-1]:
                out[-1] += "," + part  # another override of the previous spec
            else:
                out.append(part)
    return out


def seeds(values: Sequence[str] | None, option: str = "--seeds") -> list[int] | None:
    """The integers of ``--seeds`` (or of ``option``, e.g. ``--cores``): integers and
    inclusive ranges ``a-b``, in order, once."""
    if not values:
        return None
    out: list[int] = []
    for item in items(values):
        first, dash, last = item.partition("-")
        try:
            span = range(int(first), int(last) + 1) if dash else [int(first)]
        except ValueError:
            fail(f"{option} takes integers and ranges such as 0-999, got {item!r}")
        if dash and not span:
            fail(f"empty range {item!r} in {option}")
        out += span
    return list(dict.fromkeys(out))


def _writable(path: Path, kind: str) -> Path:
    """``path`` if it (a ``kind``: "folder" or "file") can be created or written."""
    if path.exists() and (path.is_dir() != (kind == "folder")):
        raise argparse.ArgumentTypeError(f"{path} exists and is not a {kind}")
    existing = path if path.exists() else next(p for p in path.absolute().parents if p.exists())
    if existing != path and not existing.is_dir():
        raise argparse.ArgumentTypeError(
            f"cannot create {path}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | (os.X_OK if existing.is_dir() else 0)):
        raise argparse.ArgumentTypeError(f"cannot write {path}: {existing} is not writable")
    return path


def writable_dir(text: str) -> Path:
    """An ``argparse`` type: a folder that exists writable or can be created."""
    return _writable(Path(text), "folder")


def writable_file(text: str) -> Path:
    """An ``argparse`` type: a file that can be written (``none`` passes: no page)."""
    return Path(text) if text == "none" else _writable(Path(text), "file")


def read_results(path: Path, option: str = "--render") -> dict:
    """The results file ``path`` (``.json.xz``) of ``option``; a missing file ends the
    command (:func:`fail`)."""
    if not Path(path).is_file():
        fail(f"{option} {path} does not exist")
    from benchmarks import common

    return common.read_json(path)


def add_outputs(parser: argparse.ArgumentParser, out: Path | None, report: str,
                out_help: str | None = None) -> None:
    """The output flags of every command: ``--out`` (default ``out``; ``out_help`` says
    what a command without a default does), ``--report`` (``report`` describes its
    default), ``--render`` and ``--quiet``."""
    parser.add_argument("--out", type=writable_dir, default=out, help=out_help or (
        f"folder for results, figures and the report (default {out})"))
    parser.add_argument("--report", type=writable_file,
                        help=f"the Markdown page to write (default {report})")
    parser.add_argument("--render", type=Path, metavar="RESULTS",
                        help="re-render the report from this results file (.json.xz); "
                             "computes nothing")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def add_preset(parser: argparse.ArgumentParser, presets: Mapping[str, str], default: str,
               also: Sequence[str] = ()) -> None:
    """``--preset`` (and the option names ``also``), its help listing every preset with what
    it runs and how long it takes (``presets``: name -> that text), and the default."""
    listed = "; ".join(f"{name}: {text}" for name, text in presets.items())
    parser.add_argument("--preset", *also, dest="preset", choices=list(presets),
                        default=default, help=f"{listed} (default: {default})")


def add_workers(parser: argparse.ArgumentParser, default: int | None = None,
                single: str = "") -> None:
    """``--workers``; ``single`` says why a command runs in one process (it then takes
    only 1)."""
    if single:
        parser.add_argument("--workers", type=int, choices=[1], default=1,
                            help=f"1: this command runs in one process ({single})")
        return
    default = default or len(available_cores())
    parser.add_argument("--workers", type=positive_int, default=default,
                        help=f"processes, one pinned core each; 1: in this process "
                             f"(default {default})")


def add_seeds(parser: argparse.ArgumentParser, default: str = "the preset's") -> None:
    parser.add_argument("--seeds", nargs="+", metavar="SEED",
                        help=f"seeds: 0 1 2, 0,1,2 or ranges 0-999 (default: {default})")


def add_methods(parser: argparse.ArgumentParser, known: Sequence[str]) -> None:
    parser.add_argument("--methods", nargs="+", metavar="SPEC",
                        help="method specs BASE or BASE:key=value,... with BASE from "
                             f"{', '.join(known)} (default: the preset's)")


def command_line(command: str, args: argparse.Namespace, skip: Sequence[str] = ()) -> str:
    """``python -m benchmarks COMMAND`` with every setting in ``args`` spelled out.

    Options left unset (``None``, ``False``, empty lists) and the destinations in
    ``skip`` are omitted; ``True`` flags are written without a value.
    """
    parts = [f"python -m benchmarks {command}"]
    for name, value in vars(args).items():
        if name in skip or value is None or value is False or value == []:
            continue
        flag = "--" + name.replace("_", "-")
        if value is True:
            parts.append(flag)
        elif isinstance(value, (list, tuple)):
            parts.append(" ".join([flag, *(shlex.quote(str(v)) for v in value)]))
        else:
            parts.append(f"{flag} {shlex.quote(str(value))}")
    return " ".join(parts)
