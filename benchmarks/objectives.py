"""Test objectives in d dimensions, each with minimum value 0 (so the gap is f(x)).

* Quadratic: ``0.5 * sum x_i^2`` (the public ZoAR code's form), minimiser 0.
* Cubic: the paper does not define it. We use the convex, twice-differentiable
  ``sum (x_i^2 / 2 + |x_i|^3 / 3)``, minimiser 0: a quadratic bowl with a cubic wall,
  which behaves like Quadratic near the optimum (as the paper's near-identical Quadratic
  and Cubic gaps suggest) and is steeper far from it.
* Levy: the standard Levy function, ``w = 1 + (x - 1) / 4``,
  ``sin^2(pi w_1) + sum_{i<d} (w_i - 1)^2 (1 + 10 sin^2(pi w_i + 1))
  + (w_d - 1)^2 (1 + sin^2(2 pi w_d))``, minimiser 1.
* Rosenbrock: ``sum_{i<d} 100 (x_{i+1} - x_i^2)^2 + (1 - x_i)^2``, minimiser 1.
* Ackley: ``-20 exp(-0.2 sqrt(mean x^2)) - exp(mean cos(2 pi x)) + 20 + e``,
  minimiser 0.

The budget mode adds one objective with evaluation noise, where real objectives live:

* Least squares on a fresh minibatch each step (the MeZO setting):
  ``0.5 * mean_{i in B_t} (a_i . x - b_i)^2`` over 32 of 1,000 fixed rows, the rows drawn
  from the step's data key and shared by all queries of the step; ``b = A x* + 0.5 e``.
  Its gap is the full-data loss minus the least-squares optimum.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


class Objective(NamedTuple):
    name: str
    label: str
    fn: Callable[[jnp.ndarray], jnp.ndarray]
    minimiser: Callable[[int], np.ndarray]


def quadratic(x):
    return 0.5 * jnp.sum(x**2)


def cubic(x):
    return jnp.sum(0.5 * x**2 + jnp.abs(x) ** 3 / 3.0)


def levy(x):
    w = 1.0 + (x - 1.0) / 4.0
    body = jnp.sum((w[:-1] - 1.0) ** 2 * (1.0 + 10.0 * jnp.sin(jnp.pi * w[:-1] + 1.0) ** 2))
    tail = (w[-1] - 1.0) ** 2 * (1.0 + jnp.sin(2.0 * jnp.pi * w[-1]) ** 2)
    return jnp.sin(jnp.pi * w[0]) ** 2 + body + tail


def rosenbrock(x):
    return jnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def ackley(x):
    rms = jnp.sqrt(jnp.mean(x**2))
    return (-20.0 * jnp.exp(-0.2 * rms) - jnp.exp(jnp.mean(jnp.cos(2.0 * jnp.pi * x)))
            + 20.0 + jnp.e)


_zeros = functools.partial(np.zeros, dtype=np.float32)
_ones = functools.partial(np.ones, dtype=np.float32)

OBJECTIVES: dict[str, Objective] = {o.name: o for o in (
    Objective("quadratic", "Quadratic", quadratic, _zeros),
    Objective("cubic", "Cubic", cubic, _zeros),
    Objective("levy", "Levy", levy, _ones),
    Objective("rosenbrock", "Rosenbrock", rosenbrock, _ones),
    Objective("ackley", "Ackley", ackley, _zeros))}


class NoisyObjective(NamedTuple):
    name: str
    label: str
    fn: Callable[[jnp.ndarray, jnp.ndarray], jnp.ndarray]  # (x, data key) -> minibatch loss
    gap: Callable[[jnp.ndarray], jnp.ndarray]  # full-data loss minus its minimum


@functools.lru_cache(maxsize=None)
def _least_squares_data(d: int, rows: int = 1000, noise: float = 0.5):
    rng = np.random.default_rng(2026)
    a = rng.standard_normal((rows, d))
    b = a @ rng.standard_normal(d) + noise * rng.standard_normal(rows)
    f_min = 0.5 * np.mean((a @ np.linalg.lstsq(a, b, rcond=None)[0] - b) ** 2)
    return a.astype(np.float32), b.astype(np.float32), np.float32(f_min)


def least_squares(x, batch, size: int = 32):
    a, b, _ = _least_squares_data(x.shape[-1])
    rows = jax.random.randint(batch, (size,), 0, a.shape[0])
    return 0.5 * jnp.mean((jnp.asarray(a)[rows] @ x - jnp.asarray(b)[rows]) ** 2)


def least_squares_gap(x):
    a, b, f_min = _least_squares_data(x.shape[-1])
    return 0.5 * jnp.mean((jnp.asarray(a) @ x - jnp.asarray(b)) ** 2) - f_min


NOISY: dict[str, NoisyObjective] = {
    "least_squares": NoisyObjective("least_squares", "Least squares (minibatch)", least_squares,
                                    least_squares_gap),
}
