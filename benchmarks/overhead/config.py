"""Presets of the speed benchmark: the sizes of its three sections (``compare``, ``dims``,
``seeds``: :mod:`benchmarks.overhead.cli`), as frozen dataclasses.

``cpu`` is what the committed page was measured with (7 to 14 minutes on 2 shared cores,
depending on the load); ``gpu`` is the full sweep for a lent accelerator; ``smoke``
exercises every code path in well under a minute on an idle core, compiling few programs
(the tests run the ``gpu`` preset's code path at the ``smoke`` sizes).
"""

from __future__ import annotations

from dataclasses import dataclass

SECTIONS = ("compare", "dims", "seeds", "compile")
DEFAULT_SECTIONS = SECTIONS[:3]  # compile has its own page (overhead_compile.md)


COMPILE_METHODS = ("zoaq", "zoar", "auto_k", "radazo", "zo_adamm", "zo_sgd", "mezo", "statzo",
                   "run", "adam", "open_es")


@dataclass(frozen=True)
class Preset:
    name: str
    methods: tuple[str, ...]
    compare_dim: int = 100
    compare_seeds: int | tuple[int, ...] = 5  # a count n (seeds 0 .. n-1) or the seeds
    compare_calls: int = 600_000  # oracle calls per seed (30,000 Open_ES generations of 20)
    dims: tuple[int, ...] = (100, 10_000, 1_000_000)
    dims_calls: tuple[int, ...] = (40_000, 4_000, 200)  # calls per seed, one per dim
    seeds: tuple[int, ...] = (5, 10, 100, 1000)  # lane counts of the seed sweep (--lanes)
    seeds_dim: int = 100
    seeds_calls: int = 4_000  # calls per seed in the seed sweep
    repeats: int = 3  # timing rounds, interleaved (order rotated); the minimum is reported
    pin: bool = True  # pin the process to one core (CPU runs)
    sections: tuple[str, ...] = DEFAULT_SECTIONS
    # the compile section (benchmarks.overhead.compile): programs and dimensions, measured
    # in `repeats` interleaved rounds
    compile_methods: tuple[str, ...] = COMPILE_METHODS
    compile_dims: tuple[int, ...] = (10, 10_000)

    def calls_for_dim(self, d: int) -> int:
        """The per-seed budget of the ``dims`` section at ``d`` (the nearest listed dim's)."""
        table = dict(zip(self.dims, self.dims_calls))
        if d in table:
            return table[d]
        nearest = min(self.dims, key=lambda x: abs(x - d))
        return max(200, table[nearest] * nearest // d)


ALL_METHODS = ("radazo", "zo_adamm", "open_es", "zoaq", "zoaq+eager", "zoaq+vectorized",
               "auto_k", "zoar", "statzo")

PRESETS = {
    "cpu": Preset("cpu", ALL_METHODS),
    "gpu": Preset(
        "gpu", ALL_METHODS, compare_calls=1_200_000, dims=(100, 10_000, 1_000_000, 10_000_000),
        dims_calls=(400_000, 40_000, 2_000, 200), seeds=(5, 10, 100, 1000, 10_000),
        seeds_calls=200_000, repeats=3, pin=False),
    # Every section's code path with few programs to compile (compilation is most of its
    # time): a fixed method, an adaptive one (StatZO: about half of ZoAQ's compile time)
    # and Open_ES, one dimension, one lane count.
    "smoke": Preset(
        "smoke", ("radazo", "statzo", "open_es"), compare_dim=8, compare_seeds=2,
        compare_calls=400, dims=(8,), dims_calls=(200,), seeds=(2,), seeds_dim=8,
        seeds_calls=200, repeats=1, pin=False, compile_methods=("radazo", "adam", "open_es"),
        compile_dims=(8,)),
}
