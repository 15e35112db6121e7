"""The LLM command on the harness: presets, the paper protocol's code path on CPU at tiny
sizes (LLaMA and OPT from a local folder), seed lists, early errors, re-rendering."""

import argparse
import json
import re
from pathlib import Path

import jax
import pytest

from benchmarks import presets
from benchmarks.common import read_json
from benchmarks.llm import cli, config, data, experiment, models
from benchmarks.llm.models import opt
from benchmarks.llm.models import tokenizer as tok
from benchmarks.llm.models.layers import random_weights

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"
TINY = ["--data", "synthetic", "--steps", "2", "--eval-every", "1", "--n-train", "8",
        "--n-dev", "4", "--n-test", "4", "--batch-size", "4", "--eval-batch-size", "4",
        "--timing-reps", "1", "--methods", "radazo:k=1", "--report", "none", "--quiet"]


def _main(argv):
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return cli.main(parser.parse_args(argv))


def test_presets_are_frozen_dataclasses_with_the_papers_protocol():
    paper = config.PRESETS["paper"]
    assert (paper.steps, paper.eval_every, paper.n_train, paper.n_dev, paper.n_test,
            paper.seeds, paper.model) == (5000, 250, 1000, 500, 1000, (0, 1, 2), "smollm2")
    assert {"mezo", "radazo", "statzo", "zoaq", "zoaq:k_max=2"} <= set(paper.methods)
    assert paper.dtype == "float32" and paper.max_length is None  # nothing CPU-specific
    with pytest.raises(AttributeError):
        paper.steps = 3
    args = argparse.Namespace(steps=4, seeds=[3], n_dev=None, out="x")
    assert presets.from_args(paper, args) == presets.override(paper, steps=4, seeds=(3,))
    copa = config.complete(presets.override(paper, task="copa", data="/COPA"))
    assert copa.n_dev == config.COPA_DEV


def test_a_budget_on_the_command_line_sets_its_own_evaluation_period():
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)

    def period(*argv):
        return cli.configure(parser.parse_args(["--preset", "cpu", *argv])).eval_every_fe

    assert period() == config.CPU_BUDGET // 8  # the preset's
    assert period("--budget", "800") == 100  # budget / 8, not the preset's 750
    assert period("--budget", "800", "--eval-every-fe", "7") == 7


def test_paper_preset_runs_on_cpu_at_tiny_size_with_a_seed_range(tmp_path):
    assert _main(["--preset", "paper", "--model", "tiny-llama", "--seeds", "0-1",
                  "--out", str(tmp_path)] + TINY) == 0
    payload = read_json(tmp_path / "llm.json.xz")
    cfg = payload["config"]
    assert cfg["preset"] == "paper" and cfg["seeds"] == [0, 1] and cfg["probe_every"] == 10
    assert [(r["method"], r["seed"]) for r in payload["results"]] == [
        ("radazo:k=1", 0), ("radazo:k=1", 1)]
    record = payload["record"]
    assert "--seeds 0 1" in record["command"]
    assert record["machine"]["backend"] == jax.default_backend()
    assert record["machine"]["devices"] == [d.device_kind for d in jax.devices()]
    assert not (tmp_path / "llm.md").exists()  # --report none


def test_run_trains_one_method_on_every_seed_from_one_cached_setup(monkeypatch):
    prepare, loaded = experiment.prepare, []
    monkeypatch.setattr(experiment, "prepare", lambda cfg: loaded.append(cfg) or prepare(cfg))
    experiment.prepared.cache_clear()
    cfg = presets.override(config.PRESETS["smoke"], steps=2, eval_every=1, n_train=8, n_dev=4,
                           n_test=4, batch_size=4, eval_batch_size=4, seeds=(0, 1))
    both = experiment.run(cfg, "radazo:k=1")
    (again,) = experiment.run(presets.override(cfg, seeds=(1,)), "radazo:k=1")
    assert [(r["method"], r["seed"]) for r in both] == [("radazo:k=1", 0), ("radazo:k=1", 1)]
    assert [c["dev_loss"] for c in again["curve"]] == [c["dev_loss"] for c in both[1]["curve"]]
    assert experiment.prepared(presets.override(cfg, lr=1.0, steps=5, methods=("mezo",))) is (
        experiment.prepared(cfg))
    assert len(loaded) == 1  # seeds, methods and run lengths are not part of the setup


