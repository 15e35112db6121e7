"""The synthetic benchmark: objectives, the vmapped runner, and the CLI end to end."""


import jax
import jax.numpy as jnp
import numpy as np
import pytest

import zoaq_jax
from benchmarks.__main__ import main as cli
from benchmarks import experiment, presets
from benchmarks.common import read_json
from benchmarks.synthetic import protocol, report, runner
from benchmarks.methods import SYNTHETIC_HYPER
from benchmarks.methods import SYNTHETIC as REGISTRY
from benchmarks.methods import variant
from benchmarks.objectives import OBJECTIVES


@pytest.mark.parametrize("name", sorted(OBJECTIVES))
def test_objectives_vanish_at_their_minimiser_and_are_positive_elsewhere(name):
    obj = OBJECTIVES[name]

    @jax.jit  # one compilation per d (op-by-op dispatch is 10x slower here)
    def check(minimiser, xs):
        return obj.fn(minimiser), jax.vmap(obj.fn)(xs), jax.grad(obj.fn)(minimiser + 1e-3)

    for d in (2, 10, 100):
        xs = jax.random.normal(jax.random.key(d), (50, d)) * 2.0
        at_min, values, grad = check(jnp.asarray(obj.minimiser(d)), xs)
        assert abs(float(at_min)) < 1e-5
        assert np.all(np.asarray(values) > 0)
        assert np.all(np.isfinite(grad))


def test_objective_values_at_known_points():
    d = 10
    ones, zeros = jnp.ones(d), jnp.zeros(d)
    assert float(OBJECTIVES["quadratic"].fn(ones)) == pytest.approx(5.0)
    assert float(OBJECTIVES["cubic"].fn(ones)) == pytest.approx(d * (0.5 + 1 / 3))
    assert float(OBJECTIVES["rosenbrock"].fn(zeros)) == pytest.approx(d - 1)
    w = 0.75  # Levy at x = 0: w = 1 - 1/4
    levy0 = (np.sin(np.pi * w) ** 2 + (d - 1) * 0.0625 * (1 + 10 * np.sin(np.pi * w + 1) ** 2)
             + 0.0625 * (1 + np.sin(2 * np.pi * w) ** 2))
    assert float(OBJECTIVES["levy"].fn(zeros)) == pytest.approx(levy0, rel=1e-5)
    assert float(OBJECTIVES["ackley"].fn(ones)) == pytest.approx(
        -20 * np.exp(-0.2) - np.exp(1.0) + 20 + np.e, rel=1e-5)


def test_runtime_objective_switch_matches_each_objective():
    x = jax.random.normal(jax.random.key(0), (7,))
    switch = jax.jit(runner.objective)  # fid traced: one compilation for every objective
    for name, fid in runner.FUNCTION_IDS.items():
        assert float(switch(x, fid)) == pytest.approx(float(jax.jit(OBJECTIVES[name].fn)(x)))


def test_vmapped_unit_equals_per_seed_runs():
    p = presets.override(protocol.main("smoke"), functions=["rosenbrock"], seeds=[0, 1])
    (result,) = runner.run(p, "zoaq")

    @jax.jit  # one unbatched program, the seed an argument: compiled once for both seeds
    def one_seed(seed):
        x0 = jax.random.normal(jax.random.fold_in(jax.random.key(seed), 0), (p.dim,))
        opt = variant("zoaq").build(SYNTHETIC_HYPER, jax.random.fold_in(jax.random.key(seed), 1))
        return zoaq_jax.run(opt, OBJECTIVES["rosenbrock"].fn, x0, p.steps,
                            log_every=p.log_every)[2]

    for i, seed in enumerate(p.seeds):
        trace = one_seed(seed)
        assert result["num_queries"][i] == int(trace.num_queries[-1])
        np.testing.assert_array_equal(result["trace"]["last_k"][i], trace.last_k)
        assert result["final_gap"][i] == pytest.approx(float(trace.value[-1]), rel=1e-3)


