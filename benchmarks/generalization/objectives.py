"""The tuning set and the held-out set of the generalization protocol, fixed before tuning.

Every default of ``auto_k`` (and the learning-rate and smoothing rule of
:func:`experiment.settings_of`) is chosen on :data:`TUNING` only: the synthetic benchmark's
objectives at d = 100 (Quadratic, Cubic, Levy, Rosenbrock, Ackley and least squares on a
fresh minibatch) and, from design round 8b, ``teacher_minibatch`` (d = 97, noisy): a
10-8-1 tanh network fitted by squared loss to 2,000 fixed rows labelled by a random
teacher of the same shape plus Gaussian noise (sigma 0.3), a fresh minibatch of 32 rows
a step, started at ``U[-1, 1]``; its gap is the full-data loss (``f* = 0``, as the
held-out MLP's). :data:`HELD_OUT` is never used for a choice; it was written into this
file, and committed, before any tuning. Each problem has its own dimension, call budget
(10^6 calls at d <= 100, capped at large d), and start box ``x0 ~ U[-a, a]^d``; the gap
is ``f(x) - f*`` (the noise-free, full-data loss for the noisy problems).

Held-out (ill-conditioning 1e2-1e6, multimodal, plateaus, noise, d = 10 to 10^4):

* ``ellipsoid_1e6`` (d = 20): ``0.5 sum 10^(6 i/(d-1)) x_i^2``, condition 1e6.
* ``rotated_ellipsoid_1e3`` (d = 100): the same with condition 1e3 in a fixed random
  orthonormal basis (not separable).
* ``sum_powers`` (d = 10): ``sum |x_i|^(2 + 4 i/(d-1))``: flat near its minimiser.
* ``dixon_price`` (d = 30): ``(x_1 - 1)^2 + sum_i i (2 x_i^2 - x_{i-1})^2``.
* ``rastrigin`` (d = 10): ``10 d + sum (x_i^2 - 10 cos 2 pi x_i)``, multimodal.
* ``griewank`` (d = 100): ``1 + sum x_i^2 / 4000 - prod cos(x_i / sqrt i)``, multimodal.
* ``plateau`` (d = 50): ``sum (1 - exp(-x_i^2 / 2))``, started on its flat shoulders.
* ``logistic_minibatch`` (d = 100, noisy): L2-regularised logistic regression on
  2,000 fixed rows with feature scales spanning 1e2, a fresh minibatch of 32 rows a step.
* ``noisy_ellipsoid`` (d = 50, noisy): ``0.5 sum 10^(2 i/(d-1)) x_i^2`` plus independent
  Gaussian noise (sigma 0.01) on every call.
* ``ellipsoid_1e2_d10k`` (d = 10^4): condition 1e2, budget capped at 10^5 calls.

Added for issue 32 (round 3), committed before any tuning of that round:

* ``mlp_minibatch`` (d = 81, noisy): a 8-8-1 tanh MLP classifier (logistic loss) on
  2,000 fixed rows labelled by a random teacher MLP with 10% flipped labels, a fresh
  minibatch of 32 rows a step. Its minimum is unknown: the gap is the full-data loss
  (``f* = 0``, the loss's lower bound).
* ``lasso`` (d = 50, non-smooth): ``|A x - b|^2 / (2 n) + 0.1 |x|_1`` on ``n = 200``
  fixed rows, built so that a sparse ``x*`` (10 non-zeros) is its unique minimiser.
* ``scaled_ellipsoid`` (d = 30, badly scaled): ``1e4 E(x / 1e-3)`` with ``E`` the
  ellipsoid of condition 1e3, started in ``U[-1e-3, 1e-3]``.
* ``shifted_ellipsoid_d100k`` (d = 10^5): ``0.5 sum 10^(i/(d-1)) (x_i - c_i)^2``
  (condition 10, ``c ~ U[-0.5, 0.5]`` fixed), budget capped at 3 x 10^4 calls.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import objectives as synthetic

MAX_BUDGET = 1_000_000  # calls at d <= 100


class Problem(NamedTuple):
    name: str
    label: str
    dim: int
    budget: int  # the largest call budget (the run's length)
    box: float  # x0 ~ U[-box, box]^d (N(0, 1) for the tuning set: box 0)
    fn: Callable  # (x, data key) -> value
    gap: Callable  # x -> f(x) - f*, noise-free


def _powers(d: int, decades: float) -> jnp.ndarray:
    return jnp.asarray(10.0 ** (decades * np.arange(d) / (d - 1)), jnp.float32)


def ellipsoid(x, decades: float):
    return 0.5 * jnp.sum(_powers(x.shape[-1], decades) * x**2)


@functools.lru_cache(maxsize=None)
def _rotation(d: int) -> np.ndarray:
    q, _ = np.linalg.qr(np.random.default_rng(20).standard_normal((d, d)))
    return q.astype(np.float32)


def rotated_ellipsoid(x):
    return ellipsoid(jnp.asarray(_rotation(x.shape[-1])) @ x, 3.0)


def sum_powers(x):
    d = x.shape[-1]
    return jnp.sum(jnp.abs(x) ** (2.0 + 4.0 * jnp.arange(d) / (d - 1)))


def dixon_price(x):
    i = jnp.arange(2, x.shape[-1] + 1, dtype=jnp.float32)
    return (x[0] - 1.0) ** 2 + jnp.sum(i * (2.0 * x[1:] ** 2 - x[:-1]) ** 2)


def rastrigin(x):
    return 10.0 * x.shape[-1] + jnp.sum(x**2 - 10.0 * jnp.cos(2.0 * jnp.pi * x))


def griewank(x):
    i = jnp.arange(1, x.shape[-1] + 1, dtype=jnp.float32)
    return 1.0 + jnp.sum(x**2) / 4000.0 - jnp.prod(jnp.cos(x / jnp.sqrt(i)))


def plateau(x):
    return jnp.sum(1.0 - jnp.exp(-0.5 * x**2))


@functools.lru_cache(maxsize=None)
def _logistic_data(d: int, rows: int = 2000, l2: float = 1e-3):
    rng = np.random.default_rng(21)
    a = rng.standard_normal((rows, d)) * 10.0 ** rng.uniform(-1.0, 1.0, d)
    y = np.sign(a @ rng.standard_normal(d) / np.sqrt(d) + 0.5 * rng.standard_normal(rows))
    w = np.zeros(d)
    for _ in range(50):  # Newton's method on the strongly convex full-data loss
        p = 1.0 / (1.0 + np.exp(y * (a @ w)))
        grad = -(a * (y * p)[:, None]).mean(0) + l2 * w
        hess = (a * (p * (1 - p))[:, None]).T @ a / rows + l2 * np.eye(d)
        w -= np.linalg.solve(hess, grad)
    f_min = np.mean(np.logaddexp(0.0, -y * (a @ w))) + 0.5 * l2 * w @ w
    return a.astype(np.float32), y.astype(np.float32), np.float32(f_min), l2


def _at_rows(rows, *data):
    """``data`` (a problem's fixed rows) as JAX arrays at ``rows``, a minibatch's row
    indices, or whole where ``rows`` is None (the full-data loss)."""
    data = tuple(jnp.asarray(v) for v in data)
    return data if rows is None else tuple(v[rows] for v in data)


def _logistic(x, rows):
    a, y, _, l2 = _logistic_data(x.shape[-1])
    a, y = _at_rows(rows, a, y)
    return jnp.mean(jnp.logaddexp(0.0, -y * (a @ x))) + 0.5 * l2 * x @ x


def logistic_minibatch(x, batch, size: int = 32):
    rows = jax.random.randint(batch, (size,), 0, _logistic_data(x.shape[-1])[0].shape[0])
    return _logistic(x, rows)


def logistic_gap(x):
    return _logistic(x, None) - _logistic_data(x.shape[-1])[2]


def noisy_ellipsoid(x, batch, sigma: float = 0.01):
    """Fresh noise on every call: the key mixes the step's data key with the point."""
    bits = jax.lax.bitcast_convert_type(x, jnp.int32)
    key = jax.random.fold_in(batch, jnp.sum(bits * (jnp.arange(x.shape[-1]) * 2 + 1)))
    return ellipsoid(x, 2.0) + sigma * jax.random.normal(key, ())


MLP_SHAPE = (8, 8)  # inputs, hidden units (one logit out)


def _mlp_size(inputs: int, hidden: int) -> int:
    return inputs * hidden + 2 * hidden + 1


def _mlp(x, a, xp=jnp, shape=MLP_SHAPE):
    """Outputs of the one-hidden-layer tanh MLP of ``shape`` (inputs, hidden units) with
    flat parameters ``x`` on the rows ``a`` (``xp``: the array module, NumPy for the data,
    which may be built inside a trace)."""
    n, h = shape
    w1, b1 = x[:n * h].reshape(n, h), x[n * h:n * h + h]
    w2, b2 = x[n * h + h:n * h + 2 * h], x[-1]
    return xp.tanh(a @ w1 + b1) @ w2 + b2


@functools.lru_cache(maxsize=None)
def _mlp_data(rows: int = 2000, flip: float = 0.1):
    rng = np.random.default_rng(22)
    a = rng.standard_normal((rows, MLP_SHAPE[0])).astype(np.float32)
    teacher = rng.standard_normal(_mlp_size(*MLP_SHAPE)).astype(np.float32)
    y = np.sign(_mlp(teacher, a, np))
    y[rng.uniform(size=rows) < flip] *= -1
    return a, y.astype(np.float32)


def _mlp_loss(x, rows):
    a, y = _at_rows(rows, *_mlp_data())
    return jnp.mean(jnp.logaddexp(0.0, -y * _mlp(x, a)))


def mlp_minibatch(x, batch, size: int = 32):
    return _mlp_loss(x, jax.random.randint(batch, (size,), 0, _mlp_data()[0].shape[0]))


def mlp_gap(x):
    return _mlp_loss(x, None)


TEACHER_SHAPE = (10, 8)  # the tuning set's regression network: inputs, hidden units


@functools.lru_cache(maxsize=None)
def _teacher_data(rows: int = 2000, noise: float = 0.3):
    """Rows ``a ~ N(0, I)`` and targets of a random teacher network of the student's shape
    (weights ``N(0, 1 / fan-in)``) plus Gaussian noise."""
    rng = np.random.default_rng(25)
    n, h = TEACHER_SHAPE
    a = rng.standard_normal((rows, n))
    teacher = np.concatenate([rng.standard_normal(n * h) / np.sqrt(n), np.zeros(h),
                              rng.standard_normal(h) / np.sqrt(h) * 2.0, np.zeros(1)])
    y = _mlp(teacher, a, np, TEACHER_SHAPE) + noise * rng.standard_normal(rows)
    return a.astype(np.float32), y.astype(np.float32)


def _teacher_loss(x, rows):
    a, y = _at_rows(rows, *_teacher_data())
    return 0.5 * jnp.mean((_mlp(x, a, shape=TEACHER_SHAPE) - y) ** 2)


def teacher_minibatch(x, batch, size: int = 32):
    return _teacher_loss(x, jax.random.randint(batch, (size,), 0, _teacher_data()[0].shape[0]))


def teacher_gap(x):
    return _teacher_loss(x, None)


@functools.lru_cache(maxsize=None)
def _lasso_data(d: int, rows: int = 200, l1: float = 0.1):
    """``(A, b, x*, f*, l1)``: ``b`` is chosen so that ``x*`` satisfies the optimality
    condition ``A^T (A x* - b) / n + l1 s = 0``, ``s = sign(x*)`` on the support and
    ``|s| <= 1/2`` off it; ``A`` has full column rank, so ``x*`` is the unique minimiser."""
    rng = np.random.default_rng(23)
    a = rng.standard_normal((rows, d))
    x_star = np.zeros(d)
    support = rng.choice(d, 10, replace=False)
    x_star[support] = rng.choice([-1.0, 1.0], 10) * rng.uniform(0.3, 1.0, 10)
    s = rng.uniform(-0.5, 0.5, d)
    s[support] = np.sign(x_star[support])
    residual = -l1 * rows * a @ np.linalg.solve(a.T @ a, s)  # A^T r = -l1 n s
    b = a @ x_star - residual
    f_star = residual @ residual / (2 * rows) + l1 * np.abs(x_star).sum()
    return (a.astype(np.float32), b.astype(np.float32), x_star.astype(np.float32),
            np.float32(f_star), l1)


def lasso(x):
    a, b, _, _, l1 = _lasso_data(x.shape[-1])
    r = jnp.asarray(a) @ x - jnp.asarray(b)
    return r @ r / (2 * a.shape[0]) + l1 * jnp.sum(jnp.abs(x))


def lasso_gap(x):
    return lasso(x) - _lasso_data(x.shape[-1])[3]


SCALE_F, SCALE_X = 1e4, 1e-3  # the badly scaled problem: f x 1e4 at x x 1e-3


def scaled_ellipsoid(x):
    return SCALE_F * ellipsoid(x / SCALE_X, 3.0)


@functools.lru_cache(maxsize=None)
def _shift(d: int) -> np.ndarray:
    return np.random.default_rng(24).uniform(-0.5, 0.5, d).astype(np.float32)


def shifted_ellipsoid(x):
    return ellipsoid(x - jnp.asarray(_shift(x.shape[-1])), 1.0)


def _deterministic(name, label, dim, box, fn, budget=MAX_BUDGET) -> Problem:
    return Problem(name, label, dim, budget, box, lambda x, batch: fn(x), fn)


def _held_out() -> dict[str, Problem]:
    e6 = functools.partial(ellipsoid, decades=6.0)
    e2 = functools.partial(ellipsoid, decades=2.0)
    problems = [
        _deterministic("ellipsoid_1e6", "Ellipsoid cond 1e6 (d=20)", 20, 1.0, e6),
        _deterministic("rotated_ellipsoid_1e3", "Rotated ellipsoid cond 1e3 (d=100)", 100, 1.0,
                       rotated_ellipsoid),
        _deterministic("sum_powers", "Sum of different powers (d=10)", 10, 1.0, sum_powers),
        _deterministic("dixon_price", "Dixon-Price (d=30)", 30, 2.0, dixon_price),
        _deterministic("rastrigin", "Rastrigin (d=10)", 10, 5.12, rastrigin),
        _deterministic("griewank", "Griewank (d=100)", 100, 50.0, griewank),
        _deterministic("plateau", "Gaussian plateaus (d=50)", 50, 4.0, plateau),
        Problem("logistic_minibatch", "Logistic regression, minibatch (d=100)", 100, MAX_BUDGET,
                1.0, logistic_minibatch, logistic_gap),
        Problem("noisy_ellipsoid", "Ellipsoid cond 1e2 + call noise (d=50)", 50, MAX_BUDGET, 1.0,
                noisy_ellipsoid, e2),
        _deterministic("ellipsoid_1e2_d10k", "Ellipsoid cond 1e2 (d=10^4)", 10_000, 1.0, e2,
                       budget=100_000),
        Problem("mlp_minibatch", "MLP classifier 8-8-1, minibatch (d=81)",
                _mlp_size(*MLP_SHAPE), MAX_BUDGET, 0.5, mlp_minibatch, mlp_gap),
        Problem("lasso", "L1-regularised regression (d=50)", 50, MAX_BUDGET, 1.0,
                lambda x, batch: lasso(x), lasso_gap),
        _deterministic("scaled_ellipsoid", "Ellipsoid cond 1e3, f x 1e4, x x 1e-3 (d=30)", 30,
                       SCALE_X, scaled_ellipsoid),
        _deterministic("shifted_ellipsoid_d100k", "Shifted ellipsoid cond 10 (d=10^5)",
                       100_000, 1.0, shifted_ellipsoid, budget=30_000),
    ]
    return {p.name: p for p in problems}


def _tuning(dim: int = 100) -> dict[str, Problem]:
    problems = [_deterministic(o.name, o.label, dim, 0.0, o.fn)
                for o in synthetic.OBJECTIVES.values()]
    problems += [Problem(o.name, o.label, dim, MAX_BUDGET, 0.0, o.fn, o.gap)
                 for o in synthetic.NOISY.values()]
    problems.append(Problem("teacher_minibatch", "Two-layer tanh regression, minibatch (d=97)",
                            _mlp_size(*TEACHER_SHAPE), MAX_BUDGET, 1.0, teacher_minibatch,
                            teacher_gap))
    return {p.name: p for p in problems}


HELD_OUT: dict[str, Problem] = _held_out()
TUNING: dict[str, Problem] = _tuning()
SETS = {"heldout": HELD_OUT, "tuning": TUNING}
