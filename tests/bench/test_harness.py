"""The shared benchmark harness: run record, worker pool, flags, presets, method registry."""

from __future__ import annotations

import argparse
import concurrent.futures.process
import dataclasses
import os

import jax
import jax.numpy as jnp
import optax
import pytest

import zoaq_jax
from benchmarks import experiment, flags, pool, presets, record
from benchmarks.methods import BASES, Hyper, Registry


# ----------------------------------------------------------------------------- record


def test_record_round_trips_and_renders_one_way():
    with record.Recorder("python -m benchmarks x --seeds 0") as run:
        pass
    rec = run.record
    assert record.RunRecord.from_dict({**rec.as_dict(), "extra": 1}) == rec
    assert rec.command == "python -m benchmarks x --seeds 0"
    assert rec.wall_s >= 0 and rec.started <= rec.finished
    assert rec.versions["jax"] == jax.__version__
    line = record.machine_line(rec.machine)
    assert line.startswith("Machine: ") and f"{rec.machine['cores']} cores" in line
    assert "wall time" in record.run_line(rec) and rec.started in record.run_line(rec)


# ----------------------------------------------------------------------------- pool


def _square(x):
    return [(x * x, os.getpid())]


def _die(x):
    if x == 2:
        os._exit(3)  # a worker killed mid-task
    return [x]


def test_pool_runs_every_item_on_workers():
    out = dict(pool.pinned_imap(_square, [1, 2, 3, 4], workers=2, desc="t", bar=False))
    assert {x: v for x, [(v, _)] in out.items()} == {1: 1, 2: 4, 3: 9, 4: 16}
    assert os.getpid() not in {pid for [(_, pid)] in out.values()}


def test_pool_raises_when_a_worker_dies_instead_of_hanging():
    with pytest.raises(concurrent.futures.process.BrokenProcessPool):
        list(pool.pinned_imap(_die, [1, 2, 3], workers=2, desc="t", bar=False))


def _pid_and_cores(x):
    return x, os.getpid(), len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1


def _power_run(config, method):
    """An experiment's run: one record per seed of ``config`` (a (seeds, power) pair)."""
    seeds, power = config
    return [{"method": method, "seed": s, "value": s ** power} for s in seeds]


def test_execute_returns_records_in_unit_order_whatever_finishes_first():
    units = [(((1, 2), 1), "a"), (((3,), 2), "b"), (((4, 5), 3), "c")]
    expected = [r for config, method in units for r in _power_run(config, method)]
    for workers in (1, 2):
        seen = []
        out = experiment.execute(_power_run, units, workers, "t", bar=False,
                                 cost=lambda config, method: -len(config[0]),
                                 done=lambda config, method, records: seen.append(method))
        assert out == expected
        assert sorted(seen) == ["a", "b", "c"]  # each unit reported once, as it finished


def test_pinned_call_runs_one_job_in_a_pinned_child_and_raises_if_it_dies():
    value, pid, cores = pool.pinned_call(_pid_and_cores, 5)
    assert value == 5 and pid != os.getpid() and cores == 1
    with pytest.raises(concurrent.futures.process.BrokenProcessPool):
        pool.pinned_call(_die, 2)


# ----------------------------------------------------------------------------- flags


def test_list_items_keep_method_specs_whole():
    assert flags.items(["a b,c", "zoaq:n_hist=4,k_max=2,radazo", "zoaq:tau_band=(-0.2,0.5)"]) \
        == ["a b", "c", "zoaq:n_hist=4,k_max=2", "radazo", "zoaq:tau_band=(-0.2,0.5)"]


def test_seeds_are_a_list_with_ranges():
    assert flags.seeds(["0-3", "7,2", "3"]) == [0, 1, 2, 3, 7]
    assert flags.seeds(None) is None
    for bad in (["x"], ["5-2"]):
        with pytest.raises(SystemExit, match="error: "):
            flags.seeds(bad)


def test_fail_is_the_one_error_style():
    with pytest.raises(SystemExit) as info:
        flags.fail("no such thing")
    assert str(info.value) == "error: no such thing"


@pytest.mark.parametrize("command", ["synthetic", "attack", "llm", "overhead"])
@pytest.mark.parametrize("flag", ["--out", "--report"])
def test_unwritable_out_and_report_are_refused_before_the_run(command, flag, tmp_path, capsys):
    """Checked while parsing, so the command exits before loading or computing anything."""
    from benchmarks.__main__ import main

    blocker = tmp_path / "a_file"
    blocker.write_text("")
    with pytest.raises(SystemExit) as info:
        main([command, flag, str(blocker / "inside")])
    assert info.value.code == 2
    assert f"argument {flag}: cannot create" in capsys.readouterr().err
    if flag == "--out":  # an existing file is no folder
        with pytest.raises(SystemExit):
            main([command, flag, str(blocker)])
        assert "is not a folder" in capsys.readouterr().err


