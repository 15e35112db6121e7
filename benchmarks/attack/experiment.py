"""One attack run: :func:`run` (one method on a share of the attacks, in a worker), and
:func:`attack`, the goal x method x share units on the worker pool with the records and
run entries saved method by method to ``OUT/attack.json.xz``.

On a small CPU machine XLA's runtime spends much of a small model's time synchronising
its threads, so the attacks are dealt round-robin into one share per pinned worker
(:func:`benchmarks.experiment.execute`); a method's shares are merged back into attack
order as soon as they are all done.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import common, experiment, flags
from benchmarks.attack import data as data_lib
from benchmarks.attack import methods as methods_lib
from benchmarks.attack import models, objective, report, runner, train
from benchmarks.attack import results as results_lib
from benchmarks.attack.protocol import Config, select
from benchmarks.record import Recorder

RESULTS = f"attack{common.RESULTS}"  # the results file of a run folder

dataset_of = experiment.per_worker()(data_lib.load)  # (dataset, data) -> its data


@experiment.per_worker()
def _log_prob(dataset: str, weights: str):
    model = models.create(dataset)
    train.load_weights(model, weights)
    model.eval()
    return models.log_prob_fn(model)


def run(config: Config, method: str) -> list[dict[str, Any]]:
    """The attacks of ``config`` with ``method``, as one vmapped program
    (:func:`runner.run_attacks`).

    Returns:
      One entry: ``records`` (one per attack), the attacks' final points ``x`` and
      consistency traces ``trace_cos`` (lists, for the figures), and the program's
      ``seconds``, ``lane_steps_executed``, ``lane_steps_useful`` and ``widths``.
    """
    dataset = dataset_of(config.dataset, config.data)
    image, seed = (np.array(column) for column in zip(*config.attacks))
    label = dataset.test_labels[image]
    cls = objective.attacked_class(label, config.goal)
    loss = objective.attack_loss(_log_prob(config.dataset, config.weights),
                                 objective.EPSILON[config.dataset], config.goal)
    parsed = methods_lib.parse(method)
    with common.Stopwatch() as watch:
        o = runner.run_attacks(
            loss, lambda key: methods_lib.build(parsed, config.dataset, key),
            runner.Tasks(dataset.test_images[image], cls, seed.astype(np.int32)),
            config.attack_config)
    records = [{
        "dataset": config.dataset, "protocol": config.protocol, "goal": config.goal,
        "method": method, "base": methods_lib.base_of(parsed), "image": int(image[i]), "label": int(label[i]),
        "attacked_class": int(cls[i]), "seed": int(seed[i]), "success": bool(o.success[i]),
        "num_queries": int(o.num_queries[i]), "steps": int(o.steps[i]),
        "final_loss": float(o.loss[i])} for i in range(len(seed))]
    return [{"records": records, "x": o.x.tolist(), "trace_cos": o.trace_cos.tolist(),
             "seconds": watch.seconds, "lane_steps_executed": o.lane_steps_executed,
             "lane_steps_useful": o.lane_steps_useful, "widths": list(o.widths)}]


def prepare(config: Config, retrain: bool) -> tuple[Config, train.TrainedModel]:
    """``config`` with its target model's weights (trained or loaded) and its attacks."""
    try:
        dataset = dataset_of(config.dataset, config.data)
    except (ValueError, FileNotFoundError) as err:
        flags.fail(str(err))
    trained = train.load_or_train(
        dataset, train.TrainConfig(epochs=config.epochs, images=config.train_images),
        retrain=retrain, log=lambda m: print(m, file=sys.stderr))
    predictions = train.predict(models.log_prob_fn(trained.model), dataset.test_images)
    try:
        attacks = select(config.protocol, dataset, predictions, config.seeds, config.images)
    except ValueError as err:
        flags.fail(str(err))
    return dataclasses.replace(config, weights=str(trained.weights), attacks=attacks), trained


