"""The attack CLI end to end on a tiny generated MNIST, and its input errors."""

import json
import os

import numpy as np
import pytest
from test_attack_data import write_mnist_idx

from benchmarks.__main__ import main as benchmarks_main
from benchmarks.attack import data, protocol, train
from benchmarks.common import read_json, sha256, write_json


@pytest.fixture
def tiny_mnist(tmp_path, monkeypatch):
    monkeypatch.setenv("ZOAQ_JAX_CACHE", str(tmp_path / "cache"))
    write_mnist_idx(tmp_path / "mnist", n_train=64, n_test=4)
    return tmp_path


def test_cli_end_to_end_writes_json_png_markdown(tiny_mnist):
    out = tiny_mnist / "out"
    argv = ["attack", "--dataset", "mnist", "--data", str(tiny_mnist / "mnist"),
            "--protocol", "paper", "--goal", "targeted", "--methods", "zoaq",
            "--seeds", "1", "2", "--steps", "15", "--epochs", "1", "--workers", "1",
            "--trace-len", "10", "--out", str(out)]
    assert benchmarks_main(argv) == 0

    results = read_json(out / "attack.json.xz")
    records = results["results"]
    assert len(records) == 2  # seeds x one image x one method
    for r in records:
        assert {"method", "image", "seed", "success", "num_queries", "goal"} <= set(r)
        assert r["image"] == protocol.PAPER_IMAGE and r["goal"] == "targeted"
        # forward differences: at most 1 + K calls per iteration, 1 at a successful one
        k_max = 2
        assert r["steps"] <= r["num_queries"] <= (1 + k_max) * r["steps"]
        assert r["success"] or r["steps"] == 15
    run = results["runs"][0]
    assert set(run["methods"]) == {"zoaq"} and run["model"]["num_test"] == 4
    assert run["record"]["command"].startswith("python -m benchmarks attack --dataset mnist")
    assert run["record"]["wall_s"] > 0 and run["record"]["machine"]["cores"] >= 1
    for name in ("queries", "examples", "consistency"):
        png = out / f"{name}_mnist_paper_targeted.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = (out / "attack.md").read_text()
    assert "| ZoAQ K∈[1,2] | `zoaq` |" in report and "--steps 15" in report
    assert "![Query distributions](queries_mnist_paper_targeted.png)" in report

    # A fixed K outside the main list (the anytime comparison) adds the regret tables,
    # computed on the merged records of both runs and saved with them.
    assert benchmarks_main([*argv[:argv.index("--methods") + 1], "auto_k", "radazo:k=1",
                            *argv[argv.index("--seeds"):]]) == 0
    merged = read_json(out / "attack.json.xz")
    [anytime] = merged["anytime"]
    assert (anytime["goal"], anytime["attacks"]) == ("targeted", 2)
    assert set(anytime["methods"]) == {"zoaq", "auto_k", "radazo:k=1"}
    queries = {m: {r["seed"]: r["num_queries"] for r in merged["results"]
                   if r["method"] == m and r["success"]} for m in anytime["methods"]}
    common = set.intersection(*(set(q) for q in queries.values()))
    assert anytime["common_attacks"] == len(common)
    if common:
        assert anytime["best_fixed"] == "radazo:k=1"
        assert anytime["methods"]["auto_k"]["regret"] == pytest.approx(
            sum(queries["auto_k"][s] for s in common)
            / sum(queries["radazo:k=1"][s] for s in common))
    text = (out / "attack.md").read_text()
    assert "| auto_k K∈[1,16] | `auto_k` |" in text and "Query regret" in text
    assert "![Adaptive and fixed budgets: success against the query budget]" \
        "(anytime_mnist_paper_targeted.png)" in text

    # Re-rendering into a report elsewhere leaves OUT's figures alone and draws its own
    # figures in a folder named like the report; every command behind a table is listed.
    before = {p: p.stat().st_mtime_ns for p in out.iterdir()}
    command = run["record"]["command"]
    results["runs"].append({**run, "record": {**run["record"], "command": command + " --chunk 7"},
                            "methods": {"radazo": run["methods"]["zoaq"]}})
    results["results"] += [{**r, "method": "radazo", "base": "radazo"} for r in records]
    write_json(out / "attack.json.xz", results)
    before[out / "attack.json.xz"] = (out / "attack.json.xz").stat().st_mtime_ns
    elsewhere = tiny_mnist / "docs" / "report.md"
    assert benchmarks_main(["attack", "--render", str(out / "attack.json.xz"), "--out", str(out),
                            "--report", str(elsewhere)]) == 0
    assert {p: p.stat().st_mtime_ns for p in out.iterdir()} == before
    assert (tiny_mnist / "docs" / "report" / "queries_mnist_paper_targeted.png").exists()
    text = elsewhere.read_text()
    assert "![Query distributions](report/queries_mnist_paper_targeted.png)" in text
    assert "../out/examples_mnist_paper_targeted.png" in text
    assert f"- `{command}`" in text and f"- `{command} --chunk 7`" in text
    # hand-written text outside the generated block survives a re-render
    elsewhere.write_text(elsewhere.read_text() + "\n## Notes\n\nkeep me\n")
    assert benchmarks_main(["attack", "--render", str(out / "attack.json.xz"), "--out", str(out),
                            "--report", str(elsewhere)]) == 0
    assert elsewhere.read_text().endswith("keep me\n") and "Query distributions" in text

    # The weights were cached with a checksum: a corrupted file is refused, not reused.
    dataset = data.load("mnist", tiny_mnist / "mnist")
    weights = next((tiny_mnist / "cache" / "models").glob("*.npz"))
    cached = train.load_or_train(dataset, train.TrainConfig(epochs=1), log=lambda m: None)
    assert cached.weights == weights
    # Trained in a process pinned to one core, so the weights do not depend on the
    # machine's core count (pinning needs sched_setaffinity, i.e. Linux).
    if hasattr(os, "sched_setaffinity"):
        assert json.loads(weights.with_suffix(".json").read_text())["train_cores"] == 1
    corrupted = bytearray(weights.read_bytes())
    corrupted[-1] ^= 0xFF
    weights.write_bytes(bytes(corrupted))
    with pytest.raises(ValueError, match="SHA-256"):
        train.load_or_train(dataset, train.TrainConfig(epochs=1), log=lambda m: None)


