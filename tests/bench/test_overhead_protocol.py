"""The speed benchmark's timing protocol (:mod:`benchmarks.overhead.protocol`): round order,
clocks, the ratio differences between two runs, and the pages that show both runs."""

from __future__ import annotations

import time

import pytest

from benchmarks.overhead import protocol, report


def test_rounds_rotate_the_order_and_record_the_load():
    seen, loads = [], []
    protocol.interleaved(["a", "b", "c"], 4, seen.append, loads, desc=None)
    assert seen == ["a", "b", "c", "b", "c", "a", "c", "a", "b", "a", "b", "c"]
    assert len(loads) == 4  # one load average before each round
    assert protocol.rotation(3, 5) == [2, 0, 1]


def test_cpu_time_leaves_out_waits():
    """A sleep is wall time the process does not spend on a core."""
    out, wall, cpu = protocol.timed(lambda: time.sleep(0.05) or 7)
    assert out == 7 and wall >= 0.05 and cpu < 0.02
    assert (protocol.basis(True), protocol.basis(False)) == ("cpu", "wall")


def test_ratio_differences_are_relative_and_skip_unshared_ratios():
    now = {"a": 1.10, "b": 0.40, "only_now": 3.0}
    before = {"a": 1.00, "b": 0.50, "only_before": 1.0}
    diff = protocol.ratio_differences(now, before)
    assert set(diff) == {"a", "b"}
    assert diff["a"] == pytest.approx(0.10) and diff["b"] == pytest.approx(0.20)  # a fall too
    line = protocol.repeatability(diff)
    assert "2 ratios" in line and "at most 20.0% (goal ≤ 10%: not met)" in line
    assert line.endswith("the largest for b.")
    assert "(goal ≤ 10%: met)" in protocol.repeatability({"a": 0.099})


def _row(method, kind, d, seconds, calls=1000):
    return {"method": method, "label": method, "kind": kind, "d": d, "seeds": 1, "steps": 10,
            "useful_calls": calls, "calls_per_second": calls / seconds,
            "us_per_call": 1e6 * seconds / calls, "lane_use": 1.0, "final_gap": [0.0],
            "compile_seconds": 1.0, "state_bytes_per_seed": 4, "memory": {}}


def test_pages_show_both_runs_and_their_largest_difference():
    """The compare and dims sections' ratios of a run and a previous one: Open_ES at 2 s,
    R-AdaZO at 1 s then 1.25 s (calls/s ratio 2.0 then 1.6: 20% apart)."""
    runs = [[_row("radazo", "fixed", 100, t), _row("open_es", "outside", 100, 2.0)]
            for t in (1.0, 1.25)]
    now, before = (report.compare_ratios(r) for r in runs)
    assert now[("radazo", report.VS_OPEN_ES)] == pytest.approx(2.0)
    assert before[("open_es", report.VS_FIXED)] == pytest.approx(1.6)  # µs/call ratio
    assert ("radazo", report.VS_FIXED) not in now  # not against itself
    p = {"compare_dim": 100, "compare_seeds": 1, "compare_calls": 1000}
    page = "\n".join(report.compare({"compare": runs[1]}, p, {"compare": runs[0]}))
    assert "calls/s vs Open_ES (previous run)" in page
    assert "| radazo | fixed | 800 | 1250.000 | 1.60 | 2.00 |" in page
    assert "differ by at most 20.0% (goal ≤ 10%: not met)" in page
    assert "(previous run)" not in "\n".join(report.compare({"compare": runs[1]}, p))
    # ZoAQ at 4 s then 6 s: against Open_ES 0.5 then 1/3 (33.3% apart), the largest
    runs = [r + [_row("zoaq", "adaptive", 100, t)] for r, t in zip(runs, (4.0, 6.0))]
    assert report.dims_ratios(runs[0])[(100, "zoaq", report.VS_FIXED)] == 4.0
    dims = "\n".join(report.dims({"dims": runs[1]}, p, {"dims": runs[0]}))
    assert "| 100 | zoaq | 10 | 6,000.000 | 4.80 | 4.00 | 0.33 | 0.50 |" in dims
    assert "4 ratios" in dims and "33.3% (goal ≤ 10%: not met), the largest for zoaq at d = 100, " \
        "calls/s vs Open_ES." in dims