def test_cli_end_to_end_writes_json_figures_and_report(tmp_path):
    code = cli(["synthetic", "--preset", "smoke", "--functions", "quadratic", "levy",
                "--seeds", "1-2", "--out", str(tmp_path), "--workers", "1"])
    assert code == 0
    data = read_json(tmp_path / "synthetic.json.xz")
    results = data["results"]  # per (function, method), function-major, per-seed lists
    assert [(r["function"], r["method"]) for r in results] == [
        (f, m) for f in ("quadratic", "levy") for m in ("zoaq", "radazo")]
    for r in results:
        assert r["seeds"] == [1, 2] and min(r["num_queries"]) > 0
        assert np.all(np.isfinite(r["final_gap"]))
        assert len(r["trace"]["step"]) == 5 and np.shape(r["trace"]["value"]) == (2, 5)
        if r["method"] == "radazo":  # R-AdaZO K=10
            assert r["num_queries"] == [2 * 10 * 40] * 2
    record = data["record"]
    assert record["command"].endswith("--seeds 1-2 --out " + str(tmp_path) + " --workers 1")
    assert record["wall_s"] > 0 and record["started"] and record["versions"]["jax"]
    pngs = sorted((tmp_path / "synthetic").glob("*.png"))
    assert len(pngs) == 5 and all(p.read_bytes()[:4] == b"\x89PNG" for p in pngs)
    text = (tmp_path / "synthetic.md").read_text()
    assert "### Levy" in text and "saving vs R-AdaZO K=10" in text
    assert "Savings are against R-AdaZO K=10. " in text
    assert "--workers 1" in text and "--preset smoke" in text  # the command as run
    assert f"- Run: started {record['started']}" in text and "- Machine: " in text
    # the report re-renders from its JSON alone, bit for bit, and keeps hand-written text
    # outside the generated block, whose stale content it replaces (a run writes its page
    # with the same function as --render: experiment.main's command.page)
    stale = text.replace("### Levy", "### Stale")
    assert stale != text
    (tmp_path / "synthetic.md").write_text("intro\n" + stale + "\n## Discussion\n\nkeep me\n")
    assert cli(["synthetic", "--render", str(tmp_path / "synthetic.json.xz"),
                "--out", str(tmp_path)]) == 0
    again = (tmp_path / "synthetic.md").read_text()
    assert again == "intro\n" + text + "\n## Discussion\n\nkeep me\n"


def test_objective_switch_ablation_continues_the_run(tmp_path):
    assert cli(["synthetic", "--ablation", "switch", "--preset", "smoke", "--seeds", "0",
                "--out", str(tmp_path), "--workers", "1"]) == 0
    data = read_json(tmp_path / "synthetic_switch.json.xz")
    for r in data["results"]:
        steps = r["trace"]["step"]
        assert steps[0] == 0 and steps[-1] == 80 and np.all(np.diff(steps) > 0)
        assert np.all(np.diff(r["trace"]["num_queries"], axis=1) > 0)  # queries accumulate


@pytest.mark.parametrize("spec, message", [
    ("adam", "error: unknown method 'adam'"),
    ("zoaq:n_hits=4", "error: bad override 'n_hits=4'"),
    ("radazo:k=two", "error: bad value in 'k=two'"),
])
def test_cli_rejects_bad_method_specs_before_any_work(spec, message, tmp_path, monkeypatch):
    monkeypatch.setattr(experiment, "execute", lambda *a, **k: pytest.fail("ran"))
    with pytest.raises(SystemExit, match=message):
        cli(["synthetic", "--preset", "smoke", "--methods", "zoaq", spec, "--out", str(tmp_path)])
    assert not any(tmp_path.iterdir())


def parse(argv):
    import argparse

    from benchmarks.synthetic import cli as synthetic_cli

    parser = argparse.ArgumentParser()
    synthetic_cli.add_arguments(parser)
    return synthetic_cli.protocols_of(parser.parse_args(argv))


