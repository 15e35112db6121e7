"""Runs the attacks of several methods, in this process or in core-pinned workers.

On a small CPU machine XLA's runtime spends much of a small model's time synchronising
its threads; one process pinned to each core is faster than one process using all of
them. With ``workers > 1`` the attacks are dealt round-robin to ``workers`` spawned
processes, each pinned to one core, each running every method on its share as one
vmapped program (:func:`runner.run_attacks`); the parent merges the shares back into
attack order. Workers rebuild the target model from its cached weight file.
"""

from __future__ import annotations

import multiprocessing
import traceback
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from benchmarks import common
from benchmarks import pool
from benchmarks import record as run_record
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
    seconds: float  # wall time of the method (the slowest worker's share)


def run_methods(job: Job, specs: Sequence[str], tasks: runner.Tasks, *, workers: int = 1,
                log_prob: Callable | None = None,
                on_done: Callable[[str, int], None] | None = None,
                on_method: Callable[[str, MethodRun], None] | None = None,
                ) -> dict[str, MethodRun]:
    """Runs every method of ``specs`` on all ``tasks``.

    Args:
      job: the attack settings.
      specs: method specs (:func:`methods.parse`).
      tasks: the attacks.
      workers: processes; 1 runs here, on the cores this process may use.
      log_prob: the model for ``workers == 1`` (loaded from ``job.weights`` if None).
      on_done: ``on_done(spec, count)`` as attacks finish (progress).
      on_method: ``on_method(spec, run)`` as soon as all attacks of a method are done
        (to save results of long runs method by method).

    Returns:
      ``{spec: MethodRun}``.
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}.")
    workers = min(workers, len(tasks.seed))
    if workers == 1:
        log_prob = log_prob or _log_prob(job)
        done = {}
        for spec in specs:
            done[spec] = _run_one(job, spec, tasks, log_prob, on_done)
            if on_method is not None:
                on_method(spec, done[spec])
        return done

    cores = run_record.available_cores()
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    shares = [np.arange(len(tasks.seed))[w::workers] for w in range(workers)]
    procs = [
        context.Process(target=_worker, daemon=True, args=(
            w, [cores[w % len(cores)]], job, list(specs),
            runner.Tasks(*(np.asarray(a)[share] for a in tasks)), queue))
        for w, share in enumerate(shares)
    ]
    for p in procs:
        p.start()
    parts: dict[str, dict[int, MethodRun]] = {spec: {} for spec in specs}
    done: dict[str, MethodRun] = {}
    pending = workers * len(specs)
    try:
        while pending:
            kind, *payload = queue.get()
            if kind == "done" and on_done is not None:
                on_done(*payload)
            elif kind == "result":
                spec, w, result = payload
                parts[spec][w] = result
                pending -= 1
                if len(parts[spec]) == workers:
                    done[spec] = _merge(parts[spec], shares, len(tasks.seed))
                    if on_method is not None:
                        on_method(spec, done[spec])
            elif kind == "error":
                raise RuntimeError(f"attack worker failed:\n{payload[0]}")
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
    return {spec: done[spec] for spec in specs}


def _log_prob(job: Job):
    model = models.create(job.dataset)
    train.load_weights(model, job.weights)
    model.eval()
    return models.log_prob_fn(model)


def _run_one(job: Job, spec: str, tasks: runner.Tasks, log_prob,
             on_done: Callable[[str, int], None] | None) -> MethodRun:
    method = methods_lib.parse(spec)
    loss = objective.attack_loss(log_prob, job.eps, job.goal)
    with common.Stopwatch() as watch:
        outcome = runner.run_attacks(
            loss, lambda key: methods_lib.build(method, job.dataset, key), tasks, job.config,
            on_done=None if on_done is None else lambda k: on_done(spec, k))
    return MethodRun(outcome, watch.seconds)


def _worker(index: int, cores: list[int], job: Job, specs: list[str], tasks: runner.Tasks,
            queue: Any) -> None:
    try:
        pool.pin_to_cores(cores)
        log_prob = _log_prob(job)
        for spec in specs:
            result = _run_one(job, spec, tasks, log_prob,
                              lambda s, k: queue.put(("done", s, k)))
            queue.put(("result", spec, index, result))
    except BaseException:  # report, never hang the parent
        queue.put(("error", traceback.format_exc()))


def _merge(parts: dict[int, MethodRun], shares: list[np.ndarray], n: int) -> MethodRun:
    """Reassembles per-worker outcomes in attack order."""
    first = parts[0].outcome
    merged = {}
    for name in ("success", "num_queries", "steps", "loss", "x", "trace_loss", "trace_cos"):
        value = getattr(first, name)
        array = np.zeros((n, *value.shape[1:]), value.dtype)
        for w, share in enumerate(shares):
            array[share] = getattr(parts[w].outcome, name)
        merged[name] = array
    outcome = runner.Outcome(
        **merged,
        lane_steps_executed=sum(p.outcome.lane_steps_executed for p in parts.values()),
        lane_steps_useful=sum(p.outcome.lane_steps_useful for p in parts.values()),
        widths=tuple(sorted({w for p in parts.values() for w in p.outcome.widths},
                            reverse=True)),
    )
    return MethodRun(outcome, max(p.seconds for p in parts.values()))