def attack(configs: list[Config], trained: train.TrainedModel, workers: int, command: str,
           out: Path) -> dict[str, Any]:
    """Runs every method of each config (one per goal); saves ``out/attack.json.xz``
    (merged with the results already there) and the run figures after each method;
    returns the results."""
    results_path = out / RESULTS
    results = common.read_json(results_path) if results_path.exists() else None
    for config in configs:
        shares = max(1, min(workers, len(config.attacks)))
        units = [(dataclasses.replace(config, attacks=config.attacks[w::shares]), spec)
                 for spec in config.methods for w in range(shares)]
        parts: dict[str, list[dict]] = {spec: [] for spec in config.methods}
        finished: dict[str, dict] = {}
        with Recorder(command) as recorder:
            def done(_, spec, share):  # called within this iteration: no late binding
                # Saved method by method, so that a long run that is stopped keeps its results.
                nonlocal results
                parts[spec] += share
                if len(parts[spec]) < shares:
                    return
                finished[spec] = merged = merge_shares(config.attacks, parts[spec])
                entry = run_entry(config, workers, trained, spec, merged,
                                  recorder.snapshot().as_dict())
                results = results_lib.merge(results, merged["records"], entry)
                results["anytime"] = results_lib.anytime_summaries(results)
                experiment.save(results_path, results)
                figures(config, finished, out)
                s = results_lib.summarize(merged["records"])
                print(f"{config.goal:10s} {spec:22s} success {s['success_rate']:6.1%}  queries "
                      f"{s['mean']:8.1f} ± {s['std']:7.1f}  median {s['median']:8.1f}  "
                      f"({merged['seconds']:.1f} s)", file=sys.stderr)

            experiment.execute(run, units, shares, done=done,
                               desc=f"{config.dataset} {config.protocol} {config.goal}")
    return results


def merge_shares(attacks: tuple[tuple[int, int], ...], shares: list[dict]) -> dict[str, Any]:
    """One method's :func:`run` entries of every share, in the order of ``attacks``."""
    position = {attack: i for i, attack in enumerate(attacks)}
    records = [r for share in shares for r in share["records"]]
    order = np.argsort([position[r["image"], r["seed"]] for r in records])
    return {"records": [records[i] for i in order],
            **{k: np.concatenate([np.asarray(s[k], np.float32) for s in shares])[order]
               for k in ("x", "trace_cos")},
            "seconds": max(s["seconds"] for s in shares),  # the slowest share
            **{k: sum(s[k] for s in shares) for k in ("lane_steps_executed", "lane_steps_useful")},
            "widths": tuple(sorted({w for s in shares for w in s["widths"]}, reverse=True))}


def run_entry(config: Config, workers: int, trained: train.TrainedModel, spec: str,
              merged: dict, record: dict) -> dict:
    """The run entry of the method ``spec``: settings, run record, model and counts."""
    records, dataset = merged["records"], dataset_of(config.dataset, config.data)
    return {
        "dataset": config.dataset, "protocol": config.protocol, "goal": config.goal,
        "eps": objective.EPSILON[config.dataset], "config": config.attack_config._asdict(),
        "workers": workers, "record": record,
        "model": {"name": type(trained.model).__name__, "source": dataset.source,
                  "test_accuracy": trained.test_accuracy, "num_test": len(dataset.test_labels),
                  "weights_sha256": trained.sha256},
        "methods": {spec: {
            "seconds": merged["seconds"], "attacks": len(records),
            "calls": sum(r["num_queries"] for r in records),
            **{k: merged[k] for k in ("lane_steps_executed", "lane_steps_useful", "widths")}}}}


def figures(config: Config, runs: dict[str, dict], out: Path) -> None:
    """Example images and consistency traces of the methods run so far (the figures drawn
    from records, queries and success curves, are made with the report)."""
    eps = objective.EPSILON[config.dataset]
    tag = f"{config.dataset}_{config.protocol}_{config.goal}"
    title = (f"{config.dataset.upper()} {config.protocol} protocol, {config.goal} "
             f"({len(config.attacks)} attacks)")
    # a successful attack of the first method
    first = int(np.argmax([r["success"] for r in next(iter(runs.values()))["records"]]))
    image, seed = config.attacks[first]
    image0 = dataset_of(config.dataset, config.data).test_images[image]
    shown = [spec for spec in runs if not results_lib.is_extra(spec)] or list(runs)
    adversarial = {spec: np.asarray(objective.perturbed_image(runs[spec]["x"][first], image0, eps))
                   for spec in shown}
    succeeded = {spec: runs[spec]["records"][first]["success"] for spec in shown}
    report.plot_examples(out / f"examples_{tag}.png", image0, adversarial, succeeded, eps,
                         f"{title}: test image {image}, seed {seed}")
    traces = {spec: runs[spec]["trace_cos"] for spec in shown if runs[spec]["trace_cos"].shape[1]}
    if traces:
        report.plot_traces(out / f"consistency_{tag}.png", traces,
                           "cos(g_t, m_{t-1})", f"Momentum consistency, {title}")
