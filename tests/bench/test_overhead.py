"""The speed benchmark (``python -m benchmarks overhead``): its GPU preset's code path on
CPU at smoke sizes, its accounting, its errors, and the eager evaluation it measures.

No timings are asserted: speed is reported as ratios measured in one run.
"""

from __future__ import annotations

import functools
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import zoaq_jax
from benchmarks import pages
from benchmarks.__main__ import main as bench_main
from benchmarks.common import read_json
from benchmarks.overhead import measure


def test_gpu_preset_runs_on_cpu_at_smoke_sizes(tmp_path):
    out = tmp_path / "res"
    argv = ["overhead", "--preset", "gpu", "--methods", "statzo+vectorized", "open_es",
            "torch_loop", "--dims", "8", "--dims-calls", "40", "--lanes", "3", "--seeds", "7,9",
            "--compare-calls", "40",
            "--seeds-calls", "40", "--repeats", "1", "--no-pin", "--out", str(out),
            "--report", str(out / "overhead_gpu.md")]
    assert bench_main(argv) == 0
    record = read_json(out / "overhead_gpu.json.xz")
    assert record["preset"]["name"] == "gpu" and "--preset gpu" in record["command"]
    assert record["record"]["command"] == record["command"]  # the harness's run record
    sections = record["sections"]
    compare = {r["method"]: r for r in sections["compare"]}
    assert set(compare) == {"statzo+vectorized", "open_es", "torch_loop"}
    assert record["preset"]["compare_seeds"] == [7, 9] and compare["open_es"]["seeds"] == 2
    assert compare["open_es"]["useful_calls"] == 40 * compare["open_es"]["seeds"]
    assert compare["open_es"]["lane_use"] == 1.0
    assert all(r["useful_calls"] >= 40 * r["seeds"] for r in sections["compare"])
    assert compare["torch_loop"]["useful_calls"] == 40 * 2  # two seeds, one after the other
    assert [r["seeds"] for r in sections["seeds"]] == [3, 3]  # the loop is not in the sweep
    assert {r["d"] for r in sections["dims"]} == {8}
    for r in sections["compare"] + sections["dims"] + sections["seeds"]:
        assert 0.0 < r["lane_use"] <= 1.0 and r["calls_per_second"] > 0
        assert r["state_bytes_per_seed"] > 0
    report = (out / "overhead_gpu.md").read_text()
    assert "calls/s vs Open_ES" in report and "lane use" in report
    assert "d = 100, 2 vmapped seeds" in report
    assert "StatZO K∈[1,10], vectorized: " in report and "the PyTorch loop's calls/s" in report
    assert (out / "overhead_gpu" / "seeds.png").exists()
    # --render rebuilds the generated block from the JSON alone, keeping hand-written text
    path = out / "overhead_gpu.md"
    path.write_text(report + "\nHand-written note.\n")
    assert bench_main(["overhead", "--render", str(out / "overhead_gpu.json.xz"),
                       "--report", str(path)]) == 0
    assert path.read_text() == report + "\nHand-written note.\n"


def test_torch_loop_steps_as_zo_adamm():
    """The PyTorch baseline's steps (k = 2, three of them) are the library's ZO-AdaMM update
    of the same directions' estimate ``mean_i r_i u_i``; other moment decays, Adam's bias
    correction or other directions would move them by far more than the tolerance (a
    constant scale of the estimate would not: ZO-AdaMM's update is invariant to it)."""
    torch = pytest.importorskip("torch")
    from benchmarks.methods import SYNTHETIC_HYPER as h
    from benchmarks.overhead import torch_loop

    d, k, steps = 6, 2, 3
    x, calls, made = torch_loop.run(d=d, seed=3, calls=2 * k * steps, k=k)
    generator = torch.Generator().manual_seed(3)  # the loop's draws, in its order
    y = torch.randn(d, generator=generator).numpy()
    tx = optax.chain(zoaq_jax.scale_by_zo_adamm(b1=h.b1, b2=h.b2, eps=h.eps),
                     optax.scale(-h.lr))
    state = tx.init(jnp.asarray(y))
    for _ in range(steps):
        u = np.stack([torch.randn(d, generator=generator).numpy() for _ in range(k)])
        r = (0.5 * np.sum((y + h.mu * u) ** 2, 1) - 0.5 * np.sum((y - h.mu * u) ** 2, 1)) / (
            2 * h.mu)
        update, state = tx.update(jnp.asarray(np.mean(r[:, None] * u, 0)), state)
        y = y + np.asarray(update)
    assert (calls, made) == (2 * k * steps, steps)
    np.testing.assert_allclose(x, y, rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="at least one step"):
        torch_loop.run(d=d, seed=3, calls=2 * k - 1, k=k)


def test_fixed_method_accounting_is_exact():
    case = measure.Case("radazo", 4, 3, 60)
    case.time_once()
    r = case.record()
    assert r["useful_calls"] == 3 * 60 and r["steps"] == 3 and r["lane_use"] == 1.0


