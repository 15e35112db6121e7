"""The anytime comparison of the attack: its methods, the query regret, the CLI's specs."""

import argparse
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import zoaq_jax
from benchmarks.attack import cli, methods, report, results


def test_fixed_k_family_specs_and_labels():
    assert methods.FIXED_K == ("radazo:k=1", "radazo", "radazo:k=4", "zo_adamm:k=1",
                               "zo_adamm", "zo_adamm:k=4", "zoar", "zoar:k=2", "zoar:k=4")
    labels = [methods.label(s) for s in methods.FIXED_K]
    assert labels == [f"{name} K={k}" for name in ("R-AdaZO", "ZO-AdaMM", "ZoAR")
                      for k in (1, 2, 4)]
    assert methods.COMPARISONS["anytime"] == methods.ADAPTIVE + methods.FIXED_K


def test_auto_k_spec_uses_the_library_defaults():
    defaults = {**inspect.signature(zoaq_jax.auto_k_estimator).parameters,
                **inspect.signature(zoaq_jax.budgets.progress).parameters}  # the rule's
    auto_k = methods.parse("auto_k")
    assert auto_k.spec == "auto_k" and methods.label(auto_k) == "auto_k K∈[1,16]"
    params = dict(auto_k.params)
    assert params.pop("difference") == "forward" and params.pop("backbone") == "radazo"
    assert (params.pop("lr_scale"), params.pop("schedule")) == (1.0, "constant")  # every base's
    assert params == {name: defaults[name].default for name in params}
    assert params["window"] == 8 and params["growth"] == 0.125 and params["k_max"] == 16
    assert methods.label("auto_k:window=50") == "auto_k K∈[1,16], window=50"


def quadratic(x):
    return jnp.sum((x - 1.0) ** 2)


def run_steps(spec, steps, dim=6):
    opt = methods.build(methods.parse(spec), "mnist", jax.random.key(3))
    x = jnp.zeros(dim)
    state = opt.init(x)
    for _ in range(steps):
        updates, state = opt.update(None, state, x, value_fn=quadratic, value=quadratic(x))
        x = optax.apply_updates(x, updates)
    return x, state


# The comparison's specs that no other test builds.
@pytest.mark.parametrize("spec", ["auto_k", "radazo:k=1", "radazo:k=4", "zo_adamm:k=1",
                                  "zo_adamm:k=4", "zoar:k=4"])
def test_comparison_methods_build_and_step(spec):
    x, state = run_steps(spec, 3)
    assert bool(jnp.all(jnp.isfinite(x))) and bool(jnp.any(x != 0))
    # forward differences with the caller's centre value: K perturbed calls a step
    # (auto_k starts at K_min = 1)
    params = dict(methods.parse(spec).params)
    assert int(optax.tree.get(state, "num_queries")) == 3 * params.get("k", params.get("k_min"))
    # the monitor the attack's consistency figure reads
    assert np.isfinite(float(optax.tree.get(state, "consistency")))


def test_auto_k_is_radazo_k1_within_its_first_window():
    """Before its first budget decision (two progress windows) auto_k spends K = 1 and
    makes the same steps as R-AdaZO K=1 (same directions; float32 rounding aside)."""
    x_auto, state = run_steps("auto_k", 5)
    x_fixed, fixed_state = run_steps("radazo:k=1", 5)
    np.testing.assert_allclose(x_auto, x_fixed, rtol=1e-5, atol=1e-6)
    assert not np.allclose(x_auto, run_steps("radazo", 5)[0], rtol=1e-3)
    assert int(optax.tree.get(state, "next_k")) == 1
    assert int(optax.tree.get(state, "num_queries")) == 5


def record(method, image, seed, queries):
    """A record of ``method``'s attack; ``queries=None`` is a failure at a cap of 900."""
    return {"method": method, "image": image, "seed": seed, "success": queries is not None,
            "num_queries": 900 if queries is None else queries, "steps": 300}


# Queries per attack (1, 101), (1, 202), (1, 303), (2, 101); None = not solved.
TABLE = {
    "zoaq": [100, 200, 300, 400],
    "auto_k": [50, 100, None, 100],
    "radazo:k=1": [200, 100, 400, 250],
    "radazo": [50, 250, 500, 250],  # ties radazo:k=1 on the counted attacks
    "zoar": [100, 100, 600, 200],
    "zoar:k=2": [60, 160, 200, 300],
}
ATTACKS = [(1, 101), (1, 202), (1, 303), (2, 101)]


def by_method(table):
    return {m: [record(m, i, s, q) for (i, s), q in zip(ATTACKS, qs)] for m, qs in table.items()}


def test_regret_on_hand_made_records():
    out = results.anytime_regret(by_method(TABLE))
    # (1, 303) is unsolved by auto_k, so it is left out for every method.
    assert (out["attacks"], out["common_attacks"], out["excluded"]) == (4, 3, [[1, 303]])
    m = out["methods"]
    assert m["zoar"]["mean"] == pytest.approx(400 / 3)
    assert out["best_fixed"] == "zoar"
    # a tie is broken by FIXED_K's order (K=1 before K=2); ZO-AdaMM was not run
    assert out["family_best"] == {"radazo": "radazo:k=1", "zoar": "zoar"}
    # each attack's best K of the family: R-AdaZO 50, 100, 250; ZoAR 60, 100, 200
    assert out["family_oracle"] == pytest.approx({"radazo": 400 / 3, "zoar": 120})
    assert m["zoaq"]["regret"] == pytest.approx((700 / 3) / (400 / 3))  # 1.75
    assert m["zoaq"]["per_attack_regret"] == pytest.approx([1.0, 2.0, 2.0])
    assert m["zoaq"]["median_regret"] == pytest.approx(2.0)
    assert m["auto_k"]["regret"] == pytest.approx(250 / 400)
    assert m["auto_k"]["median_regret"] == pytest.approx(0.5)
    assert m["zoaq"]["family_regret"] == pytest.approx({"radazo": 700 / 550, "zoar": 1.75})
    assert m["auto_k"]["success_rate"] == 0.75 and m["zoar"]["success_rate"] == 1.0
    assert "regret" not in m["zoar"] and "statzo" not in m  # adaptive methods not run


