"""LoRA adapters (Hu et al. 2021) as MeZO uses them: r = 8, alpha = 16 on q and v projections.

``W x + (alpha / r) B A x`` with ``A`` drawn kaiming-uniform (PyTorch's default for a
linear layer, bound ``1 / sqrt(fan_in)``) and ``B = 0``, so a freshly adapted model
computes exactly what the base model computes. Adapter weights are :class:`LoRAParam`
variables (always float32), the base weights ``nnx.Param`` (any dtype): :func:`split`
separates the two, so only the adapters are perturbed and updated while the base
weights are passed to the objective once and shared by every perturbed forward pass.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from benchmarks.llm.models.layers import Linear

RANK = 8
ALPHA = 16.0


class LoRAParam(nnx.Variable):
    """A trainable adapter weight (the only thing zeroth-order optimizers touch)."""


class LoRALinear(nnx.Module):
    """A frozen :class:`Linear` plus a low-rank update ``scale * (x A) B``."""

    def __init__(self, base: Linear, rank: int, alpha: float, key: jax.Array):
        if rank < 1:
            raise ValueError(f"LoRA rank must be >= 1, got {rank}.")
        d_in, d_out = base.shape
        bound = 1.0 / d_in**0.5
        self.base = base
        self.lora_a = LoRAParam(jax.random.uniform(key, (d_in, rank), jnp.float32, -bound, bound))
        self.lora_b = LoRAParam(jnp.zeros((rank, d_out), jnp.float32))
        self.scale = float(alpha) / rank

    @property
    def shape(self) -> tuple[int, int]:
        return self.base.shape

    def __call__(self, x: jax.Array) -> jax.Array:
        a = self.lora_a[...].astype(x.dtype)
        b = self.lora_b[...].astype(x.dtype)
        return self.base(x) + self.scale * ((x @ a) @ b)


def first_tuned(model: nnx.Module, layers: int | None) -> int:
    """The first layer with adapters when the top ``layers`` layers are tuned (None: all)."""
    n = len(list(model.layers))
    if layers is None:
        return 0
    if not 1 <= layers <= n:
        raise ValueError(f"lora_layers must be in [1, {n}] (the model's layers), got {layers}; "
                         "omit it to adapt every layer.")
    return n - layers


def apply_lora(model: nnx.Module, *, rank: int = RANK, alpha: float = ALPHA,
               key: jax.Array | int = 0, first: int = 0) -> nnx.Module:
    """Wraps the projections named by ``model.lora_targets(first)`` (q and v of the layers
    from ``first`` on) in place.

    Returns the model. Each adapter draws ``A`` from its own key folded from ``key``.
    """
    key = jax.random.key(key) if isinstance(key, int) else key
    for i, (owner, name) in enumerate(model.lora_targets(first)):
        base = getattr(owner, name)
        if isinstance(base, LoRALinear):
            raise ValueError("apply_lora was already applied to this model.")  # noqa: TRY004
        setattr(owner, name, LoRALinear(base, rank, alpha, jax.random.fold_in(key, i)))
    return model


def split(model: nnx.Module) -> tuple[nnx.GraphDef, nnx.State, nnx.State]:
    """``(graphdef, lora, base)``: the adapters and everything else, as pytrees."""
    graphdef, lora, base = nnx.split(model, LoRAParam, ...)
    if not jax.tree.leaves(lora):
        raise ValueError("The model has no LoRA adapters; call apply_lora first.")
    return graphdef, lora, base


def merge(graphdef: nnx.GraphDef, lora: Any, base: Any) -> nnx.Module:
    """The module with adapters ``lora`` and base weights ``base`` (traceable)."""
    return nnx.merge(graphdef, lora, base)


def num_params(state: Any) -> int:
    return int(sum(x.size for x in jax.tree.leaves(state)))


def init_adapters(lora: Any, key: jax.Array | int) -> Any:
    """Fresh adapters shaped like ``lora``: ``A`` kaiming-uniform from ``key``, ``B = 0``.

    Lets one model serve several seeds: each seed redraws ``A`` without rebuilding the
    model. Leaves are told apart by their names (``lora_a`` / ``lora_b``).
    """
    key = jax.random.key(key) if isinstance(key, int) else key
    leaves = jax.tree_util.tree_flatten_with_path(lora)[0]
    out = []
    for i, (path, leaf) in enumerate(leaves):
        names = "/".join(str(getattr(p, "key", getattr(p, "name", p))) for p in path)
        if "lora_a" in names:
            bound = 1.0 / leaf.shape[0] ** 0.5
            out.append(jax.random.uniform(jax.random.fold_in(key, i), leaf.shape, jnp.float32,
                                          -bound, bound))
        elif "lora_b" in names:
            out.append(jnp.zeros(leaf.shape, jnp.float32))
        else:
            raise ValueError(f"Unexpected adapter leaf {names}.")
    return jax.tree.unflatten(jax.tree.structure(lora), out)
