"""Baselines of the LLM table (MeZO's): zero-shot per prompt (raw and calibrated), in-context
demonstrations, a linear probe on frozen features, a first-order reference, and the
compiled-memory table.

* :func:`prompt_table`: every prompt of :data:`tasks.PROMPTS` scored by the base model
  (adapters with ``B = 0``); *raw* predicts the candidate with the higher mean
  log-probability, *calibrated* thresholds the score difference ``s_1 - s_0`` at its
  median over unlabeled training examples instead of at 0.
* :func:`linear_probe`: logistic regression on the final hidden state at the scored
  position (base model, the run's prompt), L2 weight chosen on dev accuracy.
* :func:`first_order`: backpropagation with Adam on the same adapters, data and batches
  as the zeroth-order methods, for as many steps as cost their FE in forward-pass time
  (:func:`step_cost`, :func:`steps_within`), evaluated on dev as often as they are
  (the same schedule in its own steps); best checkpoint as in :func:`train.run`;
  :func:`chosen_rate` chooses its learning rate on dev (:func:`first_order_runs`).
* :func:`memory_rows`: compiled memory of a forward pass, zeroth-order steps (vectorized
  and sequential) and a backpropagation step.

Example (the tiny test model)::

    rows = prompt_table(cfg, setup, calibration=32)
    probe = linear_probe(setup.bundle, eval_batch_size=16)
    ref = first_order(setup.bundle, seed=0, cfg=cfg, learning_rate=1e-3, steps=64, evals=8)
    rows = memory_rows(setup.bundle, {"MeZO K=4": mezo_opt}, batch)
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from benchmarks.common import progress
from benchmarks.llm import tasks, train
from benchmarks.llm.config import Config
from benchmarks.llm.models import lora as lora_lib

L2_GRID = (1e-4, 1e-3, 1e-2, 1e-1)


def calibrated_accuracy(margin: np.ndarray, label: np.ndarray, threshold: float) -> float:
    """Accuracy of ``margin > threshold`` as the positive label."""
    return float(np.mean((margin > threshold) == (label == 1)))


def prompt_table(cfg, setup, *, calibration: int = 200) -> list[dict]:
    """Zero-shot dev and test accuracy of every SST-2 prompt, raw and calibrated.

    Each prompt's splits are re-encoded and scored with the full base model (the cache of
    the run's own prompt does not apply); ``calibration`` unlabeled training examples set
    the threshold.
    """
    rows = []
    prompts = list(tasks.PROMPTS) if cfg.task == "sst2" else [None]
    for prompt in progress(prompts, desc="prompts"):
        splits = dataclasses.replace(setup.splits, train=setup.splits.train[:calibration])
        layout, enc = tasks.encode_splits(cfg, splits, setup.tokenizer, prompt or "it_was")
        bundle = dataclasses.replace(setup.bundle, first=0, sequential=False, **enc)
        lora = lora_lib.init_adapters(bundle.lora, 0)
        m = {name: train.margins(bundle, lora, enc[name], cfg.eval_batch_size)
             for name in ("train", "dev", "test")}
        threshold = float(np.median(m["train"]))
        row = {"prompt": prompt or cfg.task, "length": layout.max_length,
               "demonstrations": tasks.PROMPTS[prompt][2] if prompt else 0}
        for name in ("dev", "test"):
            label = enc[name]["label"]
            row[f"{name}_raw"] = calibrated_accuracy(m[name], label, 0.0)
            row[f"{name}_calibrated"] = calibrated_accuracy(m[name], label, threshold)
        rows.append(row)
    return rows


def features(bundle: train.Bundle, split: dict, batch_size: int) -> np.ndarray:
    """Final hidden state ``[N, D]`` at the position scoring candidate 0 (base model)."""
    graphdef, first = bundle.graphdef, bundle.first
    lora = lora_lib.init_adapters(bundle.lora, 0)

    @jax.jit
    def one(lora, base, batch):
        model = lora_lib.merge(graphdef, lora, base)
        b, r, length = batch["tokens"].shape
        seq, index = jnp.arange(b) * r + batch["row"][:, 0], batch["pos"][:, 0, 0]
        if first:
            states = batch["states"].reshape(b * r, length, -1)[seq]
            return model.hidden_at(states, first, index)
        return model.hidden(batch["tokens"].reshape(b * r, length))[seq, index]

    out = [np.asarray(one(lora, bundle.base, b)) for b in tasks.eval_batches(split, batch_size)]
    return np.concatenate(out)[:len(split["label"])]


def logistic_regression(x: np.ndarray, y: np.ndarray, l2: float, steps: int = 300) -> tuple:
    """``(w, b)`` minimising mean logistic loss + ``l2 |w|^2`` (Adam, full batch)."""
    x, y = jnp.asarray(x), jnp.asarray(y, jnp.float32)

    def loss(p):
        z = x @ p[0] + p[1]
        return jnp.mean(optax.sigmoid_binary_cross_entropy(z, y)) + l2 * jnp.sum(p[0] ** 2)

    opt = optax.adam(1e-2)

    @jax.jit
    def run(params):
        def body(carry, _):
            p, s = carry
            g = jax.grad(loss)(p)
            u, s = opt.update(g, s, p)
            return (optax.apply_updates(p, u), s), None

        return jax.lax.scan(body, (params, opt.init(params)), None, length=steps)[0][0]

    return run((jnp.zeros(x.shape[1]), jnp.zeros(())))


def linear_probe(bundle: train.Bundle, eval_batch_size: int = 16) -> dict[str, Any]:
    """Logistic regression on frozen features: L2 chosen on dev, test accuracy reported."""
    feats = {name: features(bundle, getattr(bundle, name), eval_batch_size)
             for name in ("train", "dev", "test")}
    mean, std = feats["train"].mean(0), feats["train"].std(0) + 1e-6
    z = {k: (v - mean) / std for k, v in feats.items()}
    labels = {name: getattr(bundle, name)["label"] for name in feats}

    def acc(p, name):
        return calibrated_accuracy(np.asarray(z[name] @ p[0] + p[1]), labels[name], 0.0)

    fits = {l2: logistic_regression(z["train"], labels["train"], l2) for l2 in L2_GRID}
    best = max(L2_GRID, key=lambda l2: acc(fits[l2], "dev"))
    return {"l2": best, "dev_accuracy": acc(fits[best], "dev"),
            "accuracy": acc(fits[best], "test"), "train_examples": len(labels["train"])}


def backprop_step(loss, opt):
    """One jitted first-order step ``(lora, state, base, batch) -> (lora, state, loss)``."""

    def step(lora, state, base, batch):
        value, grads = jax.value_and_grad(loss)(lora, base, batch)
        updates, state = opt.update(grads, state, lora)
        return optax.apply_updates(lora, updates), state, value

    return jax.jit(step)


def first_order(bundle: train.Bundle, seed: int, cfg: Config, learning_rate: float,
                *, steps: int, evals: int) -> dict[str, Any]:
    """Backpropagation + Adam on the adapters for ``steps`` steps, dev loss before the
    first step and after every ``steps / evals`` steps: the evaluation schedule of an
    anytime zeroth-order run with ``evals`` evaluations (:meth:`Config.eval_due` with one
    unit a step in place of FE); best checkpoint and test metrics as in :func:`train.run`.

    Raises:
      ValueError: ``steps`` is not a positive multiple of ``evals``.
    """
    if evals < 1 or steps < evals or steps % evals:
        raise ValueError(f"steps ({steps}) must be a positive multiple of evals ({evals}).")
    schedule = dataclasses.replace(cfg, budget=steps, eval_every_fe=steps // evals)
    opt = optax.adam(learning_rate)
    lora = lora_lib.init_adapters(bundle.lora, seed)
    state = opt.init(lora)
    stream = train.batches(bundle.train, cfg.batch_size, seed)
    batch = next(stream)
    step = backprop_step(bundle.differentiable, opt).lower(lora, state, bundle.base,
                                                           batch).compile()
    tracker = train.Tracker(bundle, cfg.eval_batch_size)
    tracker.evaluate(0, 0, lora)
    t0, train_s, losses = time.perf_counter(), 0.0, []
    for t in progress(range(1, steps + 1), desc=f"first-order lr {learning_rate:g} seed {seed}"):
        if t > 1:
            batch = next(stream)
        s0 = time.perf_counter()
        lora, state, value = step(lora, state, bundle.base, batch)
        losses.append(float(value))  # waits for the step
        train_s += time.perf_counter() - s0
        if schedule.eval_due(t, t - 1, t):
            since = tracker.curve[-1]["step"]
            tracker.evaluate(t, 0, lora, train_loss=float(np.mean(losses[since:])))
    for point in tracker.curve:
        point["share"] = point["step"] / steps  # of the run (the x of the page's figure)
    test = tracker.test()
    return {"method": "first_order", "label": "Backprop + Adam", "seed": seed,
            "learning_rate": learning_rate, "steps": len(losses), "first_loss": losses[0],
            "last_loss": tracker.curve[-1]["train_loss"], "curve": tracker.curve,
            "best_eval_loss": tracker.best["loss"], "best_step": tracker.best["step"],
            "dev_accuracy": tracker.best["accuracy"], "accuracy": test["accuracy"],
            "test_loss": test["loss"], "train_s": train_s, "eval_s": tracker.eval_s,
            "wall_s": time.perf_counter() - t0}


def step_cost(bundle: train.Bundle, cfg: Config, reps: int = 20) -> dict[str, float]:
    """Wall time of a backpropagation + Adam step and of one forward pass (the loss) on
    the same training batch, both compiled first and timed back to back ``reps`` times
    (so that a change of machine load affects both): their medians and the ratio
    ``forward_passes`` (the step's cost in forward passes)."""
    opt = optax.adam(1e-3)
    lora = lora_lib.init_adapters(bundle.lora, 0)
    state = opt.init(lora)
    batch = tasks.take(bundle.train, np.arange(cfg.batch_size))
    step = backprop_step(bundle.differentiable, opt).lower(lora, state, bundle.base,
                                                           batch).compile()
    forward = jax.jit(bundle.differentiable).lower(lora, bundle.base, batch).compile()
    times: dict[str, list[float]] = {"step_s": [], "forward_s": []}
    for _ in range(reps):
        for key, call in (("step_s", lambda: step(lora, state, bundle.base, batch)),
                          ("forward_s", lambda: forward(lora, bundle.base, batch))):
            s0 = time.perf_counter()
            jax.block_until_ready(call())
            times[key].append(time.perf_counter() - s0)
    out = {key: float(np.median(v)) for key, v in times.items()}
    return {**out, "forward_passes": out["step_s"] / out["forward_s"]}


def steps_within(forward_passes: float, step_cost: float, evals: int) -> int:
    """The most steps of ``step_cost`` forward passes within ``forward_passes``, rounded
    down to a multiple of ``evals`` (at least ``evals``)."""
    return evals * max(1, int(forward_passes / step_cost) // evals)


def first_order_runs(bundle: train.Bundle, cfg: Config, learning_rates, *, steps: int,
                     evals: int) -> list[dict[str, Any]]:
    """:func:`first_order` at every rate of ``learning_rates`` from every seed of ``cfg``."""
    return [first_order(bundle, seed, cfg, lr, steps=steps, evals=evals)
            for seed in cfg.seeds for lr in learning_rates]


def chosen_rate(runs: list[dict[str, Any]]) -> float:
    """The learning rate of ``runs`` with the lowest mean best dev loss over its seeds."""
    rates = sorted({r["learning_rate"] for r in runs})
    return min(rates, key=lambda lr: np.mean([r["best_eval_loss"] for r in runs
                                              if r["learning_rate"] == lr]))


def compiled_bytes(fn, *args) -> int:
    """Temp + output bytes of ``fn`` compiled for ``args``."""
    stats = jax.jit(fn).lower(*args).compile().memory_analysis()
    return int(stats.temp_size_in_bytes + stats.output_size_in_bytes)


def memory_rows(bundle: train.Bundle, optimizers: dict[str, Any], batch: dict,
                learning_rate: float = 1e-3) -> list[dict]:
    """``[{what, bytes}]``: a forward pass, each optimizer's step vectorized and sequential,
    and a backpropagation (Adam) step, all on ``batch``.

    XLA's own account of each compiled function (:func:`compiled_bytes`; the arguments,
    i.e. the frozen weights and the batch, are shared by every variant and not counted).
    *Vectorized*: the estimator's 2K perturbed passes in one vmapped call, so activations
    grow with K; *sequential* (:class:`train.Bundle` with ``sequential``, i.e.
    :func:`zoaq_jax.sequential`): one pass after another, activations of one pass.
    """
    lora = lora_lib.init_adapters(bundle.lora, 0)
    rows = [{"what": "forward pass (loss)",
             "bytes": compiled_bytes(bundle.differentiable, lora, bundle.base, batch)}]
    for sequential in (False, True):
        b = dataclasses.replace(bundle, sequential=sequential)
        for name, opt in optimizers.items():
            step = train.make_step(opt, b.loss)
            mode = "sequential" if sequential else "vectorized"
            rows.append({"what": f"{name} step ({mode})",
                         "bytes": compiled_bytes(step, lora, opt.init(lora), b.base, batch)})
    adam = optax.adam(learning_rate)
    rows.append({"what": "backprop + Adam step",
                 "bytes": compiled_bytes(backprop_step(bundle.differentiable, adam),
                                         lora, adam.init(lora), bundle.base, batch)})
    return rows
