"""The LLM benchmark's fair first-order reference (evaluated on the zeroth-order schedule,
learning rate chosen on dev), complete optimizers in the benchmark, and the (learning
rate, K) envelope; tiny LLaMA, nothing downloaded."""

import argparse
import dataclasses

import numpy as np
import pytest
from llm_helpers import tiny_bundle

from benchmarks import anytime, experiment
from benchmarks.common import read_json
from benchmarks.llm import baselines, cli, config, methods, report, tables, train
from benchmarks.llm.experiment import regrets, with_first_order


@pytest.fixture(scope="module")
def bundle():
    return tiny_bundle()


def _cfg(**kw):
    return dataclasses.replace(config.SMOKE, steps=1, eval_every=1, batch_size=4,
                               eval_batch_size=8, probe_every=2, timing_reps=1, **kw)


def test_first_order_reference_is_evaluated_on_the_zeroth_order_schedule(bundle):
    cfg = _cfg(budget=32, eval_every_fe=4)  # R-AdaZO K=1: 16 steps, dev loss every 2
    zo = train.run(methods.parse_one("radazo:k=1"), 0, bundle, cfg)
    fo = baselines.first_order(bundle, 0, cfg, 1e-2, steps=24, evals=cfg.evaluations)
    assert cfg.evaluations == 8 and len(zo["curve"]) == len(fo["curve"]) == 9
    # the i-th evaluation of each after the same share of its run: FE / budget, steps / steps
    assert [c["fe"] / 32 for c in zo["curve"]] == [c["share"] for c in fo["curve"]]
    assert not any("step_size" in c for c in zo["curve"])  # R-AdaZO does not choose one
    assert [c["step"] for c in fo["curve"]] == list(range(0, 25, 3))
    assert fo["steps"] == 24 and fo["best_step"] in range(0, 25, 3)
    assert fo["best_eval_loss"] == min(c["dev_loss"] for c in fo["curve"])
    with pytest.raises(ValueError, match="multiple of evals"):
        baselines.first_order(bundle, 0, cfg, 1e-2, steps=20, evals=8)


def test_first_order_steps_cost_the_zeroth_order_fe_on_the_schedule(bundle):
    assert baselines.steps_within(6000, 3.3, 8) == 1816  # 1818 steps, 227 periods of 8
    assert baselines.steps_within(10, 3.3, 8) == 8  # at least one step a period
    cost = baselines.step_cost(bundle, _cfg(), reps=3)
    # a ratio of two measured times (their order is not asserted: timings are benchmarks)
    assert cost["forward_passes"] == cost["step_s"] / cost["forward_s"] > 0


def test_first_order_learning_rate_is_the_lowest_mean_best_dev_loss():
    runs = [{"learning_rate": lr, "seed": seed, "best_eval_loss": loss}
            for lr, seed, loss in [(1e-4, 0, 0.40), (1e-4, 1, 0.44), (1e-3, 0, 0.39),
                                   (1e-3, 1, 0.46), (3e-4, 0, 0.41), (3e-4, 1, 0.42)]]
    assert baselines.chosen_rate(runs) == 3e-4  # means 0.42, 0.425, 0.415: not seed 0's best


def test_tuning_free_told_the_budget_never_exceeds_it(bundle):
    r = train.run(methods.parse_one("tuning_free:budget"), 0, bundle, _cfg(budget=9,
                                                                          eval_every_fe=3))
    assert r["total_fe"] <= 9 and r["total_fe"] == 2 * sum(r["k_trace"])
    assert r["curve"][-1]["fe"] == r["total_fe"] and r["label"] == "tuning_free, told the budget"
    # the step it chose, at every evaluation (the benchmark records it; fixed-K runs have none)
    assert all(np.isfinite(c["step_size"]) and c["step_size"] > 0 for c in r["curve"])


def _run(method, fe, loss):
    return {"method": method, "seed": 0,
            "curve": [{"fe": f, "dev_loss": v} for f, v in zip(fe, loss)]}


