"""Runs the attacks of several methods on the benchmarks' pinned worker pool.

On a small CPU machine XLA's runtime spends much of a small model's time synchronising
its threads; one process pinned to each core is faster than one process using all of
them. The attacks are dealt round-robin into ``workers`` shares; every (method, share)
is one item of :func:`benchmarks.pool.pinned_imap`, run as one vmapped program
(:func:`runner.run_attacks`) by a worker that loaded the target model once, from its
cached weight file (the pool's ``setup``). The parent merges the shares of a method back
into attack order as soon as they are all done. A worker that dies ends the run with
:class:`~concurrent.futures.process.BrokenProcessPool` instead of a hang.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from benchmarks import common, pool
from benchmarks.attack import methods as methods_lib
from benchmarks.attack import models, objective, runner, train


class Job(NamedTuple):
    """What every worker needs to rebuild the attack (all picklable)."""

    dataset: str
    weights: str  # path of the cached weight file
    goal: str
    eps: float
    config: runner.AttackConfig


class MethodRun(NamedTuple):
    outcome: runner.Outcome
    seconds: float  # wall time of the method (the slowest share)


_MODEL: dict[str, Callable] = {}  # weight file -> log_prob, one per worker process


def load_model(dataset: str, weights: str) -> None:
    """The pool's ``setup``: loads the target model of ``weights`` into this process."""
    if weights not in _MODEL:
        model = models.create(dataset)
        train.load_weights(model, weights)
        model.eval()
        _MODEL[weights] = models.log_prob_fn(model)


def run_share(item: tuple[Job, str, int, runner.Tasks]) -> MethodRun:
    """One method on one share of the attacks (a pool item)."""
    job, spec, _, tasks = item
    load_model(job.dataset, job.weights)
    method = methods_lib.parse(spec)
    loss = objective.attack_loss(_MODEL[job.weights], job.eps, job.goal)
    with common.Stopwatch() as watch:
        outcome = runner.run_attacks(
            loss, lambda key: methods_lib.build(method, job.dataset, key), tasks, job.config)
    return MethodRun(outcome, watch.seconds)


def run_methods(job: Job, specs: Sequence[str], tasks: runner.Tasks, *, workers: int = 1,
                on_method: Callable[[str, MethodRun], None] | None = None,
                desc: str = "attacks") -> dict[str, MethodRun]:
    """Runs every method of ``specs`` on all ``tasks`` with ``workers`` processes (one
    pinned core each; 1 runs in this process), calling ``on_method(spec, run)`` as soon as
    all attacks of a method are done (so long runs save method by method).

    Returns:
      ``{spec: MethodRun}`` in the order of ``specs``.

    Raises:
      concurrent.futures.process.BrokenProcessPool: a worker died.
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}.")
    n, used = len(tasks.seed), max(1, min(workers, len(tasks.seed)))
    parts_of = [np.arange(n)[w::used] for w in range(used)]  # attacks dealt round-robin
    items = [(job, spec, w, runner.Tasks(*(np.asarray(a)[share] for a in tasks)))
             for spec in specs for w, share in enumerate(parts_of)]
    parts: dict[str, dict[int, MethodRun]] = {spec: {} for spec in specs}
    done: dict[str, MethodRun] = {}
    for (_, spec, w, _), result in pool.pinned_imap(
            run_share, items, len(parts_of), desc, setup=load_model,
            setup_args=(job.dataset, job.weights)):
        parts[spec][w] = result
        if len(parts[spec]) == len(parts_of):
            done[spec] = merge(parts[spec], parts_of, n)
            if on_method is not None:
                on_method(spec, done[spec])
    return {spec: done[spec] for spec in specs}


def merge(parts: dict[int, MethodRun], shares: list[np.ndarray], n: int) -> MethodRun:
    """Reassembles per-share outcomes in attack order."""
    outcomes = [parts[w].outcome for w in range(len(shares))]
    merged: dict[str, Any] = {}
    for name in ("success", "num_queries", "steps", "loss", "x", "trace_loss", "trace_cos"):
        first = getattr(outcomes[0], name)
        merged[name] = np.zeros((n, *first.shape[1:]), first.dtype)
        for share, outcome in zip(shares, outcomes):
            merged[name][share] = getattr(outcome, name)
    outcome = runner.Outcome(
        **merged, lane_steps_executed=sum(o.lane_steps_executed for o in outcomes),
        lane_steps_useful=sum(o.lane_steps_useful for o in outcomes),
        widths=tuple(sorted({w for o in outcomes for w in o.widths}, reverse=True)))
    return MethodRun(outcome, max(p.seconds for p in parts.values()))
