"""The objective as the estimators see it: keyword binding, checks, finite differences.

Estimators receive the objective as ``value_fn`` and its data as further keywords, as
Optax's line searches do: the keywords whose names match ``value_fn``'s parameters are
forwarded, the rest are left for the other members of an ``optax.chain``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from zoaq_jax._src import directions as dirs

DIFFERENCES = ("central", "forward")

_NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
RESERVED = frozenset({"value"})  # update()'s own keywords besides value_fn


def bind(value_fn: Callable[..., jax.Array], params: optax.Params,
         extra_args: Mapping[str, Any]) -> Callable[[optax.Params], jax.Array]:
    """Returns ``x -> value_fn(x, **kw)`` with ``kw`` taken from ``extra_args`` by name.

    Args:
      value_fn: the objective; its first parameter receives the (perturbed) params.
      params: the current parameters, used to check the call.
      extra_args: keywords given to ``update``; those that ``value_fn`` names (all of
        them if it takes ``**kwargs``) are forwarded.

    Returns:
      A function of the params alone returning a scalar array.

    Raises:
      TypeError: ``value_fn`` is not callable, cannot be called with the forwarded
        keywords (for example a required data argument is missing), names a data
        parameter ``value`` (update()'s own keyword) or is not traceable by JAX (a NumPy
        objective: the error names :func:`zoaq_jax.host_oracle`).
      ValueError: ``value_fn`` does not return a real scalar of at least float32
        precision (a bfloat16 or float16 loss cannot resolve finite differences).
    """
    if not callable(value_fn):
        raise TypeError(f"value_fn must be callable, got {type(value_fn).__name__}.")
    check_params(params)
    signature = signature_of(value_fn)
    if signature is None or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.parameters.values()
    ):
        kwargs = dict(extra_args)
    else:
        names = set(data_parameters(signature))
        if RESERVED & names:
            raise TypeError(
                f"value_fn{signature} has a data parameter named "
                f"{sorted(RESERVED & names)[0]!r}, a keyword that update() keeps for "
                "itself (value: f(params), which forward differences reuse). Rename that "
                "parameter of value_fn (e.g. to 'target') and pass the data under the "
                "new name."
            )
        kwargs = {k: v for k, v in extra_args.items() if k in names}
    if signature is not None:
        try:
            signature.bind(params, **kwargs)
        except TypeError as err:
            given = "".join(f", {k}=..." for k in sorted(kwargs))
            raise TypeError(
                f"value_fn{signature} cannot be called as value_fn(params{given}): {err}. "
                "Pass the data value_fn needs to update() as keywords named after its "
                "parameters."
            ) from None
    fn = functools.partial(value_fn, **kwargs)
    try:
        out = jax.eval_shape(fn, dirs.promote(params))  # the points it is evaluated at
    except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError) as err:
        raise TypeError(
            f"value_fn {getattr(value_fn, '__name__', value_fn)!r} is not a JAX function: "
            f"it turned a traced value into a NumPy array or a Python number "
            f"({type(err).__name__}). The estimators call it under jit and vmap. For a "
            "NumPy, PyTorch or simulator objective, wrap it: "
            "value_fn=zoaq_jax.host_oracle(fn); for JAX code, replace Python control "
            "flow on values by jnp.where or jax.lax.cond."
        ) from err
    shape, dtype = getattr(out, "shape", None), getattr(out, "dtype", None)
    if shape not in ((), (1,)) or dtype is None or not jnp.issubdtype(dtype, jnp.floating):
        raise ValueError(
            "value_fn must return a real floating-point scalar (shape () or (1,)); got "
            f"{out!r}. Reduce the loss (e.g. take its mean) before returning it."
        )
    if jnp.finfo(dtype).nmant < jnp.finfo(jnp.float32).nmant:
        raise ValueError(
            f"value_fn returns {dtype} ({jnp.finfo(dtype).nmant + 1} significant bits): "
            "f(x + mu u) - f(x - mu u) is below its resolution for any useful mu, so the "
            "responses would be rounding noise or zero. Return the loss in float32: "
            "reduce it in float32 (e.g. jnp.mean(losses.astype(jnp.float32))); "
            "low-precision parameters and model computations are fine."
        )
    return lambda x: jnp.reshape(fn(x), ())


def signature_of(fn: Callable[..., Any]) -> inspect.Signature | None:
    """``fn``'s signature, None where it has none (builtins, some C extensions)."""
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