def test_grid_envelope_takes_every_learning_rate_the_fixed_k_envelope_one(tmp_path):
    grid = [0, 10, 20]
    results = [_run("radazo:k=1", grid, [1.0, 0.9, 0.8]),
               _run("radazo:k=1,lr_scale=2", grid, [1.0, 0.7, 0.75]),
               _run("tuning_free", grid, [1.0, 0.8, 0.7])]
    out = regrets(results, 20, 10)
    assert [e["method"] for e in out["regret"]["envelope"]] == ["radazo:k=1"] * 2
    assert [e["method"] for e in out["grid_regret"]["envelope"]] == ["radazo:k=1,lr_scale=2"] * 2
    # E(10) = E(20) = 0.7 (lr x 2 at 10 FE), reached within the near-tie tolerance between
    # tuning_free's evaluations at 10 and 20 FE
    fe = 10 + 10 * (0.8 - anytime.target(0.7, anytime.TOLERANCE)) / 0.1
    assert out["grid_regret"]["methods"]["tuning_free"]["regret"] == pytest.approx(
        [fe / 10, fe / 20])
    assert "grid_regret" not in regrets(results[:1] + results[2:], 20, 10)
    # the page names the points run, per learning rate (not a full product of the sets)
    more = results + [{**results[0], "method": "radazo:k=4", "seed": s} for s in (0, 1)]
    assert tables.grid_extent(more) == ("learning rate x 1 with K in {1, 4} (1/2 seeds), "
                                        "x 2 with K in {1} (1 seed) of the run's")
    # the figure draws both envelopes (the grid's dotted over the fixed K's dashed style)
    runs = [{**r, "label": r["method"], "curve": [{**c, "dev_accuracy": 0.5} for c in r["curve"]]}
            for r in results]
    png = report.plot(runs, tmp_path / "llm.png", "grid", out["regret"]["envelope"],
                      grid_envelope=out["grid_regret"]["envelope"])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert regrets(results[2:], 20, 10) == {}  # no fixed K (one process of a merged page)


def test_first_order_parts_of_several_processes_join_at_the_rate_chosen_on_dev():
    def part(seed):
        runs = [{"learning_rate": lr, "seed": seed, "best_eval_loss": loss + seed / 100}
                for lr, loss in ((1e-4, 0.5), (1e-3, 0.4))]
        return {"first_order_all": runs, "first_order_cost": [{"forward_passes": 3.0 + seed}],
                "first_order_fe": 6000, "first_order_evals": 8}

    zo = [{"timing": {"step_s_total": t}} for t in (90.0, 100.0, 130.0)]
    out = with_first_order({"memory": []}, [part(0), part(1)], zo)
    assert out["first_order_lr"] == 1e-3 and out["memory"] == []
    assert [(r["seed"], r["learning_rate"]) for r in out["first_order"]] == [(0, 1e-3), (1, 1e-3)]
    assert len(out["first_order_all"]) == 4 and out["zeroth_order_train_s"] == 100.0
    assert [c["forward_passes"] for c in out["first_order_cost"]] == [3.0, 4.0]


def _cli(argv):
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return cli.main(parser.parse_args(argv))


def test_first_order_only_runs_then_joins_a_merged_page_without_loading_the_model(tmp_path):
    run = ["--preset", "smoke", "--budget", "8", "--seeds", "0", "--quiet"]
    fo, zo, merged, page = (tmp_path / "fo", tmp_path / "zo", tmp_path / "m",
                            tmp_path / "llm.md")
    assert _cli([*run, "--first-order-only", "--first-order-lrs", "1e-3", "1e-2",
                 "--out", str(fo)]) == 0
    part = read_json(fo / "llm_first_order.json.xz")
    assert "--first-order-only" in part["record"]["command"] and part["config"]["budget"] == 8
    assert sorted(r["learning_rate"] for r in part["first_order_all"]) == [1e-3, 1e-2]
    assert {len(r["curve"]) for r in part["first_order_all"]} == {part["first_order_evals"] + 1}
    assert sorted(p.name for p in fo.iterdir()) == ["llm_first_order.json.xz"]  # no page
    assert _cli([*run, "--methods", "radazo:k=1", "--no-baselines", "--out", str(zo),
                 "--report", "none"]) == 0
    older = read_json(zo / "llm.json.xz")  # a run from before --lora-rank: not in its config
    del older["config"]["lora_rank"]
    experiment.save(zo / "llm.json.xz", older)
    base = experiment.save(tmp_path / "base.json.xz", {"results": [], "baselines": {
        "prompts": [], "memory": [{"what": "forward pass (loss)", "bytes": 2**20}],
        "linear_probe": {"l2": 1e-4, "train_examples": 8, "dev_accuracy": 0.5,
                         "accuracy": 0.5}}})
    assert _cli([*run, "--merge", str(zo / "llm.json.xz"), "--baselines-from", str(base),
                 "--first-order", str(fo / "llm_first_order.json.xz"), "--out", str(merged),
                 "--report", str(page)]) == 0
    payload = read_json(merged / "llm.json.xz")
    lr = payload["baselines"]["first_order_lr"]
    assert lr == baselines.chosen_rate(part["first_order_all"])
    assert "--baselines-from" in payload["record"]["command"]
    assert "--methods radazo:k=1" in payload["merged_runs"][0]["command"]
    assert f"| backprop + Adam, lr {lr:g} (chosen) |" in page.read_text()