def _parser(command: str):
    import importlib

    from benchmarks.__main__ import COMMANDS

    parser = argparse.ArgumentParser()
    importlib.import_module(COMMANDS[command][0]).add_arguments(parser)
    return parser


@pytest.mark.parametrize("command", ["synthetic", "attack", "generalization", "llm",
                                     "overhead", "devices"])
def test_every_command_has_the_one_vocabulary(command):
    """``--preset smoke``, ``--seeds`` as a list, ``--workers``, ``--out``, ``--render``,
    ``--quiet`` parse on every command with the same destinations."""
    args = _parser(command).parse_args(["--preset", "smoke", "--workers", "1", "--quiet",
                                        "--out", "x", "--render", "r.json.xz"])
    assert (args.preset, args.workers, args.quiet, str(args.out), str(args.render)) == (
        "smoke", 1, True, "x", "r.json.xz")


@pytest.mark.parametrize("command", ["llm", "overhead", "devices"])
def test_single_process_commands_take_only_one_worker(command, capsys):
    with pytest.raises(SystemExit) as info:
        _parser(command).parse_args(["--workers", "2"])
    assert info.value.code == 2 and "invalid choice: 2" in capsys.readouterr().err


# ----------------------------------------------------------------------------- presets


@dataclasses.dataclass(frozen=True)
class _Config:
    steps: int
    seeds: tuple[int, ...] = (0,)
    model: str = "tiny"


def test_presets_take_overrides_named_like_their_fields():
    base = _Config(100)
    args = argparse.Namespace(steps=None, seeds=[3, 4], model="big", out="ignored")
    assert presets.from_args(base, args) == _Config(100, (3, 4), "big")
    assert presets.from_dict(_Config, presets.as_dict(_Config(5, (1,)))) == _Config(5, (1,))
    with pytest.raises(SystemExit, match="_Config has no setting width"):
        presets.override(base, width=3)


# ----------------------------------------------------------------------------- methods


REGISTRY = Registry({"zoaq": {"k_max": 10}, "radazo": {"k": 10}, "statzo_norm": {"k_max": 2},
                     "zoar": {"k": 2, "n_hist": 4}, "mezo": {"k": 2}})


def test_specs_have_one_canonical_text():
    a = REGISTRY.parse("zoaq:reset=half,n_hist=8, k_max=10")
    assert a.spec == "zoaq:reset=half" and a.changed == ("reset",)
    assert REGISTRY.parse("radazo:k=10").spec == "radazo"
    assert REGISTRY.parse("radazo:k=4").fixed_k == 4 and a.fixed_k is None
    assert REGISTRY.parse("zoaq:tau_band=(-0.2,0.5)").get("tau_band") == (-0.2, 0.5)
    assert REGISTRY.parse("statzo_norm:c_norm=0.3").get("c_norm") == 0.3
    assert [m.spec for m in REGISTRY.parse_all(["zoaq", "zoaq:n_hist=8", "radazo"])] \
        == ["zoaq", "radazo"]
    assert a.label == "ZoAQ K∈[1,10], reset=half"
    assert REGISTRY.parse("zoar").label == "ZoAR K=2"


@pytest.mark.parametrize("spec, message", [
    ("auto_k", "unknown method 'auto_k'"),
    ("zoaq:n_hist=x", "expected int"),
    ("zoaq:width=3", "bad override 'width=3'"),
    ("zoaq:n_hist", "bad override 'n_hist'"),
])
def test_bad_specs_are_refused(spec, message):
    with pytest.raises(ValueError, match=message):
        REGISTRY.parse(spec)


def test_registry_refuses_unknown_bases_and_arguments():
    with pytest.raises(ValueError, match="unknown base"):
        Registry({"adam": {}})
    with pytest.raises(ValueError, match="no argument"):
        Registry({"radazo": {"n_hist": 3}})


def _run(opt, steps=30):
    f = lambda x: jnp.sum((x - 1.0) ** 2) + jnp.sum(x**4)  # noqa: E731
    params = jnp.linspace(-1.0, 1.0, 12)
    state = opt.init(params)
    step = jax.jit(lambda p, s: opt.update(None, s, p, value_fn=f))
    for _ in range(steps):
        updates, state = step(params, state)
        params = optax.apply_updates(params, updates)
    return params, optax.tree.get(state, "num_queries")


def _zoaq_chain(**policy):
    """The chain of ``zoaq_jax.zoaq(1e-3, mu=5e-3)`` with one policy of its estimator
    swapped."""
    return zoaq_jax.chain(zoaq_jax.zoaq_estimator(k_max=10, mu=5e-3, **policy),
                          zoaq_jax.scale_by_radazo(), optax.scale_by_learning_rate(1e-3))