def test_one_seed_runs_unbatched_and_more_are_vmapped():
    def fn(x, t):
        return {"sum": jnp.sum(x) + t, "x": 2 * x}

    x = jnp.arange(6.0).reshape(2, 3)
    one = measure.over_lanes(fn, 1, (0, None))(x[:1], 1.0)
    assert jax.tree.map(jnp.shape, one) == {"sum": (1,), "x": (1, 3)}
    np.testing.assert_array_equal(one["x"][0], fn(x[0], 1.0)["x"])  # fn on the lane itself
    both = measure.over_lanes(fn, 2, (0, None))(x, 1.0)
    np.testing.assert_array_equal(both["sum"], [4.0, 13.0])
    case = measure.Case("radazo", 4, 1, 60)  # the dims section's one seed
    case.time_once()
    assert case.record()["useful_calls"] == 60 and case.out["calls"].shape == (1,)


def test_timed_methods_are_specs_of_the_one_registry():
    from benchmarks.overhead.methods import timed

    assert timed("open_es").kind == "outside"
    eager = timed("zoaq+eager")
    assert (eager.name, eager.spec, eager.evaluation, eager.k_max) == (
        "zoaq+eager", "zoaq:evaluation=unrolled", "unrolled", 10)
    assert (timed("radazo:k=4").kind, timed("radazo:k=4").k_max) == ("fixed", 4)
    assert timed("zoar").kind == "adaptive"


@pytest.mark.parametrize("argv, message", [
    (["--methods", "nope"], "unknown method"),
    (["--methods", "zoaq+fast"], "unknown suffix +fast"),
    (["--methods", "radazo+eager"], "bad override 'evaluation=unrolled'"),
    (["--render", "missing.json.xz"], "--render missing.json.xz does not exist"),
])
def test_errors_are_clear(argv, message, capsys):
    with pytest.raises(SystemExit) as err:
        bench_main(["overhead", *argv])
    assert message in str(err.value) + capsys.readouterr().err


def _on_radazo(estimator):
    return zoaq_jax.chain(estimator, zoaq_jax.scale_by_radazo(), optax.scale_by_learning_rate(1e-2))


MAKERS = {
    "zoaq": lambda key, evaluation: _on_radazo(zoaq_jax.zoaq_estimator(
        1, 4, retention=zoaq_jax.retention.fifo(3), evaluation=evaluation, key=key)),
    "statzo-remainder": lambda key, evaluation: _on_radazo(zoaq_jax.statzo_estimator(
        2, 7, k_step=2, evaluation=evaluation, key=key)),
}


@functools.cache
def _run(name, evaluation, seeds=(0, 1, 2), steps=6, d=5):
    """Per-seed trajectories (vmapped) of ``MAKERS[name]`` on a quartic."""
    make = MAKERS[name]

    def one(seed):
        opt = make(jax.random.fold_in(jax.random.key(0), seed), evaluation)
        x = jnp.linspace(-1.0, 1.0, d) + seed

        def body(carry, _):
            x, s = carry
            u, s = opt.update(None, s, x, value_fn=lambda y: jnp.sum(y**2 * (1 + y**2)))
            return (optax.apply_updates(x, u), s), optax.tree.get(s, "last_k")

        (x, s), ks = jax.lax.scan(body, (x, opt.init(x)), None, length=steps)
        return x, ks, optax.tree.get(s, "num_queries")

    return jax.tree.map(np.asarray, jax.jit(jax.vmap(one))(jnp.asarray(seeds)))


@pytest.mark.parametrize("name", sorted(MAKERS))
@pytest.mark.parametrize("mode", ["unrolled", "vectorized"])
def test_eager_evaluation_buys_what_the_loop_buys(name, mode):
    """Same accepted K and query counts as the lazy loop; estimates equal up to the
    rounding of evaluating the objective in one batch of k_max rather than chunk by chunk
    (and, vectorized, of cumulative sums)."""
    x_lazy, k_lazy, q_lazy = _run(name, "loop")
    x_eager, k_eager, q_eager = _run(name, mode)
    np.testing.assert_array_equal(k_eager, k_lazy)
    np.testing.assert_array_equal(q_eager, q_lazy)
    np.testing.assert_allclose(x_eager, x_lazy, rtol=1e-5, atol=1e-6)
    assert len(set(k_lazy.ravel().tolist())) > 1  # the test exercises expansion


def test_evaluation_is_an_explicit_static_choice():
    """The strategy is the estimator's argument: only ``"loop"`` compiles the expansion's
    while loop (the others have just the random-number generator's loops), so no global
    state can switch a step that is already traced."""
    x = jnp.ones(5)

    def loops(evaluation):
        est = zoaq_jax.zoaq_estimator(k_max=4, retention=zoaq_jax.retention.fifo(0),
                                      evaluation=evaluation, key=0)
        step = jax.jit(lambda s: est.update(None, s, x, value_fn=jnp.sum))
        return step.lower(est.init(x)).as_text().count("stablehlo.while")

    unrolled = loops("unrolled")
    assert loops("loop") == unrolled + 1
    assert loops("vectorized") == unrolled


def test_unknown_evaluation_is_refused():
    with pytest.raises(ValueError, match="evaluation"):
        zoaq_jax.zoaq_estimator(evaluation="eager")


