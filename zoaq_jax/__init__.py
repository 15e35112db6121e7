"""zoaq_jax: adaptive zeroth-order optimization as composable Optax transformations.

Estimators turn function values into gradient estimates (``updates``); backbones turn
estimates into steps; aliases chain both with a learning rate. An estimator comes first
in a chain (``zoaq_jax.chain`` refuses anything before it). Every estimator is an
``optax.GradientTransformationExtraArgs`` whose ``update`` takes the objective as the
keyword ``value_fn`` and its data as keywords named after ``value_fn``'s parameters.
"""

from zoaq_jax import budgets, gates, retention
from zoaq_jax._src.alias import (
    auto_k,
    hizoo,
    mezo,
    radazo,
    statzo,
    zo_adamm,
    zo_sgd,
    zoaq,
    zoar,
)
from zoaq_jax._src.auto_k import auto_k_estimator
from zoaq_jax._src.chain import Estimator, chain
from zoaq_jax._src.controller import AdaptiveState, adaptive_estimator
from zoaq_jax._src.fixed import fixed_estimator
from zoaq_jax._src.history import History
from zoaq_jax._src.hizoo import HiZOOState, hizoo_estimator
from zoaq_jax._src.host import host_errors, host_oracle, numpy_generator
from zoaq_jax._src.ledger import QueryLedger, check_responses
from zoaq_jax._src.loop import BLIND_STEPS, STATUSES, Trace
from zoaq_jax._src.run import run
from zoaq_jax._src.policies import (
    BudgetRule,
    Evidence,
    Gate,
    Grid,
    Outcome,
    Records,
    Retention,
)
from zoaq_jax._src.monitor import ConsistencyState, monitor_consistency
from zoaq_jax._src.oracle import NOISE_KEY
from zoaq_jax._src.radazo import ScaleByRAdaZOState, scale_by_radazo
from zoaq_jax._src.sequential import sequential
from zoaq_jax._src.sharded import replicate
from zoaq_jax._src.statzo import statzo_estimator
from zoaq_jax._src.step_control import ControlState
from zoaq_jax._src.tuning_free import TuningFreeState, tuning_free
from zoaq_jax._src.updates import apply_updates
from zoaq_jax._src.zo_adamm import ScaleByZOAdaMMState, scale_by_zo_adamm
from zoaq_jax._src.zoaq import zoaq_estimator
from zoaq_jax._src.zoar import ZoARState, zoar_estimator

__version__ = "0.1.0"

__all__ = [
    "AdaptiveState",
    "BLIND_STEPS",
    "BudgetRule",
    "ConsistencyState",
    "ControlState",
    "Estimator",
    "Evidence",
    "Gate",
    "Grid",
    "HiZOOState",
    "History",
    "NOISE_KEY",
    "Outcome",
    "QueryLedger",
    "Records",
    "Retention",
    "STATUSES",
    "ScaleByRAdaZOState",
    "ScaleByZOAdaMMState",
    "Trace",
    "TuningFreeState",
    "ZoARState",
    "adaptive_estimator",
    "apply_updates",
    "auto_k",
    "auto_k_estimator",
    "budgets",
    "chain",
    "check_responses",
    "fixed_estimator",
    "gates",
    "hizoo",
    "hizoo_estimator",
    "host_errors",
    "host_oracle",
    "mezo",
    "monitor_consistency",
    "numpy_generator",
    "radazo",
    "replicate",
    "retention",
    "run",
    "scale_by_radazo",
    "scale_by_zo_adamm",
    "sequential",
    "statzo",
    "statzo_estimator",
    "tuning_free",
    "zo_adamm",
    "zo_sgd",
    "zoaq",
    "zoaq_estimator",
    "zoar",
    "zoar_estimator",
]