@pytest.mark.parametrize("spec, alias", [
    ("radazo:k=3", lambda key: zoaq_jax.radazo(1e-3, k=3, mu=5e-3, key=key)),
    ("zoaq:n_hist=4", lambda key: zoaq_jax.zoaq(1e-3, n_hist=4, k_max=10, mu=5e-3, key=key)),
    ("mezo", lambda key: zoaq_jax.mezo(1e-3, k=2, mu=5e-3, weight_decay=0.1, key=key)),
    ("zoar", lambda key: zoaq_jax.zoar(1e-3, k=2, n_hist=4, mu=5e-3, key=key)),
    ('zoaq:budget=budgets.reset("half")', lambda key: _zoaq_chain(
        budget=zoaq_jax.budgets.reset("half"), key=key)),
    ("zoaq:gate=zoaq_jax.gates.accept(zoaq_jax.gates.momentum())", lambda key: _zoaq_chain(
        gate=zoaq_jax.gates.accept(zoaq_jax.gates.momentum()), key=key)),
])
def test_built_methods_equal_the_library_aliases(spec, alias):
    """The registry's chain (with the consistency monitor) updates exactly as the alias."""
    method = REGISTRY.parse(spec)
    hyper = Hyper(lr=1e-3, mu=5e-3, weight_decay=0.1 if method.base == "mezo" else 0.0)
    got, want = _run(method.build(hyper, 7)), _run(alias(7))
    assert bool(jnp.all(got[0] == want[0])) and int(got[1]) == int(want[1])


@pytest.mark.parametrize("library, short", [
    ('zoaq:budget=budgets.reset("half")', "zoaq:reset=half"),
    ("zoaq:gate=gates.momentum_norm(c_norm=0.3)", "zoaq:c_norm=0.3,trigger=norm"),
    ("zoaq:gate=zoaq_jax.gates.accept(zoaq_jax.gates.momentum())",
     "zoaq:controller=always_accept"),
    ("zoaq:retention=retention.fifo(4,reuse_after_expand=False)",
     "zoaq:controller=fresh_on_expand,n_hist=4"),
    ("zoaq:gate=gates.momentum(tau_band=(-0.2,0.5))", "zoaq:tau_band=(-0.2,0.5)"),
])
def test_an_ablation_written_as_in_the_library_is_the_same_method(library, short):
    """ZoAQ's policy arguments take the library's spelling; the record keeps the short one."""
    assert REGISTRY.parse(library) == REGISTRY.parse(short)
    assert REGISTRY.parse(library).spec == short


@pytest.mark.parametrize("spec, message", [
    ("zoaq:budget=budgets.progress(window=4)", "no spec spelling"),
    ("zoaq:gate=gates.momentum(b1=0.5)", "b1 is the benchmark's"),
    ('zoaq:gate=os.system("true")', "expected a call of a factory"),
    ("zoaq:gate=gates.momentum(tau=1)", "unexpected keyword argument 'tau'"),
    ("zoaq:gate=gates.accept(gates.momentum()),retention=retention.fifo(8,"
     "reuse_after_expand=False)", "controller is given twice"),
    ("radazo:gate=gates.momentum()", "bad override"),
])
def test_bad_library_spellings_are_refused(spec, message):
    with pytest.raises(ValueError, match=message):
        REGISTRY.parse(spec)


def test_every_base_builds_and_counts_queries():
    registry = Registry({name: {} for name in BASES})
    for name in BASES:
        _, calls = _run(registry.parse(name).build(Hyper(1e-3, 5e-3), 0), steps=3)
        assert int(calls) > 0, name


def test_command_template_writes_each_configs_results_once_and_renders_without_computing(
        tmp_path):
    computed, shown = [], []
    command = experiment.Command(
        "toy", lambda args: [2, 3],
        lambda config, args, recorder: computed.append(config) or config * config,
        lambda config, value, run: {"record": run.as_dict(), "config": config,
                                    "results": [value]},
        lambda config, args: tmp_path / f"toy{config}.json.xz",
        lambda data: data["config"],
        lambda config, data, args: shown.append((config, data["results"])))
    assert experiment.main(command, argparse.Namespace(render=None, quiet=True)) == 0
    assert computed == [2, 3] and shown == [(2, [4]), (3, [9])]
    stored = experiment.read_results(tmp_path / "toy3.json.xz")
    assert stored["results"] == [9]
    assert stored["record"]["command"] == "python -m benchmarks toy --quiet"
    render = argparse.Namespace(render=tmp_path / "toy3.json.xz", quiet=True)
    assert experiment.main(command, render) == 0
    assert computed == [2, 3] and shown[-1] == (3, [9])  # the page of the file, no run


def test_per_worker_setup_runs_again_only_when_its_fields_change():
    made = []

    @experiment.per_worker("a")
    def setup(config):
        made.append(config)
        return len(made)

    One = dataclasses.make_dataclass("One", [("a", int), ("b", int)], frozen=True)
    assert [setup(One(1, 0)), setup(One(1, 5)), setup(One(2, 0)), setup(One(1, 0))] == [
        1, 1, 2, 3]  # b is not a setup field; only the last setup is kept
    setup.cache_clear()
    assert setup(One(1, 0)) == 4