def test_training_shows_its_progress_as_it_goes_and_checks_published_digests(
        tiny_mnist, capfd, monkeypatch):
    dataset = data.load("mnist", tiny_mnist / "mnist")
    config = train.TrainConfig(epochs=2, batch_size=16, images=32)
    assert train.cache_key(dataset, config).endswith("-n32")  # the subset is in the key
    monkeypatch.setitem(train.PUBLISHED, train.cache_key(dataset, config), "0" * 64)
    logged = []
    trained = train.load_or_train(dataset, config, log=logged.append)
    # The pinned child writes its epoch lines and bar on stderr itself, while it trains
    # (they used to be collected and handed back at the end).
    err = capfd.readouterr().err
    assert "epoch 1/2: train loss" in err and "epoch 2/2: train loss" in err
    assert "training (2 steps an epoch)" in err
    assert not any(line.startswith("epoch") for line in logged)
    assert logged[-1] == (f"warning: these weights (SHA-256 {trained.sha256[:12]}…) are not the "
                          "published model's (000000000000…): attack results will differ from "
                          "docs/results/attack.md, whose paper-protocol ranking depends on the "
                          "model")
    monkeypatch.setitem(train.PUBLISHED, train.cache_key(dataset, config), trained.sha256)
    logged.clear()
    assert train.load_or_train(dataset, config, log=logged.append).sha256 == trained.sha256
    assert len(logged) == 1 and logged[0].startswith("loaded ")  # cached, and no warning

