"""The objective as the estimators see it: keyword binding, checks, finite differences.

Estimators receive the objective as ``value_fn`` and its data as further keywords, as
Optax's line searches do: the keywords whose names match ``value_fn``'s parameters are
forwarded, the rest are left for the other members of an ``optax.chain``.

An objective with its own randomness (a stochastic simulation, a noisy measurement, an
RL rollout) names a parameter :data:`NOISE_KEY` (``noise_key``): the estimator fills it
at every oracle call with a fresh typed PRNG key (:class:`CallKeys`), never from data.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from zoaq_jax._src import directions as dirs

DIFFERENCES = ("central", "forward")

_NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
RESERVED = frozenset({"value"})  # update()'s own keywords besides value_fn

NOISE_KEY = "noise_key"
"""The parameter of ``value_fn`` that receives a fresh PRNG key at every oracle call.

A ``value_fn`` with a parameter of this name (after the params, positional-or-keyword or
keyword-only) is called as ``value_fn(x, noise_key=k, **data)``: the estimator derives
``k`` from its own key and the call's index (:class:`CallKeys`) and fills it at every
call, its default (if any) never used; passing a data keyword of this name to
``update`` or :func:`zoaq_jax.run` is refused. A ``value_fn`` without it is called as
before. Not ``key``: that is the estimators' own option (``zoaq(lr, key=0)``), and
objectives that already take a ``key`` as data (a dropout key a training loop passes)
keep it."""

COMMON_RANDOM_NUMBERS = True
"""Whether the calls of one finite difference share a key (common random numbers), the
default of every factory's ``common_random_numbers``: see :class:`CallKeys`."""


def bind(value_fn: Callable[..., jax.Array], params: optax.Params,
         extra_args: Mapping[str, Any]) -> Callable[..., jax.Array]:
    """Returns ``x -> value_fn(x, **kw)`` with ``kw`` taken from ``extra_args`` by name;
    ``(x, key) -> value_fn(x, noise_key=key, **kw)`` when ``value_fn`` takes
    :data:`NOISE_KEY` (:func:`takes_noise_key`).

    Args:
      value_fn: the objective; its first parameter receives the (perturbed) params.
      params: the current parameters, used to check the call.
      extra_args: keywords given to ``update``; those that ``value_fn`` names (all of
        them if it takes ``**kwargs``) are forwarded.

    Returns:
      A function of the params (and of a typed PRNG key, see above) returning a scalar
      array.

    Raises:
      TypeError: ``value_fn`` is not callable, cannot be called with the forwarded
        keywords (for example a required data argument is missing), names a data
        parameter ``value`` (update()'s own keyword), is given a data keyword
        ``noise_key`` that the estimator fills (or would forward through ``**kwargs``),
        or is not traceable by JAX (a NumPy objective: the error names
        :func:`zoaq_jax.host_oracle`).
      ValueError: ``value_fn`` does not return a real scalar of at least float32
        precision (a bfloat16 or float16 loss cannot resolve finite differences).
    """
    if not callable(value_fn):
        raise TypeError(f"value_fn must be callable, got {type(value_fn).__name__}.")
    check_params(params)
    signature = signature_of(value_fn)
    noisy = takes_noise_key(value_fn)
    if signature is None or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.parameters.values()
    ):
        kwargs = dict(extra_args)
        if NOISE_KEY in kwargs and signature is not None and not noisy:
            raise TypeError(
                f"A data keyword {NOISE_KEY!r} was passed for value_fn{signature}, which "
                f"takes **kwargs and would receive it as data, the same key at every "
                f"call. The estimator fills {NOISE_KEY!r} itself, a fresh key at every "
                f"oracle call, for a value_fn that names it as a parameter: add "
                f"{NOISE_KEY} to value_fn's parameters and drop the keyword, or pass "
                "your key under another name.")
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
    if noisy and NOISE_KEY in kwargs:
        raise TypeError(
            f"A data keyword {NOISE_KEY!r} was passed for value_fn{signature}, whose "
            f"parameter {NOISE_KEY!r} the estimator fills with a fresh PRNG key at every "
            f"oracle call (zoaq_jax.NOISE_KEY), derived from its own key. Drop the "
            f"keyword (set the estimator's key=, or run's seed=, to change the keys), or "
            f"rename the parameter and pass your key under the new name (it is then "
            "data: the same key at every call).")
    if signature is not None:
        try:
            signature.bind(params, **kwargs, **({NOISE_KEY: None} if noisy else {}))
        except TypeError as err:
            given = "".join(f", {k}=..." for k in sorted(kwargs))
            raise TypeError(
                f"value_fn{signature} cannot be called as value_fn(params{given}): {err}. "
                "Pass the data value_fn needs to update() as keywords named after its "
                "parameters."
            ) from None
    fn = functools.partial(value_fn, **kwargs)
    try:
        if noisy:  # the points it is evaluated at, and a key of the noise stream
            out = jax.eval_shape(lambda x, key: fn(x, **{NOISE_KEY: key}),
                                 dirs.promote(params), _key_shape())
        else:
            out = jax.eval_shape(fn, dirs.promote(params))
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
    if noisy:
        return lambda x, key: jnp.reshape(fn(x, **{NOISE_KEY: key}), ())
    return lambda x: jnp.reshape(fn(x), ())


