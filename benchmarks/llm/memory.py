"""Compiled memory of one forward pass, one zeroth-order step and one backpropagation step.

The figure is XLA's own account of a compiled function: temp + output bytes of
``jax.jit(f).lower(...).compile().memory_analysis()`` (arguments, i.e. the frozen weights
and the batch, are not counted: every variant shares them). A zeroth-order step is
measured twice: *vectorized* (the estimator's 2K perturbed passes in one vmapped call, so
activations grow with K) and *sequential* (:class:`train.Bundle` with ``sequential``, i.e.
:func:`zoaq_jax.sequential`: the passes run one after another, so activation memory
stays that of one pass whatever K is).

Example::

    rows = memory_rows(bundle, {"MeZO K=4": mezo_opt}, batch)
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import optax

from benchmarks.llm import baselines, train
from benchmarks.llm.models import lora as lora_lib


def compiled_bytes(fn, *args) -> int:
    """Temp + output bytes of ``fn`` compiled for ``args``."""
    stats = jax.jit(fn).lower(*args).compile().memory_analysis()
    return int(stats.temp_size_in_bytes + stats.output_size_in_bytes)


def memory_rows(bundle: train.Bundle, optimizers: dict[str, Any], batch: dict,
                learning_rate: float = 1e-3) -> list[dict]:
    """``[{what, bytes}]``: a forward pass, each optimizer's step vectorized and sequential,
    and a backpropagation (Adam) step, all on ``batch``."""
    lora = lora_lib.init_adapters(bundle.lora, 0)
    rows = [{"what": "forward pass (loss)",
             "bytes": compiled_bytes(bundle.differentiable, lora, bundle.base, batch)}]
    for sequential in (False, True):
        b = dataclasses.replace(bundle, sequential=sequential)
        for name, opt in optimizers.items():
            step = train.make_step(opt, b.loss)
            mode = "sequential" if sequential else "vectorized"
            rows.append({"what": f"{name} step ({mode})",
                         "bytes": compiled_bytes(step, lora, opt.init(lora), b.base, batch)})
    adam = optax.adam(learning_rate)
    rows.append({"what": "backprop + Adam step",
                 "bytes": compiled_bytes(baselines.backprop_step(bundle.differentiable, adam),
                                         lora, adam.init(lora), bundle.base, batch)})
    return rows
