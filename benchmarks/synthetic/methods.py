"""The synthetic benchmark's comparison: its methods and its reference.

Methods are specs of the shared registry :data:`benchmarks.methods.SYNTHETIC` (the paper's
synthetic settings, Appendix, Tables 5-6; variants: :func:`benchmarks.methods.variant`): ``zoaq``,
``radazo`` (R-AdaZO K=10), ``radazo:k=2``, ``zo_adamm``, ``statzo``, ``zoar`` (ZoAR
K=10), ``auto_k``, ``zoaq:backbone=zo_adamm``, ``zoaq:reset=half`` ... Every method is
``optax.chain(estimator, monitor_consistency, backbone, lr)``: the monitor records the
momentum-consistency score ``cos(g_t, m_{t-1})`` of any estimator (the paper's cosine
diagnostic), and leaves the updates unchanged.
"""

from __future__ import annotations

# The paper's comparison (the main preset), unchanged when methods are added.
MAIN_METHODS = ("zoaq", "radazo:k=2", "radazo:k=4", "radazo:k=8", "radazo", "zo_adamm",
                "statzo", "zoar")
REFERENCE = "radazo"  # R-AdaZO K=10: the fixed baseline of savings and speed ratios