def data_parameters(signature: inspect.Signature) -> dict[str, inspect.Parameter]:
    """The parameters of ``value_fn`` (its ``signature``) that data keywords can fill: the
    named ones after the first (the params)."""
    return {p.name: p for p in list(signature.parameters.values())[1:] if p.kind in _NAMED}


def check_params(params: Any) -> None:
    """Raises a clear error, naming the leaf, for parameter trees an estimator cannot take.

    Accepted leaves: real floating-point arrays and Python floats (optimised, zero-size
    ones included) and typed PRNG key arrays (carried unchanged). Refused: complex,
    integer and bool leaves and anything else that is not an array, trees with
    ``optax.MaskedNode`` (an estimator inside ``optax.masked`` or ``multi_transform``
    would hand the objective a partial tree) and trees without a single optimised scalar.
    """
    masked = jax.tree.leaves(params, is_leaf=lambda x: isinstance(x, optax.MaskedNode))
    if any(isinstance(x, optax.MaskedNode) for x in masked):
        raise ValueError(
            "The estimator received params containing optax.MaskedNode: it sits inside "
            "optax.masked or optax.multi_transform, so the objective would see a partial "
            "tree. Put the estimator first (it needs every parameter to evaluate the "
            "objective) and pass frozen parameters to update() as data keywords of "
            "value_fn; mask the transformations after the estimator instead."
        )
    for path, leaf in jax.tree_util.tree_leaves_with_path(params):
        name = f"params{jax.tree_util.keystr(path)}"
        try:
            dtype = jnp.result_type(leaf)
        except TypeError:
            raise TypeError(
                f"{name} is a {type(leaf).__name__}, not an array: params may hold "
                "floating-point arrays, Python floats and PRNG keys only. Pass other "
                "objects to update() as data keywords of value_fn."
            ) from None
        if jnp.issubdtype(dtype, jnp.complexfloating):
            raise TypeError(
                f"{name} is {dtype}: zeroth-order estimators optimise real parameters. "
                "Store the real and imaginary parts as a real leaf (e.g. "
                "jnp.stack([z.real, z.imag])) and rebuild the complex value in value_fn."
            )
        if not (dirs.optimised(leaf) or dirs.is_key(leaf)):
            raise TypeError(
                f"{name} is {dtype}: only floating-point leaves can be optimised (and "
                "PRNG keys carried). Pass integer and bool arrays that are not trained to "
                "update() as data keywords of value_fn, or cast the leaf to a float dtype."
            )
    if not dirs.dimension(params):
        raise ValueError(
            "params has no floating-point scalar to optimise (got "
            f"{jax.tree.structure(params)}, {dirs.dimension(params)} optimised scalars): "
            "pass at least one non-empty floating-point array."
        )


