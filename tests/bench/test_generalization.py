"""The generalization benchmark: the held-out set's coverage, the lr/mu rule, budgets, and
the CLI end to end on a tiny run."""


import jax
import jax.numpy as jnp
import numpy as np
import pytest

from benchmarks.__main__ import main as cli
from benchmarks.common import read_json
from benchmarks.generalization import experiment
from benchmarks.generalization.objectives import HELD_OUT, MAX_BUDGET, TUNING


def test_the_held_out_set_covers_what_the_protocol_promises():
    assert len(HELD_OUT) >= 8 and not set(HELD_OUT) & set(TUNING)
    dims = [p.dim for p in HELD_OUT.values()]
    assert min(dims) == 10 and max(dims) == 10_000
    for p in HELD_OUT.values():  # 10^6 calls at d <= 100, capped above
        assert p.budget == (MAX_BUDGET if p.dim <= 100 else 100_000)
    for name in ("logistic_minibatch", "noisy_ellipsoid"):  # noisy: the key changes f
        p = HELD_OUT[name]
        x = jnp.full(p.dim, 0.3)
        assert float(p.fn(x, jax.random.key(0))) != float(p.fn(x, jax.random.key(1)))


@pytest.mark.parametrize("name", sorted(HELD_OUT))
def test_held_out_gaps_are_non_negative_and_finite_from_the_start_box(name):
    p = HELD_OUT[name]
    dim = min(p.dim, 100) if name.endswith("d10k") else p.dim
    xs = jax.random.uniform(jax.random.key(1), (8, dim), minval=-p.box, maxval=p.box)
    gaps = np.asarray(jax.vmap(p.gap)(xs))
    assert np.all(np.isfinite(gaps)) and np.all(gaps >= -1e-4)


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
    for r in data["results"]:  # a log period may overshoot by at most 4 steps
        assert all(1000 <= c <= 1000 + 4 * 2 * (r["fixed_k"] or 16) for c in r["num_queries"])
    assert [(row["problem"], row["method"]) for row in data["regret"]] == [
        ("sum_powers", "auto_k")]
    assert data["summary"]["auto_k"]["cells"] == 1
    md = (tmp_path / "generalization_heldout.md").read_text()
    assert "within 1% of that quality counts as reached" in md and "median regret" in md
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
