"""Training: FE counted exactly, the loop's records, the smoke preset end to end, CLI errors."""

import dataclasses
from collections import Counter
from pathlib import Path

import jax
import pytest
from llm_helpers import tiny_bundle

from benchmarks.common import read_json
from benchmarks.llm import cli, config, methods, train
from benchmarks.llm.models import lora


@pytest.mark.parametrize(
    "name", ["mezo", "statzo", "statzo_norm", "zoaq", "radazo:k=1", "radazo:k=2", "auto_k"]
)
def test_fe_are_counted_exactly(name):
    """num_queries equals the forward passes actually executed, counted by a callback,
    and the chunks the timing reproduces add up to the same FE (2 K_t, or K_t + 1)."""
    bundle = tiny_bundle()
    calls = Counter()
    inner = bundle.loss

    def counted(lora_params, base, batch):
        value = inner(lora_params, base, batch)
        jax.debug.callback(lambda v: calls.update(["fe"]), value)
        return value

    method = methods.REGISTRY.parse(name)
    opt = methods.build(method, 1e-2, 1e-2, 0)
    adapters = lora.init_adapters(bundle.lora, 0)
    state = opt.init(adapters)
    step = train.make_step(opt, counted)
    ks, fe = [], 0
    for batch in list(zip(range(6), train.batches(bundle.train, 4, 0))):
        adapters, state, fe, k = step(adapters, state, bundle.base, batch[1])
        jax.effects_barrier()
        ks.append(int(k))
    per_step = [(k + 1) if name == "statzo" else 2 * k for k in ks]
    assert int(fe) == sum(per_step) == calls["fe"]
    assert all(method.k_min <= k <= method.k_max for k in ks)
    assert [sum(n for n, _ in methods.chunks(method, k)) for k in ks] == per_step


def test_run_records_curve_best_checkpoint_and_timing():
    bundle = tiny_bundle("copa")
    cfg = dataclasses.replace(config.SMOKE, steps=4, eval_every=2, batch_size=4,
                              eval_batch_size=8, probe_every=2, timing_reps=1)
    r = train.run(methods.REGISTRY.parse("zoaq:k_max=2"), 0, bundle, cfg)
    assert [c["step"] for c in r["curve"]] == [0, 2, 4]
    assert (
        r["total_fe"] == r["curve"][-1]["fe"] == sum(2 * int(k) * n for k, n in r["k_hist"].items())
    )
    assert r["best_eval_loss"] == min(c["dev_loss"] for c in r["curve"])
    assert 0 <= r["accuracy"] <= 1 and 0 <= r["dev_accuracy"] <= 1
    t = r["timing"]
    assert t["fe_per_s"] > 0 and set(t["forward_call_s"]) == {"2"}
    assert t["overhead_share"] == pytest.approx(1 - t["forward_s_estimate"] / t["step_s_total"])


