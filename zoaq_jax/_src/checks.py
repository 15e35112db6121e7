"""Construction-time validation of hyperparameters.

Every factory in :mod:`zoaq_jax` validates its arguments before it returns, so a bad
setting fails where it was written, not deep inside a compiled step. Real
hyperparameters must be scalars (a Python number or an array of shape ``()``); strings,
``None`` and arrays of other shapes are refused. Hyperparameters
that arrive as tracers (for example from :func:`optax.inject_hyperparams` or from a
``jax.vmap`` over settings) cannot be inspected; they are checked only when concrete.
Structural sizes (``k_min``, ``k_max``, ``n_hist``, ...) fix array shapes and must be
static Python integers.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


def concrete_value(x: Any) -> float | None:
    """Returns ``x`` as a Python float when it is concrete, else ``None``."""
    if isinstance(x, jax.core.Tracer):
        return None
    try:
        return float(np.asarray(x))
    except (TypeError, ValueError):
        return None


def static_int(name: str, value: Any, minimum: int) -> int:
    """Returns ``value`` as a Python int ``>= minimum`` or raises a clear error."""
    if isinstance(value, jax.core.Tracer):
        raise TypeError(
            f"{name} sets an array shape and must be a static Python int, got a traced "
            f"value. Under optax.inject_hyperparams, list {name!r} in static_args."
        )
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got a bool.")
    try:
        value = operator.index(value)
    except TypeError:
        arr = np.asarray(value)
        if arr.shape != () or not np.issubdtype(arr.dtype, np.integer):
            raise TypeError(f"{name} must be an int, got {value!r}.") from None
        value = int(arr)
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}.")
    return value


def count(name: str, value: Any, minimum: int) -> None:
    """Like :func:`static_int`, but a traced value (a hyperparameter) is accepted unchecked."""
    if not isinstance(value, jax.core.Tracer):
        static_int(name, value, minimum)


def positive(name: str, value: Any) -> None:
    """Raises unless ``value`` is a real scalar, finite and > 0 when concrete."""
    real_scalar(name, value)
    v = concrete_value(value)
    if v is not None and not (np.isfinite(v) and v > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}.")


def stability_term(name: str, value: Any) -> None:
    """Raises unless the denominator's stability term ``value`` is finite and > 0 (when
    concrete): with 0, an all-zero estimate (a step without a finite response, or a flat
    objective) makes ``0 / (sqrt(0) + 0)`` and every parameter NaN."""
    real_scalar(name, value)
    v = concrete_value(value)
    if v is not None and not (np.isfinite(v) and v > 0):
        raise ValueError(
            f"{name} must be a finite number > 0 (e.g. 1e-8), got {value!r}: with "
            f"{name} = 0 the first all-zero estimate divides 0 by 0 and turns every "
            "parameter into NaN."
        )


def finite(name: str, value: Any) -> None:
    """Raises unless ``value`` is a real scalar, finite when concrete (NaN and inf are
    refused: a NaN compares false with everything, an infinite bound makes every
    relative quantity 0 or NaN)."""
    real_scalar(name, value)
    v = concrete_value(value)
    if v is not None and not np.isfinite(v):
        raise ValueError(f"{name} must be a finite number, got {value!r}.")


def non_negative(name: str, value: Any) -> None:
    """Raises unless ``value`` is a real scalar, finite and >= 0 when concrete."""
    real_scalar(name, value)
    v = concrete_value(value)
    if v is not None and not (np.isfinite(v) and v >= 0):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}.")


def decay(name: str, value: Any) -> None:
    """Raises unless ``value`` is a real scalar in ``[0, 1)`` (when concrete)."""
    real_scalar(name, value)
    v = concrete_value(value)
    if v is not None and not (0.0 <= v < 1.0):
        raise ValueError(f"{name} must lie in [0, 1), got {value!r}.")


def in_closed_interval(name: str, value: Any, lo: float, hi: float) -> None:
    """Raises unless ``value`` is a real scalar in ``[lo, hi]`` (when concrete)."""
    real_scalar(name, value)
    v = concrete_value(value)
    if v is not None and not (lo <= v <= hi):
        raise ValueError(f"{name} must lie in [{lo}, {hi}], got {value!r}.")


def choice(name: str, value: Any, choices: Iterable[str]) -> str:
    """Returns ``value`` if it is one of ``choices``, else raises ``ValueError``."""
    choices = tuple(choices)
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}.")
    return value


def budget_grid(k_min: Any, k_max: Any, k_step: Any) -> tuple[int, int, int]:
    """Validates the direction-budget grid ``{k_min, k_min + k_step, ..., k_max}``.

    A ``k_step`` beyond ``k_max - k_min`` gives the grid ``{k_min, k_max}``; it is
    returned as ``k_max - k_min`` so that no retry evaluates directions past ``k_max``.
    """
    k_min = static_int("k_min", k_min, 1)
    k_max = static_int("k_max", k_max, 1)
    k_step = static_int("k_step", k_step, 1)
    if k_min > k_max:
        raise ValueError(f"k_min must be <= k_max, got k_min={k_min} > k_max={k_max}.")
    return k_min, k_max, min(k_step, max(k_max - k_min, 1))


def is_typed_key(key: Any) -> bool:
    """Whether ``key`` is a typed PRNG key (from ``jax.random.key``)."""
    dtype = getattr(key, "dtype", None)
    return dtype is not None and jnp.issubdtype(dtype, jax.dtypes.prng_key)


SEED_RANGE = (-(2**31), 2**32)
"""Integer seeds accepted, ``[-2**31, 2**32)``: ``jax.random.key`` keeps 32 bits of a seed
(without x64), so a larger seed would silently give the run of another one (``2**32``
that of ``0``). More streams: ``jax.random.fold_in(jax.random.key(a), b)``."""


def check_key(key: Any, name: str = "key") -> None:
    """Raises unless ``key`` is an integer seed in :data:`SEED_RANGE` or a single typed key."""
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
        lo, hi = SEED_RANGE
        if not lo <= int(key) < hi:
            raise ValueError(
                f"{name} must be an integer seed in [-2**31, 2**32), got {key}: JAX keeps "
                "32 bits of a seed, so this one would silently repeat the run of seed "
                f"{int(key) % 2**32}. For more streams pass a typed key, e.g. "
                "jax.random.fold_in(jax.random.key(a), b).")
        return
    dtype, shape = getattr(key, "dtype", None), getattr(key, "shape", None)
    if dtype is None or isinstance(key, bool):
        raise TypeError(
            f"key must be an integer seed or a typed key from jax.random.key, got {key!r}."
        )
    if jnp.issubdtype(dtype, jax.dtypes.prng_key):
        if shape != ():
            raise ValueError(f"key must be a single key, got a key array of shape {shape}.")
        return
    if shape == () and jnp.issubdtype(dtype, jnp.integer):
        return
    raise TypeError(
        "key must be an integer seed or a typed key from jax.random.key; got an array of "
        f"dtype {dtype} and shape {shape} (wrap legacy uint32 keys with "
        "jax.random.wrap_key_data)."
    )


def real_scalar(name: str, value: Any) -> None:
    """Raises ``TypeError`` unless ``value`` is a real number or a real array of shape ()."""
    if isinstance(value, (bool, np.bool_)) or isinstance(value, (str, bytes)) or value is None:
        raise TypeError(f"{name} must be a real scalar, got {value!r}.")
    dtype, shape = getattr(value, "dtype", None), getattr(value, "shape", None)
    if dtype is None:
        if isinstance(value, (int, float, np.number)):
            return
        raise TypeError(f"{name} must be a real scalar, got {type(value).__name__} {value!r}.")
    if shape != () or not (jnp.issubdtype(dtype, jnp.floating)
                           or jnp.issubdtype(dtype, jnp.integer)):
        raise TypeError(
            f"{name} must be a real scalar (shape ()), got an array of dtype {dtype} and "
            f"shape {shape}."
        )


def learning_rate(value: Any) -> None:
    """Raises unless ``value`` is an Optax schedule or a finite real scalar > 0."""
    if callable(value):
        return
    if value is None:
        raise TypeError(
            "learning_rate is required: pass a finite number > 0 or an Optax schedule "
            "(None would apply the raw estimate without a sign flip, i.e. ascend)."
        )
    positive("learning_rate", value)
