"""Speed: oracle calls/s of R-AdaZO with each step's directions split over n devices.

R-AdaZO with ``k`` central directions on the quadratic, one seed, ``steps`` steps (a
count per d) as one compiled program (:func:`benchmarks.loops.fixed_steps`), params and
state replicated on the mesh (``zoaq_jax.replicate``); for every d, one device without a
mesh (the reference) and each device count with ``combine="psum"`` and ``"gather"``.
Compilation is excluded; the median of ``repeats`` interleaved timings is reported. On a
CPU the devices are fake (``--xla_force_host_platform_device_count``, set here before JAX
starts): they share the same cores, so the numbers show the overhead of the split, not a
speed-up.

Examples:
  python -m benchmarks devices --out docs/results     # the committed page
  python -m benchmarks devices --devices 1 --dims 1000000 --out out   # one GPU
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import statistics
import sys
import time
from pathlib import Path

from benchmarks import common, experiment, flags, pages, presets
from benchmarks import record as run_record

COMBINES = ("psum", "gather")


@dataclasses.dataclass(frozen=True)
class Preset:
    """Sizes of a run; every field is the command-line option of the same name."""

    devices: tuple[int, ...]  # device counts
    dims: tuple[int, ...]
    k: int  # directions a step
    steps: tuple[int, ...]  # steps per timing, one per dim
    repeats: int  # interleaved timings


PRESETS = {"cpu": Preset((1, 2, 4, 8), (1000, 100_000), 8, (400, 40), 3),
           "smoke": Preset((1, 2), (8,), 2, (1,), 1)}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    flags.add_preset(parser, {
        "smoke": "1 and 2 devices at d = 8, one repeat (8 s of CPU time; 86 s wall at "
                 "load 20)",
        "cpu": "1 to 8 devices at d = 1,000 and 100,000, 3 repeats (the committed page)"},
        default="cpu")
    parser.add_argument("--devices", type=flags.positive_int, nargs="+")
    parser.add_argument("--dims", type=flags.positive_int, nargs="+")
    parser.add_argument("--k", type=flags.positive_int, help="directions a step")
    parser.add_argument("--steps", type=flags.positive_int, nargs="+",
                        help="steps per timing, one per dim (or one for all)")
    parser.add_argument("--repeats", type=flags.positive_int, help="interleaved timings")
    flags.add_outputs(parser, Path("out"), "OUT/devices.md")
    flags.add_workers(parser, single="one process spreads each step over the devices")


def program(d: int, k: int, steps: int, mesh, combine: str):
    """The compiled run of ``steps`` R-AdaZO steps and its replicated inputs."""
    import jax
    import jax.numpy as jnp
    import optax

    import zoaq_jax
    from benchmarks import loops  # these import JAX: not at the top
    from benchmarks.overhead import measure as measure_lib

    # zoaq_jax.radazo(1e-3, k=k, mesh=mesh), with the combine chosen
    opt = zoaq_jax.chain(zoaq_jax.fixed_estimator(k=k, mesh=mesh, combine=combine or "psum"),
                         zoaq_jax.scale_by_radazo(), optax.scale_by_learning_rate(1e-3))

    def run(params, state):
        return loops.fixed_steps(opt, measure_lib.quadratic, params, state, steps)

    params = jnp.ones(d)
    inputs = (params, opt.init(params))
    if mesh is not None:
        inputs = zoaq_jax.replicate(inputs, mesh)
    return jax.jit(run).lower(*inputs).compile(), inputs


def measure(args: Preset) -> list[dict]:
    import jax

    from benchmarks.overhead import measure as measure_lib

    splits = [(1, None)] + [(n, c) for n in args.devices for c in COMBINES]
    configs = [(d, n, c) for d in args.dims for n, c in splits]
    steps = dict(zip(args.dims, args.steps))
    compiled = {}
    for d, n, combine in common.progress(configs, total=len(configs), desc="compile"):
        mesh = None if combine is None else jax.make_mesh(
            (n,), ("directions",), devices=jax.devices()[:n])
        compiled[d, n, combine] = program(d, args.k, steps[d], mesh, combine)
    times = measure_lib.round_robin(
        {c: functools.partial(fn, *inputs) for c, (fn, inputs) in compiled.items()},
        args.repeats)
    rows = []
    for d, n, combine in configs:
        seconds = statistics.median(times[d, n, combine])
        reference = statistics.median(times[d, 1, None])
        rows.append({"d": d, "devices": n, "combine": combine or "none (no mesh)",
                     "steps": steps[d], "seconds": seconds,
                     "calls_per_s": 2 * args.k * steps[d] / seconds,
                     "time_vs_no_mesh": seconds / reference})
    return rows


def render(record: dict, path: Path) -> None:
    dims = list(dict.fromkeys(r["d"] for r in record["rows"]))
    by = {(r["devices"], r["combine"], r["d"]): r for r in record["rows"]}
    rows = [[n, combine, *(cell for d in dims for cell in (
        (f"{by[n, combine, d]['calls_per_s']:,.0f}", f"{by[n, combine, d]['time_vs_no_mesh']:.2f}")
        if (n, combine, d) in by else ("–", "–")))]
        for n, combine in dict.fromkeys((r["devices"], r["combine"]) for r in record["rows"])]
    steps = ", ".join(f"{by[key]['steps']} at d = {key[2]:,}" for key in
                      dict.fromkeys(next(k for k in by if k[2] == d) for d in dims))
    machine = record["machine"]
    fake = machine["backend"] == "cpu"
    pages.page(
        path, "Directions across devices: calls/s against device count",
        question=f"How do oracle calls per second change when each step's K = {record['k']} "
                 "directions are split over several devices, against one device without a "
                 f"mesh{' (fake CPU devices sharing the cores)' if fake else ''}?",
        answer=pages.table(["devices", "combine", *(h for d in dims for h in (
            f"calls/s, d = {d:,}", f"time vs no mesh, d = {d:,}"))], rows) + "\n\n"
        + pages.columns({
            "devices": "devices the directions of a step are split over",
            "combine": "psum: one all-reduce of the devices' partial sums; gather: every "
                       "device draws all K directions and the K responses are all-gathered",
            "calls/s": "oracle calls (2 K a step) per second",
            "time vs no mesh": "seconds over those of one device without a mesh at the same "
                               "d"}),
        run=record["command"],
        setup="\n\n".join([
            f"Run: started {record['started']}; load average before/after "
            f"{record['load_before']} / {record['load_after']}.",
            run_record.machine_line(machine) + (
                f" Devices: {machine['device_count']} fake CPU devices sharing those cores."
                if fake else ""),
            f"R-AdaZO, K = {record['k']} central directions, quadratic, one seed; median of "
            f"{record['repeats']} interleaved timings, compilation excluded; steps a timing: "
            f"{steps}."]),
        sections=[], command="devices")


def _configs(args: argparse.Namespace) -> list[Preset]:
    """The preset of the command line, checked, with its (fake CPU) devices started."""
    base = PRESETS[args.preset]
    steps = args.steps
    if steps is None:  # the preset's count at its dims, its smallest elsewhere
        table = dict(zip(base.dims, base.steps))
        steps = [table.get(d, min(base.steps)) for d in args.dims or base.dims]
    preset = presets.from_args(base, argparse.Namespace(**{**vars(args), "steps": steps}))
    if len(preset.steps) == 1:
        preset = dataclasses.replace(preset, steps=preset.steps * len(preset.dims))
    if len(preset.steps) != len(preset.dims):
        flags.fail(f"--steps takes one count per dim ({len(preset.dims)}) or one for all")
    bad = [n for n in preset.devices if preset.k % n]
    if bad:
        flags.fail(f"--k {preset.k} is not divisible by the device counts {bad}")
    most = max(preset.devices)
    if "jax" not in sys.modules:  # fake CPU devices; no effect on accelerators
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                                   f" --xla_force_host_platform_device_count={most}")
    import jax

    if len(jax.devices()) < most:
        flags.fail(f"{len(jax.devices())} devices, fewer than --devices {most} "
                   "(JAX was started before the flag for fake CPU devices could be set)")
    return [preset]


def _compute(preset: Preset, args: argparse.Namespace, _) -> dict:
    """The record: the rows of :func:`measure` with the settings, machine and loads (the
    command line spells out the preset's values)."""
    import jax

    command = flags.command_line("devices", argparse.Namespace(
        **{**vars(args), **presets.as_dict(preset)}), skip=("render", "quiet", "workers"))
    record = {"command": command, "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
              "load_before": run_record.load_average(), "k": preset.k,
              "steps": list(preset.steps), "repeats": preset.repeats,
              "versions": run_record.versions()}
    record["rows"] = measure(preset)
    record["load_after"] = run_record.load_average()
    record["machine"] = {**run_record.machine_info(), "device_count": len(jax.devices())}
    return record


def _page(_, record: dict, args: argparse.Namespace) -> None:
    if args.render:
        target = args.report or args.render.parent / "devices.md"
        render(record, target)
        print(f"rendered {target}")
    else:
        report = args.report or args.out / "devices.md"
        render(record, report)
        print(f"wrote {report}")


COMMAND = experiment.Command(
    "devices", _configs, _compute, lambda preset, record, _: record,
    lambda preset, args: args.out / f"devices{common.RESULTS}", lambda record: None, _page,
    read=flags.read_results)


def main(args: argparse.Namespace) -> int:
    return experiment.main(COMMAND, args)
