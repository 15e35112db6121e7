"""The generalization benchmark: the held-out set's coverage and new objectives, the lr/mu
rule, budgets, the (lr, K) envelope, the baselines' specs, and the CLI end to end on a tiny
run."""

from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import zoaq_jax
from benchmarks import anytime
from benchmarks.__main__ import main as cli
from benchmarks.common import read_json
from benchmarks.generalization import experiment, objectives
from benchmarks.generalization.objectives import HELD_OUT, MAX_BUDGET, TUNING
from benchmarks.methods import SYNTHETIC_HYPER, cosine_decay, plateau_on_value


def test_the_held_out_set_covers_what_the_protocol_promises():
    assert len(HELD_OUT) >= 8 and not set(HELD_OUT) & set(TUNING)
    dims = [p.dim for p in HELD_OUT.values()]
    assert min(dims) == 10 and max(dims) == 100_000 and len(HELD_OUT) == 14
    for p in HELD_OUT.values():  # 10^6 calls at d <= 100, capped above
        assert p.budget == MAX_BUDGET if p.dim <= 100 else p.budget <= 100_000
    for name in ("logistic_minibatch", "noisy_ellipsoid", "mlp_minibatch"):  # the key changes f
        p = HELD_OUT[name]
        x = jnp.full(p.dim, 0.3)
        assert float(p.fn(x, jax.random.key(0))) != float(p.fn(x, jax.random.key(1)))


@pytest.mark.parametrize("name", sorted(HELD_OUT))
def test_held_out_gaps_are_non_negative_and_finite_from_the_start_box(name):
    p = HELD_OUT[name]
    dim = min(p.dim, 100) if p.dim >= 10_000 else p.dim
    xs = jax.random.uniform(jax.random.key(1), (8, dim), minval=-p.box, maxval=p.box)
    gaps = np.asarray(jax.vmap(p.gap)(xs))
    assert np.all(np.isfinite(gaps)) and np.all(gaps >= -1e-4)


def test_the_new_held_out_objectives_have_their_stated_minima():
    a, b, x_star, f_star, l1 = objectives._lasso_data(50)
    assert float(objectives.lasso_gap(jnp.asarray(x_star))) == pytest.approx(0.0, abs=2e-6)
    grad = a.astype(np.float64).T @ (a.astype(np.float64) @ x_star - b) / a.shape[0]
    on = x_star != 0  # the optimality condition: 0 in grad + l1 * subdifferential
    assert np.max(np.abs(grad[on] + l1 * np.sign(x_star[on]))) < 1e-5
    assert np.max(np.abs(grad[~on])) < l1 and on.sum() == 10
    steps = jax.random.normal(jax.random.key(0), (16, 50)) * 1e-2  # x* is a strict minimum
    assert np.all(np.asarray(jax.vmap(lambda u: objectives.lasso_gap(x_star + u))(steps)) > 0)
    shift = jnp.asarray(objectives._shift(1000))
    assert float(objectives.shifted_ellipsoid(shift)) == 0.0
    assert float(objectives.shifted_ellipsoid(shift + 1.0)) == pytest.approx(
        0.5 * float(jnp.sum(10.0 ** (jnp.arange(1000) / 999))), rel=1e-5)
    x = jax.random.uniform(jax.random.key(1), (30,), minval=-1.0, maxval=1.0)
    scaled = HELD_OUT["scaled_ellipsoid"]  # f x 1e4 at x x 1e-3, started in U[-1e-3, 1e-3]
    assert scaled.box == 1e-3 and float(scaled.gap(jnp.zeros(30))) == 0.0
    assert float(scaled.gap(x * 1e-3)) == pytest.approx(1e4 * float(
        objectives.ellipsoid(x, 3.0)), rel=1e-5)
    mlp = HELD_OUT["mlp_minibatch"]  # gap: the full-data loss; a minibatch: its rows' mean
    objectives._mlp_data.cache_clear()  # its data is built inside the first trace
    assert np.isfinite(float(jax.jit(mlp.gap)(jnp.zeros(mlp.dim))))
    w = jax.random.normal(jax.random.key(2), (mlp.dim,)) * 0.3
    rows = jax.random.randint(jax.random.key(3), (32,), 0, 2000)
    data, labels = objectives._mlp_data()
    logits = objectives._mlp(w, jnp.asarray(data))
    assert float(mlp.fn(w, jax.random.key(3))) == pytest.approx(float(jnp.mean(
        jnp.logaddexp(0.0, -jnp.asarray(labels)[rows] * logits[rows]))), rel=1e-6)
    assert float(mlp.gap(w)) == pytest.approx(float(jnp.mean(
        jnp.logaddexp(0.0, -jnp.asarray(labels) * logits))), rel=1e-6)


