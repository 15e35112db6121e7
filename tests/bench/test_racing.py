"""Racing lanes (design round 10): successive halving on hand-made curves, its call
accounting, the anytime race's resumed lanes, the prefix check, and a one-lane race scored
as the lane itself by the pages' regret code."""

import numpy as np
import pytest

from benchmarks.generalization import experiment, racing


def _lanes(grid, scales):
    """Curves falling as scale / (1 + calls): the smallest scale is best everywhere."""
    return [s / (1.0 + grid) for s in scales]


def test_told_halving_keeps_the_best_lane_and_spends_exactly_its_budget():
    grid = experiment.grid_of(10_000)
    curves = _lanes(grid, [4.0, 3.0, 1.0, 2.0])
    seen = []

    def observe(i, calls):
        seen.append(i)
        return racing.value_at(grid, curves[i], calls)

    timeline = racing.race_timeline(observe, 4, 1200.0, grid[-1])
    # rounds of 4, 2, 1 lanes; comparisons after the first two: 4 + 2 calls
    assert timeline.compared == 6 and len(seen) == 6
    assert timeline.spent == pytest.approx(1200.0, abs=1e-9)
    run = 1200.0 - 6
    last = timeline.segments[-1]
    assert last[4] == 2  # the winner, the incumbent of the last round
    assert last[3][2] == pytest.approx(run / 12 + run / 6 + run / 3)
    assert sorted(last[3]) == pytest.approx([run / 12, run / 12, run / 12 + run / 6,
                                             run / 12 + run / 6 + run / 3])
    # before the first comparison the race returns its first lane, after it the best
    curve = racing.race_curve(grid, curves, timeline)
    early = np.searchsorted(grid, 100.0)
    assert curve[early] == racing.value_at(grid, curves[0], grid[early] / 4)
    assert curve[-1] == racing.value_at(grid, curves[2], last[3][2])


def test_a_noisy_comparison_can_drop_the_best_lane():
    grid = experiment.grid_of(10_000)
    curves = _lanes(grid, [4.0, 3.0, 1.0, 2.0])
    spread = [np.full_like(grid, 1e3)] * 4  # noise far above the lanes' differences
    winners = {racing.halving(racing.observer(grid, curves, spread, np.random.default_rng(s)),
                              4, 1200.0, racing.Timeline([]), np.zeros(4), 0)
               for s in range(20)}
    assert winners != {2}
    exact = racing.observer(grid, curves, None, np.random.default_rng(0))
    assert racing.halving(exact, 4, 1200.0, racing.Timeline([]), np.zeros(4), 0) == 2