class FiniteDifference(NamedTuple):
    """A finite-difference scheme over a bound objective.

    * central: :math:`r = (f(x + \\mu u) - f(x - \\mu u)) / (2\\mu)`, 2 calls a direction.
    * forward: :math:`r = (f(x + \\mu u) - f(x)) / \\mu`, 1 call a direction plus one
      centre value :math:`f(x)` per step, shared by all directions of the step.

    Perturbed points (and a queried centre) reach the objective in the compute dtypes
    (float32 for bfloat16/float16 leaves; see :func:`directions.perturb`), and
    differences are taken in the objective's own precision (at least float32), so a
    float64 objective keeps the digits a difference needs; responses are float32.
    """

    fn: Callable[[optax.Params], jax.Array]
    mu: float | jax.Array
    scheme: str

    @property
    def calls_per_direction(self) -> int:
        return 2 if self.scheme == "central" else 1

    def centre_calls(self, value: jax.Array | None) -> int:
        """Oracle calls of a step's centre value: 1 for forward differences that query
        ``f(x)``; 0 when the caller passes ``value`` (its call to count) and for central
        differences, which need no centre."""
        return int(self.scheme == "forward" and value is None)

    def step_calls(self, k: int | jax.Array, centre_calls: int) -> int | jax.Array:
        """Oracle calls of a step that buys ``k`` directions and ``centre_calls`` for its
        centre value (:meth:`centre_calls`; 0 for an estimator without a centre)."""
        return centre_calls + self.calls_per_direction * k

    def centre(self, params: optax.Params, value: jax.Array | None
               ) -> tuple[jax.Array | None, int]:
        """The centre value ``f(x)`` (``None`` for central differences; ``value`` when the
        caller already has it) and the oracle calls it cost (:meth:`centre_calls`)."""
        calls = self.centre_calls(value)
        if self.scheme == "central":
            return None, calls
        if value is not None:
            return _at_least_f32(jnp.reshape(jnp.asarray(value), ())), calls
        return _at_least_f32(self.fn(dirs.promote(params))), calls

    def coarse(self, params: optax.Params, family: dirs.Family) -> jax.Array | bool:
        """Whether an exactly-zero response may be blamed on ``mu`` (the
        ``num_zero_responses`` diagnostic). Sparse directions give the objective's own
        zeros (a support that misses every coordinate it reads): for them, only where a
        perturbation of size ``mu`` rounds away at some coordinate of ``params``
        (``x + mu == x`` in the compute dtype). Other families perturb every coordinate:
        always (``True``, no computation)."""
        if family.name != "sparse":
            return True
        lost = [jnp.any((x + jnp.asarray(self.mu, x.dtype) == x)
                        | (x - jnp.asarray(self.mu, x.dtype) == x))
                for x in jax.tree.leaves(dirs.promote(params))
                if dirs.optimised(x) and jnp.size(x)]
        return jnp.any(jnp.stack(lost)) if lost else jnp.asarray(False)

    def values(self, params: optax.Params, directions: optax.Updates) -> jax.Array:
        """``f(x + mu u_i)`` for a batch of directions, in one vectorised call."""
        return _at_least_f32(jax.vmap(self.fn)(dirs.perturb(params, directions, self.mu)))

    def responses(
        self, params: optax.Params, directions: optax.Updates, centre: jax.Array | None
    ) -> tuple[jax.Array, jax.Array]:
        """Scalar float32 responses ``r_i`` for a batch of directions (leading axis).

        Also returns, per direction, a free estimate of ``f(x)`` from the same calls: the
        midpoint ``(f(x + mu u) + f(x - mu u)) / 2`` (central) or ``f(x + mu u)``
        (forward, where the centre value itself is the better estimate).
        """
        if self.scheme == "forward":
            assert centre is not None  # the forward scheme's callers pass the centre value
            plus = self.values(params, directions)
            r, value = (plus - centre) / self.mu, plus
        else:
            both = jax.tree.map(lambda u: jnp.concatenate([u, -u]), directions)
            plus, minus = jnp.split(self.values(params, both), 2)
            r, value = (plus - minus) / (2 * self.mu), (plus + minus) / 2
        return r.astype(jnp.float32), value.astype(jnp.float32)


def mean_value(value_sum: jax.Array, n_ok: jax.Array) -> jax.Array:
    """A step's free estimate of ``f(x)`` from its ``n_ok`` finite records, whose own
    estimates (central midpoints, or forward ``f(x + mu u)``) sum to ``value_sum``; NaN
    when there is none."""
    return jnp.where(n_ok > 0, value_sum / jnp.maximum(n_ok, 1), jnp.nan)


def _at_least_f32(value: jax.Array) -> jax.Array:
    return value.astype(jnp.promote_types(value.dtype, jnp.float32))