def test_the_least_busy_core_is_chosen(tmp_path, monkeypatch):
    """Busy shares from two readings of the kernel's counters (user nice system idle
    iowait ...): core 0 busy 90 of 100 ticks, core 1 busy 20 of 100 (iowait is not busy)."""
    stat = tmp_path / "stat"
    readings = iter(["cpu0 0 0 0 0 0 0\ncpu1 0 0 0 0 0 0\n",
                     "cpu0 50 40 0 10 0 0\ncpu1 10 0 10 70 10 0\n"])
    stat.write_text(next(readings))
    monkeypatch.setattr(protocol.time, "sleep", lambda s: stat.write_text(next(readings)))
    shares = protocol.busy_shares([0, 1], stat=str(stat))
    assert shares == pytest.approx({0: 0.9, 1: 0.2})
    assert protocol.idlest_core([0, 1], shares) == 1
    assert protocol.idlest_core([0, 1], {}) == 0
    assert protocol.busy_shares([0], stat=str(tmp_path / "missing")) == {}


def test_round_ratio_pairs_the_programs_of_a_round():
    """A machine 40% slower in rounds 2 and 3: a program at 1.25x its reference in every
    round has its ratio 1.25 paired, and so does one caught by the slow phase in round 1
    too (median), where the ratio of the two minima says 1.75."""
    ref = [1.0, 1.4, 1.4]
    prog = [1.25 * 1.4, 1.25 * 1.4, 1.25 * 1.4]  # slow throughout
    prog_paired = [1.25, 1.25 * 1.4, 1.25 * 1.4]
    assert protocol.round_ratio(prog_paired, ref) == pytest.approx(1.25)
    assert min(prog) / min(ref) == pytest.approx(1.75)
    assert protocol.round_ratio(prog, ref) == pytest.approx(1.25)  # median of 1.75, 1.25, 1.25
    assert protocol.round_ratio([2.0], [1.0, 1.0]) == 2.0  # rounds missing: the minima
    with pytest.raises(ValueError, match="at least one round"):
        protocol.round_ratio([], [1.0])


def test_paired_ratios_use_the_rounds_of_the_records_clock():
    """Records on the CPU clock with their rounds: R-AdaZO at 1.0, 1.4, 1.4 CPU s and Open_ES
    at 2.0, 2.8, 2.8 (the machine slower in rounds 2 and 3) are 2x paired; the ratio of the
    minima agrees here, and differs once Open_ES's fast round is lost (2.8 s throughout)."""
    def row(method, cpu):
        r = _row(method, "fixed", 100, min(cpu))
        r.update(clock="cpu", cpu_seconds_all=cpu, run_seconds_all=[9.9] * len(cpu))
        return r
    radazo, open_es = row("radazo", [1.0, 1.4, 1.4]), row("open_es", [2.0, 2.8, 2.8])
    assert report.rate_ratio(radazo, open_es, paired=True) == pytest.approx(2.0)
    slow = row("open_es", [2.8, 2.8, 2.8])
    assert report.rate_ratio(radazo, slow) == pytest.approx(2.8)  # minima: 2.8 / 1.0
    assert report.rate_ratio(radazo, slow, paired=True) == pytest.approx(2.0)  # median of 2.8, 2, 2
    wall = dict(radazo, clock="wall")  # the wall clock's rounds (all 9.9 s): ratio 1
    assert report.rate_ratio(wall, dict(slow, clock="wall"), paired=True) == pytest.approx(1.0)


def test_the_process_pins_itself_before_jax_starts_its_backend():
    """Threads keep the affinity they were made with: JAX's backend (XLA's compiler and
    intra-op threads) must start after the pinning, or "one pinned core" holds only for
    the main thread (the compile page's CPU time once exceeded its wall time)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    code = """
import jax._src.xla_bridge as xb
from benchmarks import pool, presets
from benchmarks.overhead import cli, config
seen = []
def pin(cores):
    seen.append(xb.backends_are_initialized())
    raise SystemExit(0 if seen == [False] else 3)
pool.pin_to_cores = pin
cli.run(presets.override(config.PRESETS["smoke"], pin=True))
raise SystemExit(4)  # never pinned
"""
    root = Path(__file__).resolve().parents[2]  # this checkout's benchmarks and zoaq_jax
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=root, env={**os.environ, "PYTHONPATH": str(root)})
    assert done.returncode == 0, done.stderr[-2000:]
