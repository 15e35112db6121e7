"""Budget rules for :func:`zoaq_jax.adaptive_estimator`: where each step starts."""

from zoaq_jax._src.budgets import (
    RESETS,
    ProgressState,
    ResetState,
    constant,
    next_budget,
    next_target,
    progress,
    progress_decision,
    reset,
    window_length,
    window_statistics,
)

__all__ = [
    "RESETS",
    "ProgressState",
    "ResetState",
    "constant",
    "next_budget",
    "next_target",
    "progress",
    "progress_decision",
    "reset",
    "window_length",
    "window_statistics",
]