def test_regret_without_common_attacks_or_without_a_side():
    table = {**TABLE, "zoar": [None, 100, 600, 200], "radazo:k=1": [200, 100, 400, None]}
    table["zoaq"] = [100, None, 300, 400]
    out = results.anytime_regret(by_method(table))
    assert out["common_attacks"] == 0 and out["best_fixed"] is None
    assert np.isnan(out["methods"]["zoaq"]["regret"]) and np.isnan(out["methods"]["zoaq"]["mean"])
    assert results.anytime_regret(by_method({"zoaq": TABLE["zoaq"]})) is None
    assert results.anytime_regret(by_method({"zoar": TABLE["zoar"]})) is None


def test_regret_table_is_rendered_only_for_the_comparison():
    records = by_method(TABLE)
    main_only = {m: r for m, r in records.items() if m != "radazo:k=1"}
    assert not results.has_comparison(main_only)  # only main methods: no regret table
    assert results.has_comparison(records)
    records["zoar:k=4"] = [record("zoar:k=4", i, s, 1000) for i, s in ATTACKS]
    lines = "\n".join(report._anytime_tables(results.anytime_regret(records)))
    assert "| ZoAR | 133 (100%) | 173 (100%) | 1,000 (100%) | 120 |" in lines.replace("**", "")
    assert "**133 (100%)**" in lines  # ZoAR K=1, best of its family
    assert "ZoAR K=1 (`zoar`)" in lines
    assert "| auto_k K∈[1,16] | `auto_k` | 75% | 83 | 0.96 | 0.62 | 0.50 | 0.45 | 0.62 |" in lines


def parse_cli(argv):
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return parser.parse_args(argv)


def test_compare_anytime_specs():
    assert cli.config_of(parse_cli(["--compare", "anytime"])).methods == \
        methods.COMPARISONS["anytime"]
    specs = cli.config_of(parse_cli(["--methods", "zoar:k=2", "statzo_norm",
                                     "--compare", "anytime"])).methods
    assert specs[:2] == ("zoar:k=2", "statzo_norm") and len(specs) == 13
    assert cli.config_of(parse_cli(["--preset", "paper"])).methods[-1] == "auto_k"


def test_grid_regret_and_failed_baselines_on_hand_made_records():
    """The (lr, K) grid's best point and a baseline that fails a counted attack: the
    counted attacks stay those of the original comparison, the baseline scores ∞."""
    table = {**TABLE, "radazo:k=1,lr_scale=2.0": [40, 50, None, 100],
             "radazo:k=4,lr_scale=0.25": [10, None, 10, 10],  # fails a counted attack
             "tuning_free": [100, None, 100, 100]}
    out = results.anytime_regret(by_method(table))
    assert out["common_attacks"] == 3 and out["excluded"] == [[1, 303]]  # as without them
    assert out["best_fixed"] == "zoar"
    assert out["best_grid"] == "radazo:k=1,lr_scale=2.0"  # 190 / 3 on the counted attacks
    assert out["grid_failed"] == ["radazo:k=4,lr_scale=0.25"]
    assert np.isnan(out["grid"]["radazo:k=4,lr_scale=0.25"]["mean"])
    m = out["methods"]
    assert m["zoaq"]["grid_regret"] == pytest.approx(700 / 190)
    assert m["auto_k"]["grid_regret"] == pytest.approx(250 / 190)
    assert m["tuning_free"]["regret"] == float("inf") and np.isnan(m["tuning_free"]["mean"])
    assert m["tuning_free"]["per_attack_regret"] == [1.0, float("inf"), 0.5]
    lines = "\n".join(report._anytime_tables(out))
    assert "| x2 | **63 (75%)** |" in lines and "| x0.25 | — | — | — (75%) |" in lines
    assert ("| tuning_free | `tuning_free` | 75% | — | 1.00 | ∞ | 1.00 | ∞ | ∞ | ∞ |"
            in lines)


def test_grid_and_baseline_specs_build_and_label():
    assert len(methods.GRID) == 25 and set(methods.FIXED_K[:3]) < set(methods.GRID)
    assert methods.label("radazo:k=8,lr_scale=0.5") == "R-AdaZO K=8, lr x0.5"
    assert methods.label("radazo:backbone=dowg,k=1") == "R-AdaZO K=1 (DoWG)"
    assert methods.label("tuning_free:budget") == "tuning_free, told the budget"
    assert methods.base_of(methods.parse("tuning_free")) == "tuning_free"
    # told the budget: the cosine decays over TOLD_BUDGET queries at K + 1 calls a step
    opt = methods.build(methods.parse("radazo:k=1,schedule=cosine"), "mnist", jax.random.key(0))
    assert opt is not None and methods.TOLD_BUDGET == 10_000
    x, state = run_steps("tuning_free", 3)
    assert bool(jnp.all(jnp.isfinite(x))) and int(optax.tree.get(state, "num_queries")) == 6