def takes_noise_key(value_fn: Callable[..., Any]) -> bool:
    """Whether ``value_fn`` receives a PRNG key at every call: it names a data parameter
    :data:`NOISE_KEY` that ``functools.partial`` has not bound, itself or inside a
    wrapper that keeps its signature (a key bound by the caller is the caller's choice,
    kept as it is)."""
    signature = signature_of(value_fn)
    if signature is None or NOISE_KEY not in data_parameters(signature):
        return False
    fn: Any = value_fn
    while fn is not None:  # through wrappers (functools.wraps: host_oracle, sequential)
        if isinstance(fn, functools.partial) and NOISE_KEY in fn.keywords:
            return False
        fn = getattr(fn, "__wrapped__", None)
    return True


@functools.cache
def _key_shape() -> jax.ShapeDtypeStruct:
    """The shape and dtype of a key of the objective's noise stream (:class:`CallKeys`)."""
    return jax.ShapeDtypeStruct((), jax.eval_shape(jax.random.key, 0).dtype)


def common_random_numbers(value: Any) -> bool:
    """``value`` as the static ``common_random_numbers`` setting, or a clear error."""
    if isinstance(value, jax.core.Tracer) or not isinstance(value, (bool, np.bool_)):
        raise TypeError(
            f"common_random_numbers must be True or False, a static Python bool: it "
            f"decides which oracle calls share a PRNG key when the step is traced; got "
            f"{value!r}. Under optax.inject_hyperparams, list 'common_random_numbers' in "
            "static_args.")
    return bool(value)


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


class CallKeys(NamedTuple):
    """The objective's keys for the oracle calls of one step (an objective that takes
    :data:`NOISE_KEY`).

    The call with index :math:`n`, the estimator's count of calls before it
    (``num_queries``), gets the key ``fold_in(root, n)``, where ``root`` is the run key's
    noise stream (:func:`zoaq_jax._src.ledger.noise_root`). A step's calls are numbered
    in the order they are counted, from ``first``, the ledger's count before the step:
    a centre value the step queries first (offset 0), then fresh direction :math:`i`
    (its index in the step, whatever chunk buys it) at ``centre_calls + i`` (forward) or
    its plus and minus points at ``centre_calls + 2i`` and ``centre_calls + 2i + 1``
    (central; HiZOO queries a centre too).
    So a key is counted with its call, reproducible from the ledger alone (a resumed run
    continues the stream), equal under ``vmap`` to the seed's own, and the same however
    the step's directions are chunked, predrawn or split over devices. Retained records
    make no call and take no key.

    With ``common`` (common random numbers, ``common_random_numbers=True``), the calls of
    one difference share the key of its first call: a central pair both use
    :math:`2i`; a centre value the step queries is in every difference of the step
    (forward differences, HiZOO's second differences), so then every call of the step
    shares the centre's key (offset 0). A centre value the caller passes as ``value``
    is the caller's call: the points then have keys of their own. For noise that the points'
    common key reproduces (a simulation's random draws), a difference then sees how
    the objective changes, not how two draws differ: the noise in the difference falls
    with ``mu`` instead of growing as ``1 / mu``.
    """

    root: jax.Array  # the run's noise stream, a typed key
    first: jax.Array  # uint32, the ledger's count of calls before the step
    centre_calls: int = 0  # static: 1 when the step queries a forward centre value first
    common: bool = False  # static: the calls of one difference share a key

    def at(self, offsets: jax.Array | int) -> jax.Array:
        """The keys of the step's calls at ``offsets`` (a scalar or an array of them)."""
        index = self.first + jnp.asarray(offsets, jnp.uint32)
        if not jnp.ndim(index):
            return jax.random.fold_in(self.root, index)
        return jax.vmap(jax.random.fold_in, in_axes=(None, 0))(self.root, index)

    def offsets(self, scheme: str, first: jax.Array | int, size: int, minus: bool = False
                ) -> jax.Array:
        """The offsets of the keys used at fresh directions ``first .. first+size-1`` of
        the step: their plus points, or with ``minus`` their central minus points."""
        i = jnp.asarray(first, jnp.uint32) + jnp.arange(size, dtype=jnp.uint32)
        if self.common and self.centre_calls:  # the centre is in every difference
            return jnp.zeros((size,), jnp.uint32)
        if scheme == "forward":
            return self.centre_calls + i
        return self.centre_calls + 2 * i + (1 if minus and not self.common else 0)


