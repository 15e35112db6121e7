"""Speed benchmark: oracle calls per second of every method, against evosax's Open_ES.

Four sections, in one process (one core pinned on CPU), compilation excluded but in the
last:

* compare: every method and evosax ``Open_ES`` (antithetic, population 20, raw fitness,
  ZO-AdaMM moments: ZO-AdaMM K=10's algorithm) on the quadratic, d = 100, 5 vmapped
  seeds, the same oracle budget per seed: useful calls/s, ratios, final gaps;
* dims: per-call cost against the dimension (one seed), against R-AdaZO K=10, with the
  cost of the parts of a step (drawing directions, evaluating, the loop);
* seeds: the vmapped seed sweep (``--lanes 5 10 100 1000``): calls/s, lane use (the share
  of executed objective evaluations that were counted queries) and memory;
* compile (not in the presets' default sections; its own page): the first-call compile
  time of every alias's jitted step and of ``run``, against ``optax.adam`` and
  ``Open_ES`` (:mod:`benchmarks.overhead.compile`).

Methods: ``open_es``, ``torch_loop`` (a hand-written PyTorch loop of ZO-AdaMM K=10, when
PyTorch is installed: :mod:`benchmarks.overhead.torch_loop`) and the specs of
:data:`benchmarks.methods.SYNTHETIC` (``radazo:k=4``),
each also as ``SPEC+eager`` / ``SPEC+vectorized`` (see :mod:`benchmarks.overhead.methods`).

Examples:
  python -m benchmarks overhead --out docs/results              # the committed page
  python -m benchmarks overhead --preset gpu --out docs/results \\
      --report docs/results/overhead_gpu.md
  python -m benchmarks overhead --render docs/results/overhead.json.xz   # re-render only
  python -m benchmarks overhead --sections compile --out docs/results \
      --report docs/results/overhead_compile.md          # compile latency
"""

from __future__ import annotations

import argparse
import resource
from pathlib import Path

from benchmarks import common, experiment, flags, pool, presets
from benchmarks import record as run_record
from benchmarks.overhead import config, report, torch_loop
from benchmarks.methods import EXTERNAL
from benchmarks.methods import SYNTHETIC as REGISTRY
from benchmarks.overhead import methods as methods_mod


def add_arguments(parser: argparse.ArgumentParser) -> None:
    flags.add_preset(parser, {
        "smoke": "small sizes of every section, for tests",
        "cpu": "the committed page, one pinned core (13.5 min at load 4-7, "
               "docs/results/overhead.md)",
        "gpu": "the full sweep, up to d = 10^7 and 10^4 vmapped seeds; meant for a GPU"},
        default="cpu")
    parser.add_argument("--sections", nargs="+", choices=config.SECTIONS, default=None)
    flags.add_methods(parser, [*REGISTRY.bases, *EXTERNAL])
    parser.add_argument("--dims", type=flags.positive_int, nargs="+", default=None,
                        help="dimensions of the dims section")
    flags.add_seeds(parser, "0-4, vmapped in the compare section")
    parser.add_argument("--lanes", nargs="+", default=None, metavar="N",
                        help="vmapped seed counts of the seed sweep: 5 10 100 1000 or "
                             "5,10,100,1000 (each count n runs seeds 0..n-1)")
    parser.add_argument("--compare-calls", type=flags.positive_int, default=None,
                        help="oracle calls per seed in the compare section")
    parser.add_argument("--dims-calls", type=flags.positive_int, default=None,
                        help="oracle calls per seed at every d of the dims section "
                             "(default: the preset's, scaled by d)")
    parser.add_argument("--seeds-calls", type=flags.positive_int, default=None,
                        help="oracle calls per seed in the seed sweep")
    parser.add_argument("--repeats", type=flags.positive_int, default=None,
                        help="interleaved timing rounds per configuration (minimum reported; "
                             "compile: the median)")
    parser.add_argument("--pin", action=argparse.BooleanOptionalAction, default=None,
                        help="pin to one core (default: the preset's; on for cpu)")
    parser.add_argument("--compile-methods", nargs="+", default=None, metavar="NAME",
                        choices=config.COMPILE_METHODS,
                        help="programs of the compile section (default: the preset's)")
    parser.add_argument("--previous", type=Path, default=None, metavar="JSON",
                        help="an earlier record of the same command: the page shows both "
                             "runs' ratios (compare, dims, compile) and how far they differ")
    flags.add_outputs(parser, Path("out"), "OUT/overhead.md")
    flags.add_workers(parser, single="its timings are interleaved in one process")


def _preset(args: argparse.Namespace) -> config.Preset:
    preset = config.PRESETS[args.preset]
    methods = lanes = None
    if args.lanes:
        try:
            lanes = tuple(flags.positive_int(n) for n in flags.items(args.lanes))
        except argparse.ArgumentTypeError as err:
            flags.fail(f"--lanes takes seed counts: {err}")
    if args.methods is not None:
        try:
            methods = tuple(dict.fromkeys(methods_mod.timed(n).name
                                          for n in flags.items(args.methods)))
        except ValueError as err:
            flags.fail(str(err))
    dims = tuple(args.dims) if args.dims else None
    dims_calls = (tuple(args.dims_calls or preset.calls_for_dim(d) for d in dims or preset.dims)
                  if args.dims_calls or dims else None)
    return presets.override(
        preset, methods=methods, dims=dims, dims_calls=dims_calls, seeds=lanes,
        compare_seeds=tuple(flags.seeds(args.seeds)) if args.seeds else None,
        compile_dims=dims, compile_methods=args.compile_methods,
        compare_calls=args.compare_calls, seeds_calls=args.seeds_calls, repeats=args.repeats,
        pin=args.pin, sections=args.sections)