def test_the_published_model_is_committed_and_loaded_without_training(tiny_mnist, monkeypatch):
    [(key, published)] = train.PUBLISHED.items()
    committed = train.COMMITTED / f"{key}.npz"
    assert sha256(committed) == published
    assert json.loads(committed.with_suffix(".json").read_text())["sha256"] == published

    class Trained(Exception):
        pass

    def pinned_call(*args):
        raise Trained
    # The tiny dataset under the published key: the same model, so the committed file loads.
    monkeypatch.setattr(train, "cache_key", lambda *args: key)
    monkeypatch.setattr(train.pool, "pinned_call", pinned_call)
    dataset = data.load("mnist", tiny_mnist / "mnist")
    logged = []
    trained = train.load_or_train(dataset, log=logged.append)
    assert (trained.weights, trained.sha256, trained.test_accuracy) == (committed, published, 0.977)
    assert logged == [f"loaded committed {committed.name} (SHA-256 {published[:12]}…, "
                      "test accuracy 0.9770)"]
    with np.load(committed) as stored:
        params = train._flat_params(trained.model)
        assert all(np.array_equal(stored[k], params[k]) for k in stored.files)
    with pytest.raises(Trained):  # --retrain trains again, whatever is committed
        train.load_or_train(dataset, retrain=True, log=logged.append)

    # A damaged committed file is an error naming the published digest, never retrained.
    damaged = tiny_mnist / "weights"
    damaged.mkdir()
    monkeypatch.setattr(train, "COMMITTED", damaged)
    data_bytes = bytearray(committed.read_bytes())
    data_bytes[-1] ^= 0xFF
    (damaged / committed.name).write_bytes(bytes(data_bytes))
    meta = committed.with_suffix(".json")
    (damaged / meta.name).write_bytes(meta.read_bytes())
    with pytest.raises(ValueError, match=f"Committed weights .* not the published {published}"):
        train.load_or_train(dataset, log=logged.append)


@pytest.mark.parametrize("args, message", [
    (["--methods", "zoaq", "adam"], "error: unknown method 'adam'"),
    (["--methods", "zoaq:n_hits=4"], "error: bad override 'n_hits=4'"),
    (["--seeds", "5-1"], "error: empty range '5-1' in --seeds"),
    (["--data", "/nonexistent/mnist"], "error: --data /nonexistent/mnist does not exist"),
    (["--render", "/nonexistent/attack.json.xz"], "error: --render .* does not exist"),
])
def test_cli_rejects_bad_input_before_any_work(args, message, tmp_path, monkeypatch):
    from benchmarks.attack import experiment

    monkeypatch.setattr(experiment, "prepare", lambda *a, **k: pytest.fail("loaded data"))
    with pytest.raises(SystemExit, match=message):
        benchmarks_main(["attack", "--out", str(tmp_path), *args])
    assert not any(tmp_path.iterdir())


def test_cli_refuses_a_results_file_of_an_older_schema_before_any_work(tmp_path, monkeypatch):
    from benchmarks.attack import experiment

    monkeypatch.setattr(experiment, "prepare", lambda *a, **k: pytest.fail("loaded data"))
    old = tmp_path / "attack.json.xz"
    write_json(old, {"records": [], "runs": []})  # the schema before "results"
    for option in ("--out", "--render"):  # merged into by a run; re-rendered
        with pytest.raises(SystemExit, match=f"error: {option} .* has no 'results'"):
            benchmarks_main(["attack", "--preset", "smoke", "--out", str(tmp_path),
                             *(["--render", str(old)] if option == "--render" else [])])


