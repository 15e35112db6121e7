"""Training loop: one jitted zeroth-order step, periodic evaluation, best checkpoint, timing.

The objective handed to the estimators is ``loss(lora, base, batch)``: the adapters are
the optimized parameters (the only thing perturbed, vmapped over the 2K perturbations of
an acquisition chunk); the frozen base weights and the minibatch arrive as keywords, so
they are shared by every perturbed forward pass. A step is one compiled function of
``(lora, opt_state, base, batch)``; batches have fixed shapes, so it compiles once.

Evaluation (dev loss and accuracy) and the train-loss probe are forward passes made by
the benchmark, not by the method: they are not FE. FE per step are read from the
estimator's ``num_queries``.

Two ways to end a run: after ``steps`` steps, evaluating every ``eval_every`` steps; or,
with ``budget`` (anytime mode), at the first step whose cumulative FE reach ``budget``,
evaluating at the first step whose FE reach each multiple of ``eval_every_fe``. Methods
then spend the same FE (an adaptive method may overshoot by less than its last step's
FE), so their dev-loss curves can be compared at every budget up to ``budget``.

Why its own loop (not ``benchmarks.loops`` nor ``zoaq_jax.run``): each step's minibatch
comes from a host-side epoch shuffle, and between steps the host evaluates on dev, keeps
the best adapters and times the step; a compiled loop over thousands of steps of a
transformer would hold every batch and give no step timing. The step itself is the same
jitted ``update`` + ``apply_updates`` every other loop runs.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import time
from collections import Counter
from typing import Any

import jax
import numpy as np
import optax

import zoaq_jax

from benchmarks.common import progress
from benchmarks.llm import methods as methods_lib
from benchmarks.llm import tasks
from benchmarks.llm.config import Config
from benchmarks.llm.models import lora as lora_lib
from benchmarks.methods import Complete, Method


@dataclasses.dataclass
class Bundle:
    """Everything a run shares across methods and seeds."""

    graphdef: Any
    lora: Any  # adapter template (its values are redrawn per seed)
    base: Any  # frozen weights (device arrays)
    loss_kind: str
    train: dict  # encoded training examples (NumPy)
    dev: dict
    test: dict
    first: int = 0  # first layer with adapters; > 0: the layers below are cached per example
    sequential: bool = False  # vmapped calls of the objective run one after another

    def __post_init__(self):
        graphdef, kind, first = self.graphdef, self.loss_kind, self.first

        def plain(lora, base, batch):
            return tasks.batch_loss(lora_lib.merge(graphdef, lora, base), batch, kind, first)

        # Sequential: under the estimator's vmap over perturbations the objective runs one
        # pass at a time (zoaq_jax.sequential), so a step holds one forward pass's
        # activations whatever K is.
        loss = zoaq_jax.sequential(plain) if self.sequential else plain

        def metrics(lora, base, batch):
            return tasks.batch_metrics(lora_lib.merge(graphdef, lora, base), batch, kind, first)

        if first:
            below = jax.jit(lambda tokens, first: lora_lib.merge(
                graphdef, self.lora, self.base).hidden_below(tokens, first), static_argnums=1)
            for name in ("train", "dev", "test"):
                if "states" not in getattr(self, name):
                    setattr(self, name, tasks.cache_states(below, getattr(self, name), first))

        self.loss = loss
        self.differentiable = plain  # the objective without the sequential batching rule
        self.probe = jax.jit(loss)
        self.batched = jax.jit(jax.vmap(loss, in_axes=(0, None, None)))  # an oracle call
        self.metrics = jax.jit(metrics)


def evaluate(bundle: Bundle, lora: Any, split: dict, batch_size: int) -> dict[str, float]:
    """Mean loss and accuracy over an encoded split (fixed-size padded batches)."""
    sums = {"loss": 0.0, "correct": 0.0, "count": 0.0}
    for batch in tasks.eval_batches(split, batch_size):
        out = bundle.metrics(lora, bundle.base, batch)
        for k in sums:
            sums[k] += float(out[k])
    return {"loss": sums["loss"] / sums["count"], "accuracy": sums["correct"] / sums["count"]}


def margins(bundle: Bundle, lora: Any, split: dict, batch_size: int) -> np.ndarray:
    """Per-example score difference (candidate 1 minus candidate 0) over a split."""
    out = [np.asarray(bundle.metrics(lora, bundle.base, b)["margin"])
           for b in tasks.eval_batches(split, batch_size)]
    return np.concatenate(out)[:len(split["label"])]


class Tracker:
    """Dev evaluations of a run (its curve), the best checkpoint by dev loss, eval time."""

    def __init__(self, bundle: Bundle, batch_size: int, wall0: float | None = None):
        self.bundle, self.batch_size = bundle, batch_size
        self.wall0 = time.perf_counter() if wall0 is None else wall0
        self.curve: list[dict] = []
        self.best: dict[str, Any] = {"loss": np.inf}
        self.eval_s = 0.0

    def _evaluate(self, lora: Any, split: dict) -> dict[str, float]:
        e0 = time.perf_counter()
        out = evaluate(self.bundle, lora, split, self.batch_size)
        self.eval_s += time.perf_counter() - e0
        return out

    def evaluate(self, t: int, fe: int, lora: Any, train_loss: float | None = None,
                 step_size: float | None = None) -> None:
        """Appends the dev metrics after step ``t`` to the curve (with ``step_size``, the
        step the optimizer had chosen, when it chooses one: :func:`chosen_step`)."""
        dev = self._evaluate(lora, self.bundle.dev)
        self.curve.append({"step": t, "fe": fe, "dev_loss": dev["loss"],
                           "dev_accuracy": dev["accuracy"], "train_loss": train_loss,
                           "wall_s": time.perf_counter() - self.wall0,
                           **({} if step_size is None else {"step_size": step_size})})
        if dev["loss"] < self.best["loss"]:
            self.best = {"loss": dev["loss"], "accuracy": dev["accuracy"], "step": t,
                         "lora": jax.tree.map(lambda x: np.array(x, copy=True), lora)}

    def test(self) -> dict[str, float]:
        """Test metrics of the best checkpoint."""
        return self._evaluate(self.best["lora"], self.bundle.test)


def batches(encoded: dict, batch_size: int, seed: int):
    """Endless minibatches: a fresh seeded permutation every epoch, last partial batch dropped."""
    n = len(encoded["label"])
    if n < batch_size:
        raise ValueError(f"{n} training examples are fewer than one batch of {batch_size}.")
    rng = np.random.default_rng(seed)
    while True:
        order = rng.permutation(n)
        for start in range(0, n - batch_size + 1, batch_size):
            yield tasks.take(encoded, order[start : start + batch_size])


def make_step(opt, loss):
    """One jitted zeroth-order step ``(lora, state, base, batch) -> (lora, state, FE, K_t)``."""

    def step(lora, state, base, batch):
        updates, state = opt.update(None, state, lora, value_fn=loss, base=base, batch=batch)
        return (optax.apply_updates(lora, updates), state, optax.tree.get(state, "num_queries"),
                optax.tree.get(state, "last_k"))

    return jax.jit(step)


def _key(n: int, batched: bool) -> str:
    """The name of an oracle call: ``"n"`` (``n`` passes vmapped) or ``"centre"``."""
    return str(n) if batched else "centre"


def _oracle_calls(bundle: Bundle, lora: Any, batch: dict, sizes) -> dict[str, Any]:
    """``{key: call}``: the estimator's oracle calls in isolation, compiled.

    ``sizes`` holds ``(n, batched)``: batched entries vmap the objective over ``n``
    perturbed adapters (one acquisition chunk), unbatched ones are the plain objective
    (the centre value of forward differences).
    """
    calls = {}
    for n, batched in sorted(set(sizes)):
        fn, arg = bundle.probe, lora
        if batched:
            noise = 1e-2 * jax.random.normal(jax.random.key(n), (n,))
            fn = bundle.batched
            arg = jax.tree.map(lambda x, z=noise: x[None] + z.reshape((-1,) + (1,) * x.ndim), lora)
        calls[_key(n, batched)] = functools.partial(fn, arg, bundle.base, batch)
        _timed(calls[_key(n, batched)])  # compile
    return calls


def _timed(fn) -> float:
    t0 = time.perf_counter()
    jax.block_until_ready(fn())
    return time.perf_counter() - t0


def forward_call_seconds(bundle: Bundle, lora: Any, batch: dict, sizes, reps: int) -> dict:
    """Median wall time of each oracle call of ``sizes`` (see :func:`_oracle_calls`)."""
    return {key: float(np.median([_timed(call) for _ in range(reps)]))
            for key, call in _oracle_calls(bundle, lora, batch, sizes).items()}


def interleaved_overhead(compiled, method: Method | Complete, bundle: Bundle, lora: Any, state: Any,
                         batch: dict, reps: int) -> dict:
    """Step time vs forward time, measured back to back to cancel drifts in machine load.

    Repeats one step ``reps`` times from the same ``(lora, state, batch)`` (results
    discarded; the step is deterministic, so ``K_t`` is the same each time) and right
    after each repeat times the oracle calls that step makes, one by one.
    """
    step = functools.partial(compiled, lora, state, bundle.base, batch)
    k = int(step()[3])
    chunks = methods_lib.chunks(method, k)
    calls = _oracle_calls(bundle, lora, batch, chunks)
    step_s, fwd_s = [], []
    for _ in range(reps):
        step_s.append(_timed(step))
        fwd_s.append(sum(_timed(calls[_key(n, b)]) for n, b in chunks))
    return {"k": k, "reps": reps, "step_s": float(np.median(step_s)),
            "forward_s": float(np.median(fwd_s)),
            "overhead_share": 1.0 - float(np.sum(fwd_s)) / float(np.sum(step_s))}


def chosen_step(state: Any) -> float | None:
    """The step ``tuning_free``'s controller has chosen, in the parameters' units (its
    :math:`\\eta_t s`: ``learning_rate`` is in units of the start point's RMS ``scale``), or
    ``None`` for an optimizer without that controller. Told the budget, the final decay
    (the budget's last quarter, once a window has stalled: ``settled``) multiplies the step
    it applies further; that factor is not included."""
    found = [x for x in jax.tree.leaves(state, is_leaf=_is_tuning_free) if _is_tuning_free(x)]
    return float(optax.tree.get(found[0], "learning_rate") * found[0].scale) if found else None


def _is_tuning_free(x: Any) -> bool:
    return isinstance(x, zoaq_jax.TuningFreeState)


def run(method: Method | Complete, seed: int, bundle: Bundle, cfg: Config) -> dict:
    """Trains the adapters with ``method`` from seed ``seed``; returns the result record."""
    wall0 = time.perf_counter()
    opt = methods_lib.build(method, cfg.lr, cfg.mu, seed, budget=cfg.budget)
    lora = lora_lib.init_adapters(bundle.lora, seed)
    state = opt.init(lora)
    stream = batches(bundle.train, cfg.batch_size, seed)
    step = make_step(opt, bundle.loss)

    batch = next(stream)
    t0 = time.perf_counter()
    compiled = step.lower(lora, state, bundle.base, batch).compile()
    compile_s = time.perf_counter() - t0

    probes, step_s, ks, fe = [], [], [], 0
    tracker = Tracker(bundle, cfg.eval_batch_size, wall0)

    def do_eval(t: int):
        since = tracker.curve[-1]["step"] if tracker.curve else 0
        recent = [v for s, v in probes if s > since]
        tracker.evaluate(t, fe, lora, train_loss=float(np.mean(recent)) if recent else None,
                         step_size=chosen_step(state))

    do_eval(0)
    steps, total = ((itertools.count(1), None) if cfg.budget is not None
                    else (range(1, cfg.steps + 1), cfg.steps))
    bar = progress(steps, total=total, desc=f"{method.spec} seed {seed}")
    for t in bar:
        if t > 1:
            batch = next(stream)
        if t % cfg.probe_every == 1 or cfg.probe_every == 1:
            probes.append((t, float(bundle.probe(lora, bundle.base, batch))))
        s0 = time.perf_counter()
        fe_before = fe
        lora, state, num_queries, last_k = compiled(lora, state, bundle.base, batch)
        fe, k = int(num_queries), int(last_k)  # waits for the step
        step_s.append(time.perf_counter() - s0)
        ks.append(k)
        if fe == fe_before:  # told the budget, it stops before a step would exceed it
            ks.pop(), step_s.pop()
            if tracker.curve[-1]["step"] != t - 1:
                do_eval(t - 1)
            break
        if cfg.eval_due(t, fe_before, fe):
            do_eval(t)
            bar.set_postfix(fe=fe, dev_loss=f"{tracker.curve[-1]['dev_loss']:.4f}")
        if cfg.done(t, fe):
            break
    zoaq_jax.check_responses(state)  # warns when mu is below the float resolution

    test, curve, best, eval_s = tracker.test(), tracker.curve, tracker.best, tracker.eval_s

    # Step time split: forward passes (timed in isolation) vs everything else, (a) over
    # the whole run with call times measured once at the end, (b) back to back.
    sizes = [c for k in set(ks) for c in methods_lib.chunks(method, k)]
    calls = forward_call_seconds(bundle, lora, batch, sizes, cfg.timing_reps)
    probe = interleaved_overhead(compiled, method, bundle, lora, state, batch, cfg.timing_reps)
    fwd_s = sum(calls[_key(n, b)] for k in ks for n, b in methods_lib.chunks(method, k))
    total_step = float(np.sum(step_s))
    hist = Counter(ks)
    return {
        "method": method.spec, "label": method.label, "seed": seed, "steps": len(ks),
        "total_fe": fe, "avg_k": float(np.mean(ks)), "fe_per_step": fe / len(ks), "k_trace": ks,
        "k_hist": {str(k): hist[k] for k in sorted(hist)},
        "immediate_accept_rate": hist[methods_lib.k_min(method)] / len(ks),
        "best_eval_loss": best["loss"], "best_step": best["step"],
        "last_eval_loss": curve[-1]["dev_loss"], "dev_accuracy": best["accuracy"],
        "accuracy": test["accuracy"], "test_loss": test["loss"],
        "train_loss": curve[-1]["train_loss"], "curve": curve,
        "timing": {
            "compile_s": compile_s, "step_s_total": total_step,
            "step_s_mean": total_step / len(step_s), "step_s_median": float(np.median(step_s)),
            "eval_s": eval_s, "fe_per_s": fe / total_step, "forward_call_s": calls,
            "forward_s_estimate": fwd_s, "overhead_share": 1.0 - fwd_s / total_step,
            "interleaved": probe, "wall_s": time.perf_counter() - wall0}}


def zero_shot(bundle: Bundle, cfg: Config) -> dict[str, float]:
    """Dev and test metrics of the base model (adapters with B = 0 change nothing)."""
    lora = lora_lib.init_adapters(bundle.lora, 0)
    dev = evaluate(bundle, lora, bundle.dev, cfg.eval_batch_size)
    test = evaluate(bundle, lora, bundle.test, cfg.eval_batch_size)
    return {"dev_loss": dev["loss"], "dev_accuracy": dev["accuracy"], "test_loss": test["loss"],
            "accuracy": test["accuracy"]}
