"""Retention policies for :func:`zoaq_jax.adaptive_estimator`: which records outlive a step."""

from zoaq_jax._src.retention import RetainedState, fifo, none

__all__ = ["RetainedState", "fifo", "none"]