def _previous(args: argparse.Namespace) -> dict | None:
    return None if args.previous is None else flags.read_results(args.previous)


def _configs(args: argparse.Namespace) -> list[config.Preset]:
    """The preset of the command line, its optional dependencies checked."""
    preset = _preset(args)
    if "open_es" in preset.methods + preset.compile_methods:  # every section runs it
        try:
            import evosax  # noqa: F401
        except ImportError:
            flags.fail("open_es needs evosax: pip install 'zoaq-jax[bench]' (evosax==0.3.2)")
    if torch_loop.NAME in preset.methods:
        try:
            torch_loop.torch()
        except ImportError as err:
            flags.fail(str(err))
    return [preset]


def _report_path(args: argparse.Namespace) -> Path:
    return args.report or args.out / "overhead.md"


def _page(_, record: dict, args: argparse.Namespace) -> None:
    if args.render:
        stem = args.render.name.removesuffix(common.RESULTS).removesuffix(".json")
        target = args.report or args.render.parent / f"{stem}.md"
        report.render(record, target, target.parent, _previous(args))
        print(f"rendered {target}")
    else:
        report.render(record, _report_path(args), args.out, _previous(args))
        print(f"wrote {args.out / f'{_report_path(args).stem}{common.RESULTS}'} and "
              f"{_report_path(args)}")


COMMAND = experiment.Command(
    "overhead", _configs,
    lambda preset, args, recorder: run(preset, command=recorder.command),
    # the harness's run record, beside the sections' own
    lambda preset, record, run_record_: {**record, "record": run_record_.as_dict()},
    lambda preset, args: args.out / f"{_report_path(args).stem}{common.RESULTS}",
    lambda record: None, _page, skip=("render", "workers"), read=flags.read_results)


def main(args: argparse.Namespace) -> int:
    return experiment.main(COMMAND, args)


def run(preset: config.Preset, command: str = "") -> dict:
    """Measures the preset's sections; the JSON record."""
    import jax

    from benchmarks.overhead import measure, protocol

    cores = run_record.available_cores()
    busy = protocol.busy_shares(cores) if preset.pin else {}
    if preset.pin:  # before JAX starts its backend, whose threads keep the affinity they got
        pool.pin_to_cores([protocol.idlest_core(cores, busy)])
    machine = {**run_record.machine_info(), "cores": len(cores)}  # the machine's, not ours
    # CPU time stands for a measurement only where the process holds one core and computes
    # on it (pinning is a no-op without sched_setaffinity; an accelerator's work is not CPU
    # time).
    ours = run_record.available_cores()  # the cores this process may run on now
    clock = protocol.basis(preset.pin and len(ours) == 1 and jax.default_backend() == "cpu")
    record = {"command": command, "preset": presets.as_dict(preset), "machine": machine,
              "versions": run_record.versions(), "pinned_cores": len(ours), "cores": ours,
              "busy_before_pinning": {str(c): round(x, 3) for c, x in busy.items()},
              "load_before": run_record.load_average(), "statistic": "minimum",
              "clock": clock, "sections": {}}
    p = preset
    sections = {  # timed (method, d, seeds, budget), timing rounds, parts (d, lanes, steps)
        "compare": ([(m, p.compare_dim, p.compare_seeds, p.compare_calls) for m in p.methods],
                    p.repeats, {}),
        "dims": ([(m, d, 1, p.calls_for_dim(d)) for d in p.dims for m in p.methods], p.repeats,
                 {"parts": [(d, 1, max(2, min(2000, 20_000_000 // d))) for d in p.dims]}),
        "seeds": ([(m, p.seeds_dim, s, p.seeds_calls) for s in p.seeds for m in p.methods
                   if m != torch_loop.NAME],  # the PyTorch loop runs seeds in turn
                  max(1, p.repeats // 3),
                  {"seeds_parts": [(p.seeds_dim, s, 200) for s in p.seeds]}),
    }
    for name, (configs, repeats, parts) in sections.items():
        if name in p.sections:
            loads = record.setdefault("round_loads", {}).setdefault(name, [])
            record["sections"][name] = measure.measure(configs, repeats, name, loads, clock)
            for key, rows in parts.items():
                record["sections"][key] = [{"d": d, "seeds": n,
                                            **measure.parts(d, n, steps, clock=clock)}
                                           for d, n, steps in common.progress(rows, desc="parts")]
            record[f"load_after_{name}"] = run_record.load_average()
    if "compile" in p.sections:
        from benchmarks.overhead import compile as compile_latency

        record["sections"]["compile"] = compile_latency.measure(
            p.compile_methods, p.compile_dims, p.repeats)
        record["load_after_compile"] = run_record.load_average()
    record["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return record
