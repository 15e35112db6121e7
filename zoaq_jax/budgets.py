"""Budget rules for :func:`zoaq_jax.adaptive_estimator`: where each step starts."""

from zoaq_jax._src.budgets import (
    RESETS,
    ProgressState,
    ResetState,
    Window,
    close_window,
    constant,
    next_budget,
    next_target,
    open_window,
    progress,
    progress_decision,
    reset,
    window_add,
    window_length,
    window_mean,
    window_statistics,
)

__all__ = [
    "RESETS",
    "ProgressState",
    "ResetState",
    "Window",
    "close_window",
    "constant",
    "next_budget",
    "next_target",
    "open_window",
    "progress",
    "progress_decision",
    "reset",
    "window_add",
    "window_length",
    "window_mean",
    "window_statistics",
]