def test_presets_are_dataclasses_with_overrides():
    import argparse

    from benchmarks.attack import cli as attack_cli

    parser = argparse.ArgumentParser()
    attack_cli.add_arguments(parser)
    assert parser.parse_args([]).preset == "smoke"  # the default: seconds, no download
    paper = attack_cli.config_of(parser.parse_args(["--protocol", "paper"]))  # --preset's alias
    assert paper.goals == ("targeted", "untargeted") and paper.attack_config.max_steps == 20_000
    assert (paper.width, paper.trace_len, paper.seeds) == (32, 2000, protocol.SEEDS)
    assert paper.methods[-1] == "auto_k" and len(paper.methods) == 8
    extended = attack_cli.config_of(parser.parse_args(
        ["--protocol", "extended", "--seeds", "1-3", "--width", "8", "--methods",
         "zoaq:n_hist=8,k_max=2", "radazo:k=2"]))
    assert (extended.width, extended.trace_len, extended.images) == (8, 0, 100)
    assert extended.seeds == (1, 2, 3) and extended.methods == ("zoaq", "radazo")
    assert extended.attack_config.width == 8
    smoke = attack_cli.config_of(parser.parse_args(["--preset", "smoke"]))
    assert (smoke.protocol, smoke.methods, smoke.seeds) == ("smoke", ("zoaq", "radazo"), (101,))
    assert (smoke.width, smoke.attack_config.max_steps, smoke.goals) == (2, 200, ("targeted",))
    assert (smoke.epochs, smoke.train_images) == (1, 1000)  # a smoke-size target model
    # --max-steps is --steps' older name; --goal and the training options override
    custom = attack_cli.config_of(parser.parse_args(
        ["--max-steps", "7", "--goal", "untargeted", "--epochs", "2", "--train-images", "50"]))
    assert (custom.attack_config.max_steps, custom.goals, custom.epochs,
            custom.train_images) == (7, ("untargeted",), 2, 50)


def test_the_shares_of_a_method_merge_back_into_attack_order():
    from benchmarks.attack import experiment

    attacks = ((1, 7), (1, 8), (3, 7), (3, 8), (4, 7))

    def share(w):  # run()'s entry for the round-robin share w of 2
        mine = attacks[w::2]
        return {"records": [{"image": i, "seed": s} for i, s in mine],
                "x": [list(attack) for attack in mine], "trace_cos": [[] for _ in mine],
                "seconds": 1.0 + w, "lane_steps_executed": 10, "lane_steps_useful": 5 + w,
                "widths": [2, 1] if w else [4]}

    merged = experiment.merge_shares(attacks, [share(1), share(0)])  # as they finished
    assert [(r["image"], r["seed"]) for r in merged["records"]] == list(attacks)
    np.testing.assert_array_equal(merged["x"], attacks)
    assert merged["trace_cos"].shape == (5, 0)
    assert (merged["seconds"], merged["lane_steps_executed"], merged["lane_steps_useful"],
            merged["widths"]) == (2.0, 20, 11, (4, 2, 1))


@pytest.mark.parametrize("args, message", [
    (["--dataset", "svhn"], "invalid choice: 'svhn'"),
    (["--protocol", "full"], "invalid choice: 'full'"),
    (["--goal", "misclassify"], "invalid choice: 'misclassify'"),
    (["--max-steps", "0"], "expected an integer >= 1, got 0"),
    (["--chunk", "-3"], "expected an integer >= 1, got -3"),
    (["--images", "0"], "expected an integer >= 1, got 0"),
])
def test_cli_usage_errors(args, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        benchmarks_main(["attack", "--out", str(tmp_path), *args])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_default_output_is_out_not_the_committed_results():
    import argparse

    from benchmarks.attack import cli as attack_cli

    parser = argparse.ArgumentParser()
    attack_cli.add_arguments(parser)
    args = parser.parse_args([])
    assert args.out.as_posix() == "out/attack" and args.report is None


def test_protocol_selection():
    rng = np.random.default_rng(0)
    images = rng.uniform(size=(12, 28, 28, 1)).astype(np.float32)
    labels = np.arange(12) % 10
    ds = data.Dataset("mnist", "test", images, labels, images, labels)
    predictions = labels.copy()
    predictions[[0, 2]] = 9 - labels[[0, 2]]  # two misclassified test images
    assert protocol.select("paper", ds, predictions) == tuple((1, s) for s in protocol.SEEDS)
    assert protocol.select("smoke", ds, predictions, seeds=(101,)) == ((protocol.PAPER_IMAGE, 101),)
    ext = protocol.select("extended", ds, predictions, seeds=(7, 8), num_images=3)
    assert ext == ((1, 7), (1, 8), (3, 7), (3, 8), (4, 7), (4, 8))  # correctly classified only
    with pytest.raises(ValueError, match="Only 10 correctly classified"):
        protocol.select("extended", ds, predictions, num_images=11)
    with pytest.raises(ValueError, match="Unknown protocol"):
        protocol.select("all", ds, predictions)