def test_smoke_preset_end_to_end(tmp_path, capsys):
    parser = __import__("argparse").ArgumentParser()
    cli.add_arguments(parser)
    out, report = tmp_path / "out", tmp_path / "docs" / "llm.md"
    args = parser.parse_args(
        [
            "--preset",
            "smoke",
            "--methods",
            "radazo",
            "zoaq",
            "--steps",
            "4",
            "--eval-every",
            "2",
            "--out",
            str(out),
            "--report",
            str(report),
            "--quiet",
        ]
    )
    assert cli.main(args) == 0
    payload = read_json(out / "llm.json.xz")
    assert [r["method"] for r in payload["results"]] == ["radazo", "zoaq"]
    command = payload["record"]["command"]
    assert command.startswith("python -m benchmarks llm --preset smoke --methods radazo zoaq ")
    assert "--steps 4 --eval-every 2" in command
    # the page's JSON lies beside it
    assert read_json(report.parent / "llm" / "llm.json.xz") == payload
    for r in payload["results"]:
        assert {"total_fe", "best_eval_loss", "accuracy", "dev_accuracy", "curve"} <= set(r)
        assert len(r["curve"]) == 3
    assert payload["results"][0]["total_fe"] == 4 * 8
    assert (out / "llm.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = report.read_text()
    assert "| R-AdaZO K=4 | 32 ± 0 |" in text and "ZoAQ K∈[1,4]" in text
    assert "21714 ± 318" in text  # the paper's table alongside
    figure = report.parent / "llm" / "llm_smoke_sst2.png"
    assert figure.read_bytes()[:4] == b"\x89PNG" and "(llm/llm_smoke_sst2.png)" in text
    # --render rewrites the page from the JSON alone (its figure named after the page),
    # replacing a stale generated block and keeping the hand-written text around it.
    again = tmp_path / "again.md"
    stale = text.replace("| R-AdaZO K=4 | 32 ± 0 |", "| R-AdaZO K=4 | stale |")
    assert stale != text
    notes = "\n## Notes\n\nkeep me\n"
    again.write_text("intro\n" + stale + notes)
    before = {p: p.stat().st_mtime_ns for p in out.iterdir()}
    args = parser.parse_args(["--render", str(out / "llm.json.xz"), "--report", str(again)])
    assert cli.main(args) == 0 and again.read_text() == "intro\n" + text.replace(
        "(llm/llm_smoke_sst2.png)", "(llm/again_smoke_sst2.png)"
    ) + notes
    # without --out, rendering leaves the run's folder alone
    assert {p: p.stat().st_mtime_ns for p in out.iterdir()} == before


def test_default_report_is_in_out_not_in_docs():
    parser = __import__("argparse").ArgumentParser()
    cli.add_arguments(parser)
    args = parser.parse_args(["--preset", "cpu"])
    assert cli._report_path(args, Path("out/llm-cpu/llm.md")) == Path("out/llm-cpu/llm.md")
    args = parser.parse_args(["--preset", "cpu", "--report", "none"])
    assert cli._report_path(args, Path("out/llm-cpu/llm.md")) is None


@pytest.mark.parametrize("argv", [["--steps", "0"], ["--batch-size", "-2"], ["--n-dev", "x"]])
def test_cli_rejects_counts_below_one(argv, capsys):
    parser = __import__("argparse").ArgumentParser()
    cli.add_arguments(parser)
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args(argv)
    assert exit_info.value.code == 2
    assert "expected an integer >= 1" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--model", "gpt5"], "Unknown model 'gpt5'"),
        (["--methods", "adam"], "unknown method 'adam'"),
        (["--model", "opt:/does/not/exist"], "does not exist"),
        (["--model", "gguf:/does/not/exist.gguf"], "does not exist"),
        (["--preset", "cpu", "--task", "copa"], "COPA has no embedded data"),
        (["--max-length", "3"], "longer than max_length=3"),
        (["--seeds", "0-x"], "--seeds takes integers"),
    ],
)
def test_cli_reports_bad_input(argv, message, tmp_path):
    parser = __import__("argparse").ArgumentParser()
    cli.add_arguments(parser)
    args = parser.parse_args(["--preset", "smoke", "--out", str(tmp_path), "--quiet"] + argv)
    with pytest.raises(SystemExit) as exit_info:
        cli.main(args)
    assert str(exit_info.value.code).startswith("error: ")
    assert message in str(exit_info.value.code)


def test_fe_to_matched_loss_interpolates_the_reference_curve():
    from benchmarks.llm.experiment import fe_to_reach

    curve = [{"fe": 0, "dev_loss": 1.0}, {"fe": 100, "dev_loss": 0.8}, {"fe": 200, "dev_loss": 0.7}]
    assert fe_to_reach(curve, 0.9) == pytest.approx(50.0)
    assert fe_to_reach(curve, 0.75) == pytest.approx(150.0)
    assert fe_to_reach(curve, 1.0) == 0.0
    assert fe_to_reach(curve, 0.5) is None
