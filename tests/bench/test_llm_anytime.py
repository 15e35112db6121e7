"""Anytime mode: runs stop at an FE budget; query regret against the fixed-K envelope."""

import argparse
import dataclasses
import math

import pytest
from llm_helpers import tiny_bundle

from benchmarks.common import read_json
from benchmarks.llm import cli, config, train
from benchmarks.llm.methods import REGISTRY
from benchmarks.llm.experiment import best_within, mean_curve, regret


def _cfg(**kw):
    return dataclasses.replace(
        config.SMOKE, steps=1, eval_every=1, batch_size=4, eval_batch_size=8, probe_every=2,
        timing_reps=1, **kw)


@pytest.mark.parametrize("name", ["radazo:k=2", "auto_k", "zoaq:k_max=2"])
def test_budget_mode_stops_each_method_at_the_budget(name):
    r = train.run(REGISTRY.parse(name), 0, tiny_bundle(), _cfg(budget=10, eval_every_fe=4))
    last_step_fe = 2 * r["k_trace"][-1]
    # the first step that reaches the budget ends the run (steps=1 is not used)
    assert r["total_fe"] >= 10 > r["total_fe"] - last_step_fe
    assert r["steps"] == len(r["k_trace"]) and r["total_fe"] == 2 * sum(r["k_trace"])
    fes = [c["fe"] for c in r["curve"]]
    assert fes[0] == 0 and fes[-1] == r["total_fe"]
    # one evaluation at the first step reaching each multiple of 4 FE, plus the last
    assert [f // 4 for f in fes[1:-1]] == list(range(1, len(fes) - 1))
    if name == "radazo:k=2":
        assert r["steps"] == 3 and fes == [0, 4, 8, 12]
    if name == "auto_k":  # its 1000-step progress window never closes: K stays 1
        assert r["k_trace"] == [1] * 5 and r["total_fe"] == 10


def test_a_budget_evaluates_every_eighth_of_it_by_default():
    assert _cfg(budget=80).eval_every_fe == 10 and _cfg(budget=4).eval_every_fe == 1
    with pytest.raises(ValueError, match="eval_every_fe must be >= 1"):
        _cfg(budget=10, eval_every_fe=0)


def _run(method, fe, loss, seed=0):
    return {
        "method": method,
        "seed": seed,
        "curve": [{"fe": f, "dev_loss": v} for f, v in zip(fe, loss)],
    }


def test_mean_curve_interpolates_seeds_onto_the_union_of_their_evaluations():
    runs = [_run("zoaq:k_max=2", [0, 10, 20], [1.0, 0.8, 0.6]),
            _run("zoaq:k_max=2", [0, 20], [1.0, 0.8])]
    curve = mean_curve(runs)
    assert [c["fe"] for c in curve] == [0, 10, 20]
    assert [c["dev_loss"] for c in curve] == pytest.approx([1.0, 0.85, 0.7])


def test_best_within_includes_the_interpolated_value_at_the_budget():
    curve = mean_curve([_run("radazo:k=1", [0, 10, 20], [1.0, 0.9, 0.8])])
    assert best_within(curve, 15) == pytest.approx(0.85)
    assert best_within(curve, 10) == pytest.approx(0.9)
    assert best_within(curve, 99) == pytest.approx(0.8)  # past the end: its evaluations


def test_regret_on_hand_made_curves():
    grid = [0, 10, 20, 30, 40]
    results = [
        _run("radazo:k=1", grid, [1.0, 0.9, 0.8, 0.75, 0.7]),
        _run("radazo", grid, [1.0, 0.95, 0.7, 0.6, 0.65]),  # rises after 30 FE
        _run("zoaq:k_max=2", [0, 12, 22, 34, 44], [1.0, 0.9, 0.85, 0.65, 0.6]),
        _run("auto_k", grid, [1.0, 0.85, 0.8, 0.8, 0.8]),  # stalls above the envelope
    ]
    out = regret(results, 40, 10, tolerance=0.0)  # exact hand numbers; near ties below
    assert out["budgets"] == [10, 20, 30, 40]
    assert [e["dev_loss"] for e in out["envelope"]] == pytest.approx([0.9, 0.7, 0.6, 0.6])
    assert [e["method"] for e in out["envelope"]] == ["radazo:k=1"] + ["radazo"] * 3
    m = out["methods"]
    # radazo reaches 0.9 at 12 FE (0.95 -> 0.7 over 10..20), 0.6 at 30 FE
    assert m["radazo"]["regret"] == pytest.approx([1.2, 1.0, 1.0, 0.75])
    assert m["radazo:k=1"]["regret"][0] == pytest.approx(1.0)
    assert math.isinf(m["radazo:k=1"]["regret"][2])  # K=1 never reaches 0.6
    # zoaq: 0.7 at 22 + 0.75 * 12 = 31 FE; 0.6 only at its last evaluation, 44 FE
    assert m["zoaq:k_max=2"]["regret"] == pytest.approx([1.2, 31 / 20, 44 / 30, 44 / 40])
    assert m["zoaq:k_max=2"]["median"] == pytest.approx((1.2 + 44 / 30) / 2)
    assert m["zoaq:k_max=2"]["max"] == pytest.approx(31 / 20)
    a = m["auto_k"]["regret"]
    assert a[0] == pytest.approx(10 * 0.1 / 0.15 / 10) and all(map(math.isinf, a[1:]))
    assert math.isinf(m["auto_k"]["median"]) and math.isinf(m["auto_k"]["max"])
    # a budget that is not a multiple of the period is the last budget
    assert regret(results, 35, 10)["budgets"] == [10, 20, 30, 35]


def test_regret_counts_a_near_tie_as_reached():
    results = [_run("radazo:k=1", [0, 10, 20], [1.0, 0.9, 0.8]),
               _run("auto_k", [0, 10, 20], [1.0, 0.85, 0.805])]  # ends 0.6% above
    assert math.isinf(regret(results, 20, 20, tolerance=0.0)["methods"]["auto_k"]["regret"][0])
    # 0.808 = E(20) + 1% is reached between 10 and 20 FE (linear interpolation)
    assert regret(results, 20, 20)["methods"]["auto_k"]["regret"][0] == pytest.approx(
        (10 + 10 * 0.042 / 0.045) / 20)


def test_regret_needs_a_fixed_k_method():
    with pytest.raises(ValueError, match="fixed-K"):
        regret([_run("zoaq:k_max=2", [0, 10], [1.0, 0.9])], 10, 10)


def test_cli_budget_writes_the_regret_table(tmp_path):
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    out, report = tmp_path / "out", tmp_path / "llm.md"
    argv = ["--preset", "smoke", "--methods", "radazo:k=1,zoaq:k_max=2", "--budget", "8",
            "--out", str(out), "--report", str(report), "--quiet"]
    assert cli.main(parser.parse_args(argv)) == 0
    payload = read_json(out / "llm.json.xz")
    assert "--budget 8" in payload["record"]["command"] and payload["config"]["eval_every_fe"] == 1
    assert [r["total_fe"] >= 8 for r in payload["results"]] == [True, True]
    assert payload["results"][0]["total_fe"] == 8  # K=1: 4 steps of 2 FE
    assert payload["regret"]["budgets"] == list(range(1, 9))
    assert set(payload["regret"]["methods"]) == {"radazo:k=1", "zoaq:k_max=2"}
    text = report.read_text()
    assert "## Anytime: query regret" in text and "| R-AdaZO K=1 (envelope) |" in text
    assert "| ZoAQ K∈[1,2] |" in text