class _Reads:
    """A configuration that records which of its fields are read."""

    def __init__(self, cfg):
        self._cfg, self.names = cfg, set()

    def __getattr__(self, name):
        self.names.add(name)
        return getattr(self._cfg, name)


def test_the_setup_cache_key_names_every_field_prepare_reads():
    """``prepared`` caches by SETUP_FIELDS: a field ``prepare`` reads outside them would let
    two configurations differing in it share one setup (checked on the smoke preset's path)."""
    reads = _Reads(presets.override(config.PRESETS["smoke"], n_train=8, n_dev=4, n_test=4))
    experiment.prepare(reads)
    assert reads.names and reads.names <= set(experiment.SETUP_FIELDS)


def _tiny_opt_folder(path: Path) -> Path:
    """A Hugging Face OPT checkpoint folder (config, safetensors, tokenizer.json) of a tiny
    random OPT over the synthetic data's words, as `opt:PATH` reads real ones."""
    from safetensors.numpy import save_file

    words = data.vocabulary(data.synthetic_splits("sst2", n_train=8, n_dev=4, n_test=4))
    tokenizer = tok.word_level(words)
    cfg = models.tiny_opt_config(tokenizer.vocab_size)
    path.mkdir()
    (path / "config.json").write_text(json.dumps({
        "model_type": "opt", "vocab_size": cfg.vocab_size, "hidden_size": cfg.hidden_size,
        "ffn_dim": cfg.ffn_dim, "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads,
        "max_position_embeddings": cfg.max_position_embeddings,
        "bos_token_id": tokenizer.bos_id, "pad_token_id": tokenizer.pad_id}))
    save_file({f"model.{k}": v for k, v in random_weights(opt.weight_shapes(cfg), 0).items()},
              str(path / "model.safetensors"))
    tokenizer.backend.save(str(path / "tokenizer.json"))
    return path


def test_paper_preset_runs_opt_from_a_local_folder(tmp_path):
    folder = _tiny_opt_folder(tmp_path / "opt-tiny")
    out = tmp_path / "out"
    assert _main(["--preset", "paper", "--model", f"opt:{folder}", "--seeds", "0",
                  "--out", str(out)] + TINY) == 0
    payload = read_json(out / "llm.json.xz")
    assert payload["model"]["architecture"] == "opt" and payload["model"]["name"] == "opt-tiny"
    assert payload["results"][0]["total_fe"] == 2 * 2  # two steps of K=1


def test_a_bad_method_spec_fails_before_any_loading(monkeypatch, tmp_path):
    def forbidden(*args, **kwargs):
        raise AssertionError("loaded something")

    monkeypatch.setattr(experiment, "prepare", forbidden)
    monkeypatch.setattr(models, "load_model", forbidden)
    with pytest.raises(SystemExit) as exit_info:
        _main(["--preset", "cpu", "--methods", "radazo", "zoaq:k_maxx=2", "--out", str(tmp_path)])
    assert str(exit_info.value.code).startswith("error: bad override 'k_maxx=2'")


def _generated(text: str) -> str:
    return re.search(r"<!-- BEGIN GENERATED.*?<!-- END GENERATED -->", text, re.DOTALL).group(0)


@pytest.mark.parametrize("name", ["llm", "llm_mezo_cpu", "llm_anytime", "llm_speed",
                                  "llm_speed_1core", "llm_directions"])
def test_committed_pages_render_bit_for_bit_from_their_json(name, tmp_path):
    """Every committed LLM page is its results file rendered by this code, title included
    (a new page gets the renderer's title, which tells the LLM pages apart)."""
    page = tmp_path / f"{name}.md"
    assert _main(["--render", str(RESULTS / "llm" / f"{name}.json.xz"), "--report", str(page)]) == 0
    committed = (RESULTS / f"{name}.md").read_text()
    assert _generated(page.read_text()) == _generated(committed)
    assert page.read_text().partition("\n")[0] == committed.partition("\n")[0]
