"""One attack run: the setup (data, target model, attacks), the goal x method loop on the
worker pool, and the records and run entries it saves, method by method, to
``OUT/attack.json.xz``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from benchmarks import common, flags
from benchmarks.attack import data as data_lib
from benchmarks.attack import methods as methods_lib
from benchmarks.attack import models, objective, report, train
from benchmarks.attack import results as results_lib
from benchmarks.attack import workers as workers_lib
from benchmarks.attack.protocol import Attacks, Preset, select
from benchmarks.record import Recorder

RESULTS = f"attack{common.RESULTS}"  # the results file of a run folder


class Setup(NamedTuple):
    """What every goal of a run shares: the data, the trained model, the attacks."""

    dataset: data_lib.Dataset
    trained: train.TrainedModel
    attacks: Attacks


def setup(name: str, data_dir: str | None, preset: Preset, epochs: int | None,
          retrain: bool) -> Setup:
    """Loads the data, trains (or loads) the target model and selects the attacks."""
    try:
        dataset = data_lib.load(name, data_dir)
    except (ValueError, FileNotFoundError) as err:
        flags.fail(str(err))
    config = train.TrainConfig(**({} if epochs is None else {"epochs": epochs}))
    trained = train.load_or_train(dataset, config, retrain=retrain,
                                  log=lambda m: print(m, file=sys.stderr))
    predictions = train.predict(models.log_prob_fn(trained.model), dataset.test_images)
    try:
        attacks = select(preset.protocol, dataset, predictions, preset.seeds, preset.images)
    except ValueError as err:
        flags.fail(str(err))
    return Setup(dataset, trained, attacks)


def run(name: str, goals: list[str], preset: Preset, s: Setup, workers: int, command: str,
        out: Path) -> dict[str, Any]:
    """Runs every method of ``preset`` for each goal; saves ``out/attack.json.xz`` (merged with
    the results already there) and the run figures after each method; returns the results."""
    eps = objective.EPSILON[name]
    results_path = out / RESULTS
    results = common.read_json(results_path) if results_path.exists() else None
    for goal in goals:
        job = workers_lib.Job(name, str(s.trained.weights), goal, eps, preset.attack_config)
        finished: dict[str, workers_lib.MethodRun] = {}
        with Recorder(command) as recorder:
            def save(spec, result, goal=goal, recorder=recorder, finished=finished):
                # Saved method by method, so that a long run that is stopped keeps its results.
                nonlocal results
                finished[spec] = result
                new = records(name, preset.protocol, goal, s.attacks, spec, result)
                entry = run_entry(name, preset, goal, eps, workers, s, spec, result,
                                  recorder.snapshot().as_dict())
                results = results_lib.merge(results, new, entry)
                results["anytime"] = results_lib.anytime_summaries(results)
                common.write_json(results_path, results)
                figures(name, preset.protocol, goal, eps, s, finished, out)
                summary = results_lib.summarize(new)
                print(f"{goal:10s} {spec:22s} success {summary['success_rate']:6.1%}  queries "
                      f"{summary['mean']:8.1f} ± {summary['std']:7.1f}  median "
                      f"{summary['median']:8.1f}  ({result.seconds:.1f} s)", file=sys.stderr)

            workers_lib.run_methods(job, preset.methods, s.attacks.tasks(s.dataset, goal),
                                    workers=workers, on_method=save,
                                    desc=f"{name} {preset.protocol} {goal}")
    return results


def records(name: str, protocol: str, goal: str, attacks: Attacks, spec: str,
            result: workers_lib.MethodRun) -> list[dict]:
    """One record per attack of the method ``spec``."""
    target = objective.attacked_class(attacks.label, goal)
    o = result.outcome
    return [{
        "dataset": name, "protocol": protocol, "goal": goal,
        "method": spec, "base": methods_lib.parse(spec).base, "image": int(attacks.image[i]),
        "label": int(attacks.label[i]), "attacked_class": int(target[i]),
        "seed": int(attacks.seed[i]), "success": bool(o.success[i]),
        "num_queries": int(o.num_queries[i]), "steps": int(o.steps[i]),
        "final_loss": float(o.loss[i]),
    } for i in range(len(attacks.seed))]


def run_entry(name: str, preset: Preset, goal: str, eps: float, workers: int, s: Setup,
              spec: str, result: workers_lib.MethodRun, record: dict) -> dict:
    """The run entry of the method ``spec``: settings, run record, model and counts."""
    trained, dataset, o = s.trained, s.dataset, result.outcome
    return {
        "dataset": name, "protocol": preset.protocol, "goal": goal, "eps": eps,
        "config": preset.attack_config._asdict(), "workers": workers, "record": record,
        "model": {"name": type(trained.model).__name__, "source": dataset.source,
                  "test_accuracy": trained.test_accuracy, "num_test": len(dataset.test_labels),
                  "weights_sha256": trained.sha256},
        "methods": {spec: {
            "seconds": result.seconds, "attacks": len(o.success),
            "calls": int(o.num_queries.sum()), "lane_steps_executed": o.lane_steps_executed,
            "lane_steps_useful": o.lane_steps_useful, "widths": o.widths}},
    }


def figures(name: str, protocol: str, goal: str, eps: float, s: Setup,
            runs: dict[str, workers_lib.MethodRun], out: Path) -> None:
    """Example images and consistency traces of the methods run so far (the figures drawn
    from records, queries and success curves, are made with the report)."""
    attacks = s.attacks
    tag = f"{name}_{protocol}_{goal}"
    title = f"{name.upper()} {protocol} protocol, {goal} ({len(attacks.seed)} attacks)"
    outcomes = {spec: r.outcome for spec, r in runs.items()}
    first = int(np.argmax(next(iter(outcomes.values())).success))  # a successful attack
    image0 = s.dataset.test_images[attacks.image[first]]
    shown = [spec for spec in outcomes if not results_lib.is_extra(spec)] or list(outcomes)
    adversarial = {spec: np.asarray(objective.perturbed_image(outcomes[spec].x[first], image0, eps))
                   for spec in shown}
    succeeded = {spec: bool(outcomes[spec].success[first]) for spec in shown}
    report.plot_examples(out / f"examples_{tag}.png", image0, adversarial, succeeded, eps,
                         f"{title}: test image {attacks.image[first]}, seed {attacks.seed[first]}")
    traces = {spec: outcomes[spec].trace_cos for spec in shown if outcomes[spec].trace_cos.shape[1]}
    if traces:
        report.plot_traces(out / f"consistency_{tag}.png", traces,
                           "cos(g_t, m_{t-1})", f"Momentum consistency, {title}")
