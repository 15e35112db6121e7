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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

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


def _zeros(d: int) -> np.ndarray:
    return np.zeros(d, np.float32)


def _ones(d: int) -> np.ndarray:
    return np.ones(d, np.float32)


OBJECTIVES: dict[str, Objective] = {
    o.name: o
    for o in (
        Objective("quadratic", "Quadratic", quadratic, _zeros),
        Objective("cubic", "Cubic", cubic, _zeros),
        Objective("levy", "Levy", levy, _ones),
        Objective("rosenbrock", "Rosenbrock", rosenbrock, _ones),
        Objective("ackley", "Ackley", ackley, _zeros),
    )
}
