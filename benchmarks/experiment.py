"""The one experiment structure every benchmark follows, and the one way units are run.

A benchmark is three things:

- a **config**, a frozen dataclass with presets (:mod:`benchmarks.presets`) that names
  everything a result depends on, its seeds included;
- **``run(config, method) -> list[dict]``**, a module-level function that runs one method
  (a spec of :mod:`benchmarks.methods`) on every seed of ``config`` and returns its
  records (JSON values; one per seed, or one per objective with per-seed lists where a
  method's seeds are one vmapped program);
- a **renderer** from the config and the records to a Markdown page and its figures
  (``report.py``, on :mod:`benchmarks.pages`).

A command splits its config into units ``(config, method)`` (:func:`split`: a config
narrowed to one problem or seed where those should spread over the workers too) and hands
them to :func:`execute`, which runs them on :mod:`benchmarks.pool`'s pinned workers.
What a worker loads once (a data set, a model) is a function decorated with
:func:`per_worker`. Results files hold ``{"record": ..., <the config>: ..., "results":
[...]}`` plus what the renderer derives from the results (regret rows, summaries),
written with :func:`save` and read with :func:`read_results`. The attack file
accumulates every run written to its folder, so its run records and configs are in
``runs``, one per method run (:mod:`benchmarks.attack.results`). The speed benchmark is
the exception: timings are only comparable when every configuration is timed round-robin
in one process, so its unit is the whole set.

Every command is one template, :func:`main`, filled in by a :class:`Command` (the hooks:
its configs, its computation, what its results file holds, where it goes, its page):
:func:`main` owns ``--render`` (the page from a results file, nothing computed), the run
record (:class:`benchmarks.record.Recorder`) and the results write.

Example:
  >>> from benchmarks import experiment
  >>> def run(config, method):  # one record: the config squared
  ...     return [{"method": method, "value": config * config}]
  >>> experiment.execute(run, [(2, "a"), (3, "b")], workers=1, desc="ex", bar=False)
  [{'method': 'a', 'value': 4}, {'method': 'b', 'value': 9}]
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

from benchmarks import common, flags, pool
from benchmarks.record import Recorder, RunRecord

C = TypeVar("C")
T = TypeVar("T")


class Run(Protocol[C]):
    """``run(config, method) -> records``: one method on every seed of ``config``."""

    def __call__(self, config: C, method: str) -> list[dict[str, Any]]: ...


def _unit(item: tuple[Run, Any, str, int]) -> list[dict[str, Any]]:
    run, config, method, _ = item
    return run(config, method)


def execute(run: Run[C], units: Sequence[tuple[C, str]], workers: int, desc: str, *,
            cost: Callable[[C, str], float] | None = None,
            done: Callable[[C, str, list[dict[str, Any]]], None] | None = None,
            bar: bool = True) -> list[dict[str, Any]]:
    """The records of ``run(config, method)`` for every unit, in the order of ``units``.

    Args:
      run: the experiment's module-level ``run`` (workers import it by name).
      units: ``(config, method)`` pairs.
      workers: processes pinned to one core each; ``<= 1`` runs in this process.
      desc: the progress bar's label.
      cost: a unit's relative cost; the costliest start first, for a short tail.
      done: called in this process with ``(config, method, records)`` as each unit
        finishes (a long run saves what it has).
      bar: show a progress bar.

    Returns:
      The concatenated records, in the order of ``units`` whatever order they finished in.
    """
    items = [(run, config, method, i) for i, (config, method) in enumerate(units)]
    if cost is not None:
        items.sort(key=lambda item: -cost(item[1], item[2]))
    finished: dict[int, list[dict[str, Any]]] = {}
    for (_, config, method, i), records in pool.pinned_imap(_unit, items, workers, desc, bar=bar):
        finished[i] = records
        if done is not None:
            done(config, method, records)
    return [record for i in range(len(items)) for record in finished[i]]


def split(config: C, field: str, methods: Sequence[str]) -> list[tuple[C, str]]:
    """Units that spread the values of ``field`` over the workers too.

    Args:
      config: a dataclass whose ``field`` is a tuple (seeds, problems).
      field: the field split.
      methods: the method specs.

    Returns:
      ``(config narrowed to one value of field, method)`` for every value (outer) and
      method, in the order the results are reported.

    Example:
      >>> import dataclasses
      >>> from benchmarks import experiment
      >>> Config = dataclasses.make_dataclass("Config", [("seeds", tuple)], frozen=True)
      >>> units = experiment.split(Config(seeds=(0, 1)), "seeds", ["a", "b"])
      >>> [(config.seeds, method) for config, method in units]
      [((0,), 'a'), ((0,), 'b'), ((1,), 'a'), ((1,), 'b')]
    """
    return [(dataclasses.replace(config, **{field: (value,)}), method)
            for value in getattr(config, field) for method in methods]


def read_results(path: Path, option: str = "--render") -> dict[str, Any]:
    """The results file ``path`` given to ``option``; a missing file, or one without
    ``results`` (written before this structure), ends the command (:func:`flags.fail`)."""
    data = flags.read_results(path, option)
    if "results" not in data:
        flags.fail(f"{option} {path} has no 'results': an older version wrote it; run the "
                   "command that wrote it again (into an empty folder)")
    return data


def save(path: Path, data: dict[str, Any]) -> Path:
    """Writes the results file ``path`` (:func:`benchmarks.common.write_json`): the one
    write of a results file, by :func:`main` or as a long run goes."""
    return common.write_json(path, data)


def per_worker(*fields: str) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """A setup run once per worker process: the decorated ``setup(*args)`` computes again
    only when its arguments change (the last result kept: a worker holds one data set, one
    model). With ``fields``, its first argument is a config and only those fields count.
    ``setup.cache_clear()`` forgets the kept result.

    Example:
      >>> from benchmarks import experiment
      >>> @experiment.per_worker()
      ... def square(x):
      ...     print("computing")
      ...     return x * x
      >>> square(3), square(3)
      computing
      (9, 9)
    """
    def wrap(setup: Callable[..., T]) -> Callable[..., T]:
        last: dict[tuple, T] = {}

        @functools.wraps(setup)
        def once(*args: Any) -> T:
            key = tuple(getattr(args[0], f) for f in fields) if fields else args
            if key not in last:
                last.clear()
                last[key] = setup(*args)
            return last[key]

        once.cache_clear = last.clear  # type: ignore[attr-defined]
        return once

    return wrap


@dataclasses.dataclass(frozen=True)
class Command:
    """What a benchmark fills in for :func:`main`.

    Attributes:
      name: the command (``python -m benchmarks NAME``), for the run record.
      configs: ``args -> configs`` the command line runs (checked, everything cheap
        validated, before any computation; each gets its own run record and results).
      compute: ``(config, args, recorder) -> computed``: the computation (the units on the
        pool, :func:`execute`); ``recorder.snapshot()`` for a long run's partial saves.
      stored: ``(config, computed, record) -> data``: the results file's content.
      path: ``(config, args) -> Path``: where it goes (``None``: the page writes it).
      load: ``data -> config``: the config of a results file (for ``--render``).
      page: ``(config, data, args) -> None``: writes the page of a results file's content.
      skip: options left out of the recorded command line.
      read: reads ``--render``'s file (default :func:`read_results`).
    """

    name: str
    configs: Callable[[argparse.Namespace], Sequence[Any]]
    compute: Callable[[Any, argparse.Namespace, Recorder], Any]
    stored: Callable[[Any, Any, RunRecord], dict[str, Any]]
    path: Callable[[Any, argparse.Namespace], Path | None]
    load: Callable[[dict[str, Any]], Any]
    page: Callable[[Any, dict[str, Any], argparse.Namespace], None]
    skip: tuple[str, ...] = ("render",)
    read: Callable[[Path], dict[str, Any]] = read_results


def main(command: Command, args: argparse.Namespace) -> int:
    """Renders ``--render``'s results file (computing nothing), else runs each config of
    the command line under a run record, writes its results file and its page."""
    if getattr(args, "render", None):
        data = command.read(args.render)
        command.page(command.load(data), data, args)
        return 0
    configs = command.configs(args)
    line = flags.command_line(command.name, args, skip=command.skip)
    for config in configs:
        with Recorder(line) as recorder:
            computed = command.compute(config, args, recorder)
        data = command.stored(config, computed, recorder.record)
        path = command.path(config, args)
        if path is not None:
            save(path, data)
        command.page(config, data, args)
    return 0
