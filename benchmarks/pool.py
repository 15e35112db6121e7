"""The one worker pool of the benchmarks: processes pinned to one core each.

On small problems XLA's CPU runtime spends more time synchronising its intra-op threads
than computing; one process per core is several times faster than one process on all
cores. Workers are spawned (a fresh JAX each) under
:class:`concurrent.futures.ProcessPoolExecutor`, which raises
:class:`~concurrent.futures.process.BrokenProcessPool` when a worker dies instead of
waiting for it forever.

Example:
  >>> from benchmarks import pool
  >>> sorted(pool.pinned_imap(lambda x: x * x, [1, 2, 3], workers=1, desc="squares",
  ...                         bar=False))
  [(1, 1), (2, 4), (3, 9)]
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from benchmarks import common
from benchmarks.record import available_cores


def pin_to_cores(cores: Sequence[int]) -> None:
    """Restricts this process (and the XLA threads it starts later) to ``cores``; call
    before the first JAX computation."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, set(cores))


def _start_worker(cores) -> None:
    pin_to_cores([cores.get()])


def pinned_imap(fn: Callable[[Any], Any], items: Sequence[Any], workers: int, desc: str, *,
                bar: bool = True) -> Iterator[tuple[Any, Any]]:
    """Yields ``(item, fn(item))`` in completion order, ``fn`` run on pinned workers.

    Args:
      fn: a picklable (module-level) function of one item.
      items: the work, slowest first for a short tail.
      workers: processes, one core each; ``<= 1`` runs in this process (not pinned).
      bar: show a progress bar (on stderr).

    Raises:
      concurrent.futures.process.BrokenProcessPool: a worker died.
    """
    if workers <= 1:
        wrap = common.progress if bar else (lambda it, **_: it)
        for item in wrap(items, total=len(items), desc=desc):
            yield item, fn(item)
        return
    ctx = multiprocessing.get_context("spawn")
    cores = ctx.Queue()
    available = available_cores()
    for i in range(workers):
        cores.put(available[i % len(available)])
    with concurrent.futures.ProcessPoolExecutor(
            workers, mp_context=ctx, initializer=_start_worker, initargs=(cores,)) as executor:
        futures = {executor.submit(fn, item): item for item in items}
        done = concurrent.futures.as_completed(futures)
        for future in (common.progress(done, total=len(futures), desc=desc) if bar else done):
            yield futures[future], future.result()


def pinned_call(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in one spawned process pinned to this process's first core.

    For a single long job (training a model) whose threads should not spread over the
    cores, or whose result must not depend on how many there are.

    Raises:
      concurrent.futures.process.BrokenProcessPool: the process died.
    """
    with concurrent.futures.ProcessPoolExecutor(
            1, mp_context=multiprocessing.get_context("spawn"), initializer=pin_to_cores,
            initargs=(available_cores()[:1],)) as executor:
        return executor.submit(fn, *args).result()


def ordered(results: list[dict], field: str, names: Sequence[Any], methods: Sequence[str]) -> list:
    """``results`` (records with a ``method``) sorted by their ``field`` in the order of
    ``names``, then by ``method`` in the order of ``methods``."""
    order = {(n, m): i for i, (n, m) in enumerate((n, m) for n in names for m in methods)}
    return sorted(results, key=lambda r: order[(r[field], r["method"])])