def test_seeds_are_a_list_with_ranges_and_methods_canonical_specs():
    (p,) = parse(["--seeds", "0-2", "--methods", "zoaq:backbone=zo_adamm", "radazo:k=10",
                  "zo_adamm:k=4,radazo:k=2"])
    assert p.seeds == (0, 1, 2)
    assert [v.name for v in p.variants] == ["zoaq:backbone=zo_adamm", "radazo", "zo_adamm:k=4",
                                            "radazo:k=2"]
    assert [v.display for v in p.variants] == ["ZoAQ K∈[1,10] (ZO-AdaMM)", "R-AdaZO K=10",
                                               "ZO-AdaMM K=4", "R-AdaZO K=2"]
    (p,) = parse(["--mode", "budget", "--seeds", "0-999", "--preset", "smoke"])
    assert p.seeds == tuple(range(1000))
    assert report.seed_list(p.seeds) == "0-999 (1,000 seeds)"
    assert REGISTRY.parse("radazo").fixed_k == 10  # the paper's K=10 is the default


@pytest.mark.parametrize("seeds", ["-1", "two", "3-1"])
def test_cli_rejects_bad_seeds(seeds, tmp_path):
    with pytest.raises(SystemExit, match="error: .*seed"):
        cli(["synthetic", "--preset", "smoke", "--seeds", seeds, "--out", str(tmp_path)])


