"""Objectives that live outside JAX (NumPy, PyTorch, simulators, remote services)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


def host_oracle(
    fn: Callable[..., Any],
    *,
    vectorized: bool = False,
    dtype: Any = jnp.float32,
) -> Callable[..., jax.Array]:
    r"""Wraps a host-side objective so that the estimators can call it under ``jit``.

    .. math:: \mathrm{value\_fn}(x, **kw) = \mathrm{fn}(\mathrm{numpy}(x), **\mathrm{numpy}(kw))

    The wrapped function calls ``fn`` through :func:`jax.pure_callback` with NumPy
    arrays (convert to ``torch.from_numpy`` inside ``fn`` if needed) and keeps ``fn``'s
    signature, so keyword data is still matched by name; string keywords (a mode, a
    name) reach ``fn`` unchanged. A ``fn`` naming ``noise_key`` gets every call's PRNG
    key (see :func:`fixed_estimator`) as its raw uint32 data, as it gets any typed key
    (``jax.random.key_data``; :func:`numpy_generator` makes a NumPy generator of it). ``fn`` must be a pure function
    of its arguments: JAX may call it in any order, and under ``jax.vmap`` or a batched
    ``while_loop`` it is also called for lanes whose result is discarded (those calls
    are not counted in ``num_queries``; they are wasted host work).

    Args:
      fn: ``fn(params, **kwargs) -> float``, params as a PyTree of NumPy arrays.
      vectorized: ``fn`` takes one leading batch axis on every argument and returns
        one value per row. All evaluations batched by ``jax.vmap`` (perturbations,
        seeds, any nesting) then arrive in one host call, flattened into that axis;
        a single evaluation arrives as a batch of one.
      dtype: dtype of the returned value.

    Returns:
      A JAX-traceable ``value_fn`` with ``fn``'s signature.

    An exception raised by ``fn`` reaches the caller as JAX's ``JaxRuntimeError``
    (whose message holds ``fn``'s traceback) wherever JAX dispatches the computation.
    Inside :func:`host_errors` it is re-raised as ``fn``'s own exception (same object,
    type, message and traceback, chained to the runtime error); an un-jitted
    ``update`` of any estimator and :func:`zoaq_jax.run` do this by themselves, and
    wait for the computation before they return (on backends that dispatch
    asynchronously, such as GPUs, the error would otherwise surface later).

    Example:
      >>> import jax, numpy as np, jax.numpy as jnp, optax, zoaq_jax
      >>> calls = []
      >>> def sphere(x, shift):  # plain NumPy
      ...     calls.append(1)
      ...     return float(np.sum((x - shift) ** 2))
      >>> f = zoaq_jax.host_oracle(sphere)
      >>> est = zoaq_jax.fixed_estimator(k=3, difference="forward")
      >>> params = jnp.zeros(4)
      >>> g, state = est.update(None, est.init(params), params, value_fn=f, shift=jnp.ones(4))
      >>> len(calls), int(optax.tree.get(state, "num_queries"))  # 1 centre + 3 directions
      (4, 4)

    References:
      JAX documentation, External callbacks (``jax.pure_callback``).
    """
    result = jax.ShapeDtypeStruct((), dtype)

    def _result(value, shape):
        if value is None:  # np.asarray(None, float) is NaN: a silent zero update
            raise TypeError(
                f"host_oracle: {getattr(fn, '__name__', 'fn')} returned None; it must "
                "return the objective's value (a float, or one per row when vectorized)."
            )
        return np.asarray(value, dtype).reshape(shape)

    @functools.wraps(fn)
    def value_fn(*args, **kwargs):
        _ERRORS.used += 1  # a host computation: an un-jitted update waits for it
        text = {k: v for k, v in kwargs.items() if isinstance(v, (str, bytes))}
        kwargs = {k: v for k, v in kwargs.items() if k not in text}
        # typed PRNG keys (noise_key, carried key leaves) cross as their uint32 data
        args, kwargs = jax.tree.map(_key_data, (args, kwargs))
        shapes = [jnp.shape(x) for x in jax.tree.leaves((args, kwargs))]

        @_recorded
        def on_host(*a, **kw):
            leaves, tree = jax.tree.flatten((a, kw))
            if not vectorized:
                a, kw = jax.tree.unflatten(tree, [np.asarray(x) for x in leaves])
                return _result(fn(*a, **kw, **text), ())
            # Every vmap level adds a leading axis (size 1 where that argument is not
            # mapped): broadcast them to one batch shape and flatten it into one axis.
            batch = np.broadcast_shapes(
                *(np.shape(x)[: np.ndim(x) - len(s)] for x, s in zip(leaves, shapes)))
            rows = [np.broadcast_to(x, batch + s).reshape((-1, *s))
                    for x, s in zip(leaves, shapes)]
            a, kw = jax.tree.unflatten(tree, rows)
            return _result(fn(*a, **kw, **text), batch)

        method = "expand_dims" if vectorized else "sequential"
        return jax.pure_callback(on_host, result, *args, vmap_method=method, **kwargs)

    return value_fn


def _key_data(x: Any) -> Any:
    """A typed PRNG key array as its raw uint32 data (NumPy cannot hold typed keys)."""
    if jnp.issubdtype(jnp.result_type(x), jax.dtypes.prng_key):
        return jax.random.key_data(x)
    return x


def numpy_generator(noise_key: Any) -> np.random.Generator:
    r"""A NumPy random generator seeded by a call's key, for host objectives.

    .. math:: \mathrm{noise\_key} \mapsto \mathrm{Generator}(\mathrm{PCG64}(
      \mathrm{SeedSequence}(\mathrm{noise\_key})))

    A :func:`host_oracle` function that names ``noise_key`` receives the call's key as
    its raw data (``jax.random.key_data``: a uint32 array of shape ``(2,)``; one row
    per evaluation, ``(n, 2)``, when ``vectorized``). This turns one key's data into a
    :class:`numpy.random.Generator` whose stream is a function of the key alone
    (its words are the :class:`numpy.random.SeedSequence`'s entropy), so a simulator
    drawing from it is as reproducible as the keys: the same call gets the same draws,
    other calls independent ones.

    Args:
      noise_key: one key's data (uint32 words), or a typed JAX key.

    Returns:
      A :class:`numpy.random.Generator`.

    Example:
      >>> import numpy as np, jax.numpy as jnp, zoaq_jax
      >>> def simulate(x, noise_key):  # a NumPy simulator with its own randomness
      ...     rng = zoaq_jax.numpy_generator(noise_key)
      ...     return float(np.sum((x - rng.normal(size=x.shape)) ** 2))
      >>> est = zoaq_jax.fixed_estimator(k=2)
      >>> f = zoaq_jax.host_oracle(simulate)
      >>> g, state = est.update(None, est.init(jnp.zeros(3)), jnp.zeros(3), value_fn=f)
      >>> g.shape
      (3,)

    References:
      NumPy documentation, Random Generator and SeedSequence.
    """
    words = np.asarray(_key_data(noise_key), np.uint32)
    if words.ndim != 1:
        raise ValueError(
            f"numpy_generator takes one key's data (shape (2,) for threefry keys), got "
            f"shape {words.shape}; with host_oracle(vectorized=True), make one generator "
            "per row: [numpy_generator(k) for k in noise_key].")
    return np.random.default_rng(np.random.SeedSequence(words.tolist()))


class _Errors:
    """The last exception a host function raised (callbacks may run on another thread
    than the caller's, e.g. on GPUs: not thread-local) and a count of host-objective
    calls (traced or eager), by which an un-jitted update knows it must wait."""

    error: BaseException | None = None
    used: int = 0


_ERRORS = _Errors()


def note_error(err: BaseException) -> None:
    """Notes ``err``, raised by a host callback, for :func:`host_errors` to re-raise."""
    _ERRORS.error = err


def _recorded(callback: Callable[..., Any]) -> Callable[..., Any]:
    """``callback`` noting the exception it raises for :func:`host_errors`."""

    @functools.wraps(callback)
    def wrapped(*args, **kwargs):
        try:
            return callback(*args, **kwargs)
        except Exception as err:
            note_error(err)
            raise

    return wrapped


class _HostErrors:
    """:func:`host_errors`: a context manager, and a decorator that also waits for a
    concrete result computed with a host objective (so that its exception is raised by
    the decorated call even where JAX dispatches asynchronously)."""

    def __enter__(self) -> None:
        _ERRORS.error = None

    def __exit__(self, kind, err, traceback) -> None:
        if isinstance(err, jax.errors.JaxRuntimeError):
            pending, _ERRORS.error = _ERRORS.error, None
            if pending is not None:
                raise pending from err

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with self:
                used = _ERRORS.used
                out = fn(*args, **kwargs)
                if _ERRORS.used != used and not any(
                        isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(out)):
                    jax.block_until_ready(out)
                return out

        return wrapped


def host_errors() -> _HostErrors:
    """Re-raises, inside the block, a :func:`host_oracle` function's own exception.

    A host function runs inside a JAX computation, so its exception reaches Python as
    ``jax.errors.JaxRuntimeError``. Inside this block (also usable as a decorator) such
    an error caused by a host function is replaced by the host function's exception
    itself, with its type, message and traceback (the runtime error is its
    ``__cause__``), so that ``except YourError:`` works.

    Example:
      >>> import jax, jax.numpy as jnp, zoaq_jax
      >>> def simulator(x):
      ...     raise ValueError("simulator diverged")
      >>> f = jax.jit(zoaq_jax.host_oracle(simulator))
      >>> try:
      ...     with zoaq_jax.host_errors():
      ...         f(jnp.ones(2))
      ... except ValueError as err:
      ...     print(err)
      simulator diverged

    References:
      JAX documentation, External callbacks (``jax.pure_callback``).
    """
    return _HostErrors()