class FiniteDifference(NamedTuple):
    """A finite-difference scheme over a bound objective.

    * central: :math:`r = (f(x + \\mu u) - f(x - \\mu u)) / (2\\mu)`, 2 calls a direction.
    * forward: :math:`r = (f(x + \\mu u) - f(x)) / \\mu`, 1 call a direction plus one
      centre value :math:`f(x)` per step, shared by all directions of the step.

    Perturbed points (and a queried centre) reach the objective in the compute dtypes
    (float32 for bfloat16/float16 leaves; see :func:`directions.perturb`), and
    differences are taken in the objective's own precision (at least float32), so a
    float64 objective keeps the digits a difference needs; responses are float32.
    With ``keys`` (an objective that takes :data:`NOISE_KEY`: ``fn(x, key)``), every
    call gets its key (:class:`CallKeys`); without, ``fn(x)`` is called as it always was.
    """

    fn: Callable[..., jax.Array]
    mu: float | jax.Array
    scheme: str
    keys: CallKeys | None = None  # the step's call keys, when fn takes one

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
        caller already has it) and the oracle calls it cost (:meth:`centre_calls`); a
        queried centre value is the step's first call (key offset 0)."""
        calls = self.centre_calls(value)
        if self.scheme == "central":
            return None, calls
        if value is not None:
            return _at_least_f32(jnp.reshape(jnp.asarray(value), ())), calls
        x = dirs.promote(params)
        return _at_least_f32(self.fn(x) if self.keys is None
                             else self.fn(x, self.keys.at(0))), calls

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

    def values(self, params: optax.Params, directions: optax.Updates,
               offsets: jax.Array | None = None) -> jax.Array:
        """``f(x + mu u_i)`` for a batch of directions, in one vectorised call; with
        ``keys``, the call with direction ``i`` gets the key at ``offsets[i]``."""
        points = dirs.perturb(params, directions, self.mu)
        if self.keys is None:
            return _at_least_f32(jax.vmap(self.fn)(points))
        assert offsets is not None  # callers with keys say which calls these are
        return _at_least_f32(jax.vmap(self.fn)(points, self.keys.at(offsets)))

    def responses(
        self, params: optax.Params, directions: optax.Updates, centre: jax.Array | None,
        first: jax.Array | int = 0,
    ) -> tuple[jax.Array, jax.Array]:
        """Scalar float32 responses ``r_i`` for a batch of directions (leading axis), the
        step's fresh directions ``first, first + 1, ...`` (which fixes their calls' keys).

        Also returns, per direction, a free estimate of ``f(x)`` from the same calls: the
        midpoint ``(f(x + mu u) + f(x - mu u)) / 2`` (central) or ``f(x + mu u)``
        (forward, where the centre value itself is the better estimate).
        """
        keys, size = self.keys, jax.tree.leaves(directions)[0].shape[0]
        if self.scheme == "forward":
            assert centre is not None  # the forward scheme's callers pass the centre value
            plus = self.values(params, directions, None if keys is None
                               else keys.offsets(self.scheme, first, size))
            r, value = (plus - centre) / self.mu, plus
        else:
            plus, minus = self.pair_values(params, directions, first)
            r, value = (plus - minus) / (2 * self.mu), (plus + minus) / 2
        return r.astype(jnp.float32), value.astype(jnp.float32)

    def pair_values(self, params: optax.Params, directions: optax.Updates,
                    first: jax.Array | int = 0) -> tuple[jax.Array, jax.Array]:
        """``(f(x + mu u_i), f(x - mu u_i))`` for the step's fresh directions ``first,
        first + 1, ...`` (a leading axis), in one vectorised call, in the objective's
        precision (at least float32); with ``keys``, each call with its key."""
        keys, size = self.keys, jax.tree.leaves(directions)[0].shape[0]
        both = jax.tree.map(lambda u: jnp.concatenate([u, -u]), directions)
        offsets = None if keys is None else jnp.concatenate(
            [keys.offsets("central", first, size),
             keys.offsets("central", first, size, minus=True)])
        plus, minus = jnp.split(self.values(params, both, offsets), 2)
        return plus, minus


def mean_value(value_sum: jax.Array, n_ok: jax.Array) -> jax.Array:
    """A step's free estimate of ``f(x)`` from its ``n_ok`` finite records, whose own
    estimates (central midpoints, or forward ``f(x + mu u)``) sum to ``value_sum``; NaN
    when there is none."""
    return jnp.where(n_ok > 0, value_sum / jnp.maximum(n_ok, 1), jnp.nan)


def _at_least_f32(value: jax.Array) -> jax.Array:
    return value.astype(jnp.promote_types(value.dtype, jnp.float32))