def test_devices_command_imports_jax_after_setting_its_device_count():
    """``python -m benchmarks devices`` asks for fake CPU devices before JAX starts (this
    suite's conftest sets them itself, so only a fresh process shows it)."""
    code = "import sys, benchmarks.overhead.devices; assert 'jax' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_devices_command_runs_and_renders(tmp_path):
    """``python -m benchmarks devices`` on two of the fake CPU devices at a smoke size."""
    argv = ["devices", "--preset", "smoke", "--devices", "2", "--out", str(tmp_path),
            "--quiet"]
    assert bench_main(argv) == 0
    record = read_json(tmp_path / "devices.json.xz")
    assert [(r["devices"], r["combine"]) for r in record["rows"]] == [
        (1, "none (no mesh)"), (2, "psum"), (2, "gather")]
    page = (tmp_path / "devices.md").read_text()
    assert "| devices | combine | calls/s, d = 8 | time vs no mesh, d = 8 |" in page
    assert "| 2 | psum | " in page and pages.opening_problems(page) == []
    with pytest.raises(SystemExit):
        bench_main(["devices", "--devices", "3", "--k", "2", "--out", str(tmp_path)])


def test_compile_section_measures_ratios_and_checks_a_previous_run(tmp_path):
    """The compile section at one cheap program and the two references: every round's
    CPU time kept, ratios to both references and shares of a round, the default XLA flags
    recorded; a re-render against the same record reports a 0% spread between the runs."""
    out = tmp_path / "res"
    argv = ["overhead", "--preset", "smoke", "--sections", "compile", "--compile-methods",
            "zo_sgd", "adam", "open_es", "--dims", "8", "--repeats", "2", "--out", str(out),
            "--report", str(out / "compile.md")]
    assert bench_main(argv) == 0
    section = read_json(out / "compile.json.xz")["sections"]["compile"]
    rows = {r["method"]: r for r in section["rows"]}
    assert set(rows) == {"zo_sgd", "adam", "open_es"} and len(section["loads"]) == 2
    for r in rows.values():
        assert len(r["seconds_all"]) == 2 and r["seconds"] == min(r["seconds_all"]) > 0
        assert len(r["cpu_seconds_all"]) == 2 and r["cpu_seconds"] == min(r["cpu_seconds_all"])
        assert r["cpu_seconds"] > 0 and r["fusions"] > 0
    assert rows["zo_sgd"]["whiles"] > 0  # threefry's rolled loops
    assert bench_main(["overhead", "--render", str(out / "compile.json.xz"), "--report",
                       str(out / "compile.md"), "--previous", str(out / "compile.json.xz")]) == 0
    page = (out / "compile.md").read_text()
    assert "÷ adam (previous run)" in page and "share of round (previous run)" in page
    assert page.count("differ by at most 0.0% (goal ≤ 10%: met)") == 3  # adam, open_es, round
    assert "zo_sgd, d = 8: " in page and "median of 2 rounds" in page


def test_compile_ratios_are_paired_within_a_round_and_targets_use_the_median():
    """Synthetic rounds: the second round is fast for the references only, the third slow
    for every program alike. Every ratio is the median over rounds of the ratio within a
    round (zoaq: 2 to open_es and 16 to adam, where the ratios of the minima would be
    2 / 0.75 and 2 / 0.0625); a
    share is of the round's total at that d; a target is judged on the median (zo_sgd's
    1.0 s minimum is one lucky round: 1.625 s, not met)."""
    from benchmarks.overhead import compile as c
    from benchmarks.overhead import report

    def row(method, *rounds):
        return {"method": method, "d": 8, "seconds_all": list(rounds),
                "cpu_seconds_all": list(rounds), "cpu_seconds": min(rounds)}

    section = {"rows": [row("zoaq", 2.0, 2.0, 4.0), row("zo_sgd", 1.0, 1.625, 2.0),
                        row("adam", 0.125, 0.0625, 0.25), row("open_es", 1.0, 0.75, 2.0)],
               "rounds": 3, "loads": [1.0] * 3, "xla_flags": "", "persistent_cache": None}
    ratios = c.ratios(section)
    assert ratios["zoaq", 8, "adam"] == 16.0 and ratios["zoaq", 8, "open_es"] == 2.0
    assert ratios["zo_sgd", 8, "open_es"] == 1.0 and ("adam", 8, "adam") not in ratios
    assert ratios["zoaq", 8, c.ROUND] == 2.0 / 4.125  # rounds' totals 4.125, 4.4375, 8.25
    assert c.median_cpu(section["rows"][1]) == 1.625
    page = "\n".join(report.compile_latency({"compile": section}, {}))
    assert "zoaq, d = 8: 2.00 CPU s, median of 3 rounds (target ≤ 2.0 s on an idle core): " \
           "met" in page
    assert "zo_sgd, d = 8: 1.62 CPU s, median of 3 rounds (target ≤ 1.5 s on an idle core): " \
           "not met" in page
    old = {"rows": [{k: v for k, v in r.items() if k != "cpu_seconds_all"}
                    for r in section["rows"]]}
    assert c.ratios(old) == ratios  # a record without CPU rounds: each round's wall time