def _record(method, curve, budget=10_000, **fields):
    """A generalization record with one seed's curve ``curve(grid)``."""
    base = {"problem": "p", "method": method, "label": method, "fixed_k": None, "grid_k": None,
            "lr_scale": 1.0, "told_budget": None, "budget": budget, "k_changes": [0]}
    grid = experiment.grid_of(budget)
    return {**base, **fields, "curves": [curve(grid).tolist(), (curve(grid) * 0.5).tolist()],
            "k_curves": [np.ones_like(grid).tolist()] * 2}


def test_the_grid_envelope_and_both_regrets_on_step_curves():
    steps = lambda *pairs: lambda g: np.select([g >= c for c, _ in pairs[::-1]],  # noqa: E731
                                               [v for _, v in pairs[::-1]], 4.0)
    results = [
        _record("radazo:k=1", steps((0, 2.0), (3162, 1.0)), fixed_k=1, grid_k=1),
        _record("radazo:k=1,lr_scale=2.0", steps((0, 2.0), (1000, 1.0)), grid_k=1, lr_scale=2.0),
        _record("radazo:k=1,lr_scale=4.0", steps((0, 3.0)), grid_k=1, lr_scale=4.0),  # never best
        _record("scored", steps((0, 2.0), (3162, 1.0), (10_000, 0.5))),
        *(_record("told", steps((0, 2.0), (b, 1.0 if b < 10_000 else 0.9)), told_budget=b)
          for b in (1000, 3162, 10_000)),
    ]
    rows = {r["method"]: r for r in experiment.regret_rows(results)}
    stored = experiment.compact(results)  # mean curves; none for a point never the envelope
    assert experiment.regret_rows(stored) == list(rows.values())
    assert [len(r["curves"]) for r in stored] == [1, 1, 0, 1, 1, 1, 1]
    assert stored[1]["k_curves"] == [] and len(stored[3]["k_curves"]) == 1
    # fixed-K envelope 2, 1, 1 at 1000, 3162, 10^4 calls; the grid's 1, 1, 1 (x2 K=1 is 1
    # from 1000 calls on)
    assert rows["scored"]["best_fixed"] == ["K=1"] * 3
    assert rows["scored"]["best_grid"] == ["x2 K=1", "K=1", "K=1"]  # a tie: the rule's lr
    first = experiment.grid_of(10_000)[0]  # the first grid point already reaches 2
    assert rows["scored"]["regret"] == [first / 1000, 1.0, 3162 / 10_000]
    assert rows["scored"]["regret_grid"] == [3.162, 1.0, 0.3162]
    assert rows["best_fixed_k"]["regret_grid"] == [3.162, 1.0, 0.3162]
    # told: the run told each budget reaches 1 (0.9) exactly at that budget
    assert rows["told"]["regret_grid"] == [1.0, 1.0, 1.0] and rows["told"]["told_budget"]
    summary = experiment.overall(list(rows.values()))
    assert summary["scored"]["max_grid"] == 3.162 and summary["scored"]["median_grid"] == 1.0
    assert summary["scored"]["above_1_grid"] == ["p"]