def test_the_anytime_race_resumes_its_lanes_and_doubles_its_phases():
    grid = experiment.grid_of(10_000)
    curves = _lanes(grid, [4.0, 3.0, 1.0, 2.0])
    timeline = racing.race_timeline(
        racing.observer(grid, curves, None, np.random.default_rng(0)), 4, None, grid[-1])
    # phases of 3 rounds and 2 comparisons (5 segments), phase j told 250 2^j calls: a
    # resumed lane spends only its new calls, so a phase spends at most its budget
    phases = len(timeline.segments) // 5
    assert timeline.compared == 6 * phases and len(timeline.segments) == 5 * phases
    spent = [timeline.segments[5 * j + 4][1] - timeline.segments[5 * j][0]
             for j in range(phases)]
    assert all(s <= racing.FIRST * 2 ** j + 1e-6 for j, s in enumerate(spent))
    assert spent[-1] < racing.FIRST * 2 ** (phases - 1)  # the lanes' earlier calls reused
    assert sum(spent[:-1]) < grid[-1] <= timeline.spent == pytest.approx(sum(spent))
    # a lane's calls never fall, and only the calls past its last point are spent
    for i, (t0, t1, p0, p1, _) in enumerate(timeline.segments):
        comparison = i % 5 in (1, 3)  # one call a compared lane, no lane moves
        assert np.all(p1 >= p0) and t1 - t0 == (
            len(p0) // (1 + i % 5 // 3) if comparison else pytest.approx(np.sum(p1 - p0)))
        assert not comparison or np.all(p1 == p0)
    assert timeline.segments[-1][4] == 2


def _record(budget, curve_of, **fields):
    grid = experiment.grid_of(budget)
    return {"problem": "p", "method": "m", "label": "m", "fixed_k": None, "grid_k": None,
            "lr_scale": 1.0, "told_budget": None, "seeds": [0, 1], "budget": budget,
            "curves": [curve_of(grid), curve_of(grid) * 2], "k_curves": [grid * 0, grid * 0],
            "k_changes": [0, 0], **fields}


def test_the_prefix_check_tells_an_anytime_lane_from_a_told_run():
    def falling(grid):
        return 1.0 / (1.0 + grid)

    long = _record(100_000, falling)
    assert racing.prefix_mismatch(_record(3162, falling), long) == 0.0
    assert racing.prefix_mismatch(_record(3162, falling, fixed_k=1, grid_k=1), long) == 0.0
    told = _record(3162, lambda g: falling(g) * np.where(g > 2000, 0.5, 1.0),
                   told_budget=3162)  # a run told 3,162 calls decays early
    assert racing.prefix_mismatch(told, long) == pytest.approx(0.5)
    told_long = _record(100_000, falling, told_budget=100_000)
    rows = racing.prefix_rows([_record(3162, falling)], [long, told, told_long])
    assert rows == [["p", "m", "3,162 calls", "0"], ["p", "m", "told 3,162", "0.5"]]


def test_a_one_lane_race_scores_as_its_lane_with_the_pages_regret():
    budget = 10_000

    def lane(scale, k=None, lr=1.0, method="m"):
        return _record(budget, lambda g: scale / (1.0 + g), fixed_k=k if lr == 1.0 else None,
                       grid_k=k, lr_scale=lr, method=method, label=method)

    records = [lane(3.0, 1, method="radazo:k=1"), lane(2.0, 1, 2.0, "radazo:k=1,lr_scale=2"),
               lane(2.5, method="tuning_free")]
    assert racing.lane_name(records[1]) == "x2 K=1" and racing.lane_name(records[2]) == "tf x1"
    race = racing.Race("race tf", ("tf x1",), told=False)
    rows = racing.score(records, [race], "oracle", "tuning", reps=3)
    by = {r["method"]: r for r in rows}
    assert by["race tf"]["regret_grid"] == by["tuning_free"]["regret_grid"]
    assert by["race tf"]["regret"] == by["tuning_free"]["regret"]
    assert by["tuning_free"]["regret_grid"][0] == pytest.approx(1.25, rel=0.02)


def test_keep_curves_stores_every_lane_per_seed_and_the_same_regrets():
    from benchmarks.generalization import cli

    class Record:
        def as_dict(self):
            return {}

    def lane(scale, k, lr=1.0):
        return _record(10_000, lambda g: scale / (1.0 + g), fixed_k=k if lr == 1.0 else None,
                       grid_k=k, lr_scale=lr, method=f"radazo:k={k},lr_scale={lr}")

    results = [lane(3.0, 1), lane(9.0, 1, 0.5), lane(2.0, 1, 2.0), lane(2.5, None)]
    results[-1].update(method="tuning_free", grid_k=None)
    config = experiment.PRESETS["smoke"]
    kept, compacted = (cli.stored(config, (results, keep), Record()) for keep in (True, False))
    assert kept["regret"] == compacted["regret"] and kept["summary"] == compacted["summary"]
    assert kept["results"] is results and all(len(r["curves"]) == 2 for r in results)
    assert [len(r["curves"]) for r in compacted["results"]] == [1, 0, 1, 1]  # x0.5: dropped


def test_a_first_step_lane_passes_its_learning_rate(monkeypatch):
    import zoaq_jax

    calls = []
    monkeypatch.setattr(zoaq_jax, "tuning_free", lambda budget=None, *, key=0, **kw: calls.append(
        (budget, key, kw)), raising=False)
    v = experiment.variant("tuning_free:learning_rate=0.032")
    v.build(experiment.SYNTHETIC_HYPER, 7, 500)
    assert calls == [(None, 7, {"learning_rate": 0.032})] and not v.told_budget
    assert v.display == "tuning_free, first step 0.032" and racing.lane_name(
        {"method": v.name, "told_budget": None}) == "tf x4"
    with pytest.raises(ValueError, match="must be > 0"):
        experiment.variant("tuning_free:learning_rate=0")


def test_race_goes_through_the_command_template_and_renders_again(tmp_path):
    """``generalization --race`` writes a run record, the results file and the page (its
    answer first); ``--render`` of that file writes the same page from it alone."""
    from benchmarks import common
    from benchmarks.__main__ import main as cli
    from benchmarks.pages import opening_problems

    def lane(scale, method, k=None, lr=1.0):
        return _record(10_000, lambda g: scale / (1.0 + g), problem="quadratic", method=method,
                       label=method, fixed_k=k if lr == 1.0 else None, grid_k=k, lr_scale=lr)

    records = [lane(3.0, "radazo:k=1", 1), lane(2.0, "radazo:k=1,lr_scale=2", 1, 2.0),
               lane(2.5, "tuning_free"), lane(2.2, "tuning_free:learning_rate=0.002"),
               lane(2.8, "tuning_free:learning_rate=0.032")]
    source = common.write_json(tmp_path / "generalization_tuning.json.xz",
                               {"config": {"set": "tuning"}, "results": records})
    out = tmp_path / "out"
    assert cli(["generalization", "--race", str(source), "--races", "tf x1/4,1,4, anytime",
                "--reps", "2", "--out", str(out), "--quiet"]) == 0
    data = common.read_json(out / f"racing_tuning{common.RESULTS}")
    assert "--race" in data["record"]["command"] and "--preset" not in data["record"]["command"]
    assert {r["selection"] for r in data["results"]} == {"oracle", "seeds"}
    assert "race tf x1/4,1,4, anytime" in {r["method"] for r in data["results"]}
    page = out / "racing_tuning.md"
    written = page.read_text()
    assert opening_problems(written) == []
    page.unlink()
    assert cli(["generalization", "--render", str(out / f"racing_tuning{common.RESULTS}"),
                "--out", str(out), "--quiet"]) == 0
    assert page.read_text() == written
