"""Gates for :func:`zoaq_jax.adaptive_estimator`: candidate tests and their scores."""

from zoaq_jax._src.gates import (
    MomentumContext,
    MomentumGateState,
    NormTestState,
    accept,
    calibrate_threshold,
    cosine_score,
    momentum,
    momentum_norm,
    momentum_norm_score,
    norm_test,
    project,
    variance_score,
)

__all__ = [
    "MomentumContext",
    "MomentumGateState",
    "NormTestState",
    "accept",
    "calibrate_threshold",
    "cosine_score",
    "momentum",
    "momentum_norm",
    "momentum_norm_score",
    "norm_test",
    "project",
    "variance_score",
]
