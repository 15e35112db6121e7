"""The baseline sections of the LLM page: resolved differences and target checks."""

from benchmarks.llm import tables


def _run(method, seed, accs, test):
    curve = [{"fe": 10 * i, "dev_loss": 1.0 - a, "dev_accuracy": a} for i, a in enumerate(accs)]
    return {"method": method, "label": method.upper(), "seed": seed, "curve": curve,
            "accuracy": test, "dev_accuracy": max(accs), "total_fe": 20}


def _payload():
    results = [_run("a", 0, [0.5, 0.8, 0.9], 0.86), _run("a", 1, [0.5, 0.8, 0.9], 0.88),
               _run("b", 0, [0.5, 0.6, 0.7], 0.80), _run("b", 1, [0.5, 0.7, 0.9], 0.82)]
    return {"config": {"budget": 20, "eval_every_fe": 10, "prompt": "review"},
            "zero_shot": {"accuracy": 0.79}, "results": results}


def test_resolved_means_a_gap_beyond_the_summed_spreads():
    assert tables.resolved((0.9, 0.0), (0.8, 0.05))
    assert not tables.resolved((0.9, 0.05), (0.8, 0.05))
    assert not tables.resolved((0.9, 0.0), (0.8, 0.0), seeds=1)  # no spread measured


def test_anytime_rows_bold_the_best_and_mark_resolved_gaps():
    budgets, rows = tables.anytime_rows(_payload(), "dev_accuracy", max, "{:.2f}")
    assert budgets == [10, 20]
    a, b = rows
    assert a[1] == "**0.80 ± 0.00**" and b[1] == "0.65 ± 0.05 †"  # 0.15 > 0 + 0.05
    assert a[2] == "**0.90 ± 0.00**" and b[2] == "0.80 ± 0.10"  # 0.10 = spread: unresolved


def test_target_lines_report_met_and_shortfall():
    text = "\n".join(tables.target_lines(_payload()))
    assert "best >= 0.84: **met**" in text and "zero-shot + 0.05 = 0.840: **met**" in text
    assert "B: 0.810 ± 0.010, gain over zero-shot +0.020 > seed spread 0.010: **met**" in text