@pytest.mark.parametrize("args", [["--steps", "0"], ["--workers", "0"], ["--budget", "-2"]])
def test_cli_rejects_counts_below_one(args, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli(["synthetic", "--preset", "smoke", "--out", str(tmp_path), *args])
    assert exit_info.value.code == 2
    assert "expected an integer >= 1" in capsys.readouterr().err


@pytest.mark.parametrize("ablation", ["switch", "all"])
def test_cli_refuses_functions_that_would_drop_the_objective_switch(ablation, tmp_path):
    with pytest.raises(SystemExit, match="objective switch"):
        cli(["synthetic", "--ablation", ablation, "--functions", "quadratic", "--preset",
             "smoke", "--out", str(tmp_path)])


def test_trigger_metrics_are_per_function():
    def unit(function, label, values):
        return {"function": function, "method": "zoaq", "label": label,
                "trace": {"value": [values], "num_queries": [[0, 1000, 2000]]}}

    results = [unit("quadratic", "A", [4.0, 2.0, 1.0]), unit("quadratic", "B", [4.0, 3.0, 2.0]),
               unit("levy", "A", [9.0, 8.0, 7.0]), unit("levy", "B", [9.0, 5.0, 3.0])]
    rows = [line.split(" | ") for line in report.trigger_metrics(results).splitlines()[2:]]
    # each function has its own target: the worse final loss of its variants
    assert [(r[0].strip("| "), r[1], r[2]) for r in rows] == [
        ("Quadratic", "A", "2"), ("Quadratic", "B", "2"), ("Levy", "A", "7"), ("Levy", "B", "7")]
    assert rows[0][3] == "1,000" and rows[3][3] == "1,000"


def test_budget_mode_stops_every_method_at_the_budget_and_reports_regret(tmp_path):
    assert cli(["synthetic", "--mode", "budget", "--preset", "smoke", "--functions", "quadratic",
                "least_squares", "--seeds", "0,1", "--workers", "1", "--out", str(tmp_path)]) == 0
    data = read_json(tmp_path / "synthetic_budget.json.xz")
    budget = data["protocol"]["budget"]
    for r in data["results"]:
        # a log period may overshoot by at most log_every steps of the method's budget
        assert all(budget <= c <= budget + 2 * 16 * data["protocol"]["log_every"]
                   for c in r["num_queries"])
        assert len(r["curves"][0]) == len(data["grid"])
    assert {(row["function"], row["method"]) for row in data["regret"]} == {
        (f, m) for f in ("quadratic", "least_squares") for m in ("zoaq", "auto_k")}
    md = (tmp_path / "synthetic_budget.md").read_text()
    assert "Query regret" in md and "auto_k" in md
    # the report re-renders from its JSON alone, to the same text
    again = tmp_path / "again"
    assert cli(["synthetic", "--render", str(tmp_path / "synthetic_budget.json.xz"),
                "--out", str(again)]) == 0
    assert (again / "synthetic_budget.md").read_text() == md


def test_budget_runs_match_plain_runs_of_the_same_optimizer():
    from benchmarks.synthetic import budget

    p = presets.override(protocol.budget("budget", "smoke"), functions=["quadratic"], seeds=[0],
                         variants=[variant("radazo:k=2")], budget=400)
    (result,) = budget.run(p, "radazo:k=2")
    x0 = jax.random.normal(jax.random.fold_in(jax.random.key(0), 0), (p.dim,))
    opt = p.variants[0].build(SYNTHETIC_HYPER, jax.random.fold_in(jax.random.key(0), 1))
    _, _, trace = zoaq_jax.run(opt, OBJECTIVES["quadratic"].fn, x0, 100, log_every=10)
    assert result["num_queries"] == [400]
    assert result["final_gap"][0] == pytest.approx(float(trace.value[-1]), rel=1e-4)


def test_budget_regret_against_the_grid_on_hand_made_records():
    """Budget mode's envelopes and regrets on hand-made curves: a grid point twice as good
    as the fixed K at every call count, a method that is the grid's envelope (regret 1
    against it) and a method told its budget, scored at each budget by its own run."""
    from benchmarks.synthetic import budget

    p = presets.override(protocol.budget("budget", "smoke"), functions=["quadratic"])
    p = presets.override(p, lr_scales=(1.0, 2.0))
    fixed, better = 1000 / p.grid, 500 / p.grid

    def rec(method, curve, **fields):
        return {"function": "quadratic", "method": method, "label": method,
                "backbone": "radazo", "fixed_k": None, "grid_k": None, "lr_scale": 1.0,
                "curves": [curve], **fields}

    # the run told b is the grid's envelope from 0.75 b to b: scored with another budget's
    # run it would reach the target too late or never
    told = [rec("tuning_free:budget", np.where((p.grid >= 0.75 * b) & (p.grid <= b), better,
                                               1e9), told_budget=b, backbone="")
            for b in p.budgets]
    results = [rec("radazo:k=1", fixed, fixed_k=1, grid_k=1),
               rec("radazo:k=1,lr_scale=2.0", better, grid_k=1, lr_scale=2.0),
               rec("tuning_free", better, backbone=""), *told]
    rows = {r["method"]: r for r in budget.regret_rows(p, results)}
    assert set(rows) == {"best_fixed_k", "tuning_free", "tuning_free:budget"}
    # the grid's envelope itself: regret 1, or one grid point less (the 1% tolerance)
    for method in ("tuning_free", "tuning_free:budget"):  # told: each budget's own run
        assert all(0.98 < x <= 1.0 for x in rows[method]["regret_grid"])
    assert rows["tuning_free"]["best_grid"] == ["x2 K=1"] * 7
    assert rows["tuning_free"]["best_fixed"] == ["R-AdaZO K=1"] * 7
    # the fixed-K envelope needs 2 / 1.01 x the calls of the grid's (to the grid spacing,
    # 1.75%), and never gets there at the full budget
    assert rows["best_fixed_k"]["regret_grid"][:6] == pytest.approx([1.98] * 6, rel=0.02)
    assert rows["best_fixed_k"]["regret_grid"][6] == float("inf")
    # against the fixed K the method at half its gap reaches it at about half the calls
    assert rows["tuning_free"]["regret"][1:] == pytest.approx([0.505] * 6, rel=0.02)
    assert rows["tuning_free"]["gap_ratio"] == pytest.approx([0.5] * 7)