def test_an_anytime_run_is_scored_up_to_twice_the_largest_budget():
    # The envelope (K = 1) reaches 1.0 at 10^4 calls, the problem's largest budget; the
    # scored run gets there at 1.5 x 10^4 calls, within its 2 x 10^4 (the envelope's run
    # stops at 10^4): its regret at a budget b is measured up to 2 x 10^4 / b.
    steps = lambda *pairs: lambda g: np.select([g >= c for c, _ in pairs[::-1]],  # noqa: E731
                                               [v for _, v in pairs[::-1]], 4.0)
    results = [_record("radazo:k=1", steps((0, 2.0), (10_000, 1.0)), fixed_k=1, grid_k=1),
               _record("scored", steps((0, 3.0), (15_000, 1.0))),
               _record("never", steps((0, 3.0), (20_001, 1.0)))]  # past 2B: not on the grid
    rows = {r["method"]: r for r in experiment.regret_rows(results)}
    assert rows["scored"]["budgets"] == [1000, 3162, 10_000]  # the tables: budgets <= B
    assert 1.5 <= rows["scored"]["regret"][-1] <= 1.52  # the grid's spacing: about 1.1%
    grid = experiment.grid_of(10_000)
    past = grid[np.searchsorted(grid, 15_000)]  # the first grid point at or past 1.5 x 10^4
    assert rows["scored"]["regret"] == [past / 1000, past / 3162, past / 10_000]
    assert rows["never"]["regret"] == [np.inf] * 3
    assert experiment.overall(list(rows.values()))["scored"]["max"] == past / 1000
    # the grid up to B is the one the envelopes were always sampled on; past B, to 2B
    below = anytime.call_grid(10_000, experiment.budgets_of(10_000), points=600,
                              low=experiment.FIRST_BUDGET / 64)
    assert np.array_equal(grid[:below.size], below) and grid[-1] == 20_000
    assert np.all(np.diff(grid) > 0) and np.max(np.diff(np.log(grid))) < 0.011
    assert experiment.runs_to(10_000, envelope=False, told=False) == 20_000
    assert experiment.runs_to(10_000, True, False) == experiment.runs_to(10_000, False, True) \
        == 10_000  # the envelopes' runs and the runs told their budget stop at B


def test_lr_scale_schedule_and_backbone_specs():
    v = experiment.variant("radazo:k=4,lr_scale=2")
    assert (v.name, v.grid_k, v.fixed_k, v.lr_scale) == ("radazo:k=4,lr_scale=2.0", 4, None, 2.0)
    assert experiment.variant("radazo:k=4,lr_scale=1").name == "radazo:k=4"  # the default
    assert experiment.variant("radazo:k=4").fixed_k == 4
    for spec in ("radazo:k=1,schedule=cosine", "radazo:backbone=prodigy,k=1",
                 "radazo:k=1,schedule=plateau"):
        v = experiment.variant(spec)
        assert v.grid_k is None and v.fixed_k is None and v.name == spec
    assert experiment.variant("radazo:k=1,schedule=cosine").told_budget
    assert experiment.variant("radazo:k=1,backbone=dowg").display == "R-AdaZO K=1 (DoWG)"
    for bad in ("radazo:k=1,lr_scale=0", "radazo:k=1,schedule=linear"):
        with pytest.raises(ValueError, match="schedule is one of"):
            experiment.variant(bad)
    with pytest.raises(ValueError, match="needs a fixed K"):
        experiment.variant("auto_k:schedule=cosine").build(SYNTHETIC_HYPER, 0, 1000)


def test_tuning_free_is_registered_and_fails_clearly_without_the_library(monkeypatch):
    monkeypatch.delattr(zoaq_jax, "tuning_free", raising=False)
    for spec in ("tuning_free", "tuning_free:budget"):
        with pytest.raises(ValueError, match="no tuning_free"):
            experiment.variant(spec)
    calls = []
    monkeypatch.setattr(zoaq_jax, "tuning_free", lambda budget=None, *, key=0: calls.append(
        (budget, key)), raising=False)
    experiment.variant("tuning_free").build(SYNTHETIC_HYPER, 7, 500)
    told = experiment.variant("tuning_free:budget")
    told.build(SYNTHETIC_HYPER, 8, 500)
    assert calls == [(None, 7), (500, 8)] and told.told_budget and told.told_by_rebuild


def test_cosine_decay_matches_optax_and_plateau_reads_the_value_estimate():
    optax_cosine = optax.cosine_decay_schedule(0.3, 100)
    ours = cosine_decay(0.3, jnp.int32(100))
    for t in (0, 1, 37, 99, 100, 250):
        assert float(ours(t)) == pytest.approx(float(optax_cosine(t)), rel=1e-6, abs=1e-9)
    # a constant objective: the value estimate never improves, so after optax's default
    # patience (10 steps) reduce_on_plateau scales the step by its factor 0.1
    opt = plateau_on_value(optax.chain(zoaq_jax.fixed_estimator(k=1, key=0),
                                       optax.scale_by_learning_rate(0.1)))
    x, state = jnp.ones(3), opt.init(jnp.ones(3))
    for _ in range(12):
        _, state = opt.update(None, state, x, value_fn=lambda x: jnp.float32(1.0))
    assert float(optax.tree.get(state, "value_estimate")) == 1.0
    assert float(optax.tree.get(state, "scale")) == pytest.approx(0.1)


