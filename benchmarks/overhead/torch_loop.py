"""The outside baseline of hand-written research code: a PyTorch loop of ZO-AdaMM K=10.

The loop a researcher writes without a functional library, as zeroth-order research
code commonly is: one seed after the other, Python control flow, PyTorch eager tensors
on the CPU, and the objective treated as a black box queried at one point at a time.
Each step draws ``k`` Gaussian directions one by one and queries the central difference
of each,

.. math:: r_i = \\frac{f(x + \\mu u_i) - f(x - \\mu u_i)}{2\\mu}, \\qquad
  g = \\frac1k \\sum_i r_i u_i,

then updates ZO-AdaMM's moments without bias correction,
:math:`m \\leftarrow \\beta_1 m + (1-\\beta_1) g`,
:math:`v \\leftarrow \\beta_2 v + (1-\\beta_2) g^2`,
:math:`x \\leftarrow x - \\eta\\, m / (\\sqrt v + \\epsilon)`: the algorithm of
``zo_adamm`` K=10 and of the evosax ``Open_ES`` row, with the synthetic benchmark's
hyperparameters (:data:`benchmarks.methods.SYNTHETIC_HYPER`), on the same quadratic
``0.5 * ||x||^2``. Written for this project, not taken from another one.

PyTorch is optional (the ``dev`` extra installs it; never a dependency of the library):
:func:`torch` raises a clear error without it. Timings use one PyTorch thread, as the
speed benchmark pins its process to one core.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from benchmarks.methods import EXTERNAL, SYNTHETIC_HYPER
from benchmarks.overhead import methods, protocol

NAME = "torch_loop"  # the method's name in :data:`benchmarks.methods.EXTERNAL`


def torch():
    """The ``torch`` module; ``ImportError`` with the install command when it is missing."""
    try:
        import torch
    except ImportError as err:
        raise ImportError("torch_loop needs PyTorch: pip install torch (a CPU build is "
                          "enough; 'pip install -e .[dev]' installs one)") from err
    return torch


def run(d: int, seed: int, calls: int, k: int = 10) -> tuple[np.ndarray, int, int]:
    """One seed's run of ``calls // (2 k)`` steps: ``(x, calls made, steps)``."""
    if calls < 2 * k:
        raise ValueError(f"torch_loop needs at least one step's {2 * k} calls, got {calls}")
    th = torch()
    h = SYNTHETIC_HYPER
    generator = th.Generator().manual_seed(seed)
    x = th.randn(d, generator=generator)
    m, v = th.zeros(d), th.zeros(d)

    def f(z):  # measure.quadratic, in PyTorch
        return 0.5 * th.sum(z * z)

    steps = calls // (2 * k)
    with th.no_grad():
        for _ in range(steps):
            g = th.zeros(d)
            for _ in range(k):
                u = th.randn(d, generator=generator)
                r = (f(x + h.mu * u) - f(x - h.mu * u)) / (2 * h.mu)
                g += r * u
            g /= k
            m.mul_(h.b1).add_(g, alpha=1 - h.b1)
            v.mul_(h.b2).addcmul_(g, g, value=1 - h.b2)
            x -= h.lr * m / (v.sqrt() + h.eps)
    return x.numpy(), 2 * k * steps, steps


class Case:
    """The PyTorch loop as one configuration of :func:`benchmarks.overhead.measure.measure`:
    the same interface and record as a compiled JAX configuration (``seeds`` run one
    after the other; nothing is compiled)."""

    def __init__(self, name: str, d: int, seeds: int | tuple[int, ...], budget: int):
        self.seeds = tuple(range(seeds)) if isinstance(seeds, int) else tuple(seeds)
        self.name, self.d, self.lanes, self.budget = name, d, len(self.seeds), budget
        self.k = EXTERNAL[name].k
        self.compile_seconds, self.memory = 0.0, {}
        self.state_bytes = 3 * 4 * d  # x, m, v in float32
        self.times: list[float] = []  # wall and CPU seconds of every round
        self.cpu_times: list[float] = []
        self.out: list[tuple[np.ndarray, int, int]] = []
        # warm-up (one step), as a JAX configuration compiles here
        self._one_thread(lambda: run(d, self.seeds[0], 2 * self.k, self.k))

    @staticmethod
    def _one_thread(fn):
        """``fn()`` on one PyTorch thread (the pinned core), the setting restored after."""
        th = torch()
        threads = th.get_num_threads()
        th.set_num_threads(1)
        try:
            return fn()
        finally:
            th.set_num_threads(threads)

    def time_once(self) -> None:
        self.out = protocol.timed_round(self, lambda: self._one_thread(
            lambda: [run(self.d, s, self.budget, self.k) for s in self.seeds]))

    def record(self, clock: str = "wall") -> dict[str, Any]:
        return methods.record(self, max(s for _, _, s in self.out),
                              sum(c for _, c, _ in self.out), 1.0,
                              [float(methods.quadratic(x)) for x, _, _ in self.out], clock)