def test_the_baselines_and_grid_lanes_run(tmp_path):
    config = replace(experiment.preset("smoke"), budget=experiment.FIRST_BUDGET,
                     lr_scales=(0.5, 1.0))
    records = [r for spec in ("radazo:k=2", *experiment.BASELINES[:-1])
               for r in experiment.run(config, spec)]
    assert [(r["method"], r["lr_scale"], r["told_budget"]) for r in records] == [
        ("radazo:k=2,lr_scale=0.5", 0.5, None), ("radazo:k=2", 1.0, None),
        ("radazo:k=1,schedule=cosine", 1.0, 1000), ("radazo:backbone=prodigy,k=1", 1.0, None),
        ("radazo:backbone=dog,k=1", 1.0, None), ("radazo:backbone=dowg,k=1", 1.0, None),
        ("radazo:k=1,schedule=plateau", 1.0, None)]
    for r in records:  # the grid's lanes and the cosine decay (told) stop at B, the rest at 2B
        end = 1000 if r["grid_k"] or r["told_budget"] else 2000
        assert end <= r["num_queries"][0] <= end + 4 * 2 * 2 and np.isfinite(r["final_gap"][0])
    assert records[0]["lr"] == 0.5 * records[1]["lr"]


def test_one_lr_and_mu_rule_from_the_start_scale():
    tuning = experiment.settings_of(TUNING["quadratic"])  # x0 ~ N(0, 1): the synthetic lr/mu
    assert (tuning.lr, tuning.mu) == (1e-3, 5e-3)
    rastrigin = experiment.settings_of(HELD_OUT["rastrigin"])  # U[-5.12, 5.12]
    assert rastrigin.lr == pytest.approx(1e-3 * 5.12 / np.sqrt(3))
    assert rastrigin.mu == pytest.approx(5e-3 * 5.12 / np.sqrt(3))


def test_budgets_are_half_decades_from_1000_calls():
    assert experiment.budgets_of(10**6) == (1000, 3162, 10000, 31623, 100000, 316228, 10**6)
    assert experiment.budgets_of(5000) == (1000, 3162, 5000)
    grid = experiment.grid_of(10**4)
    assert set(experiment.budgets_of(10**4)) <= set(grid.tolist()) and grid[0] < 1000


def test_cli_runs_scores_and_re_renders(tmp_path):
    argv = ["generalization", "--problems", "sum_powers", "--budget", "1000", "--seeds", "0",
            "--methods", "radazo:k=1", "auto_k", "--workers", "1", "--out", str(tmp_path)]
    assert cli(argv) == 0
    data = read_json(tmp_path / "generalization_heldout.json.xz")
    for r in data["results"]:  # a log period may overshoot by at most 4 steps; the
        end = 1000 if r["fixed_k"] else 2000  # envelope's run stops at B, auto_k's at 2B
        assert all(end <= c <= end + 4 * 2 * (r["fixed_k"] or 16) for c in r["num_queries"])
    assert [(row["problem"], row["method"]) for row in data["regret"]] == [
        ("sum_powers", "auto_k")]
    assert data["summary"]["auto_k"]["cells"] == 1
    md = (tmp_path / "generalization_heldout.md").read_text()
    assert "within 1% of that quality counts as reached" in md and "median vs fixed K" in md
    again = tmp_path / "again"
    assert cli(["generalization", "--render", str(tmp_path / "generalization_heldout.json.xz"),
                "--out", str(again)]) == 0
    assert (again / "generalization_heldout.md").read_text() == md


def test_bad_options_fail_before_any_run(tmp_path):
    with pytest.raises(SystemExit, match="not in the heldout set"):
        cli(["generalization", "--problems", "quadratic", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="at least one fixed-K method"):
        cli(["generalization", "--methods", "auto_k", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="--budget must be >= 1000"):
        cli(["generalization", "--budget", "999", "--out", str(tmp_path)])
