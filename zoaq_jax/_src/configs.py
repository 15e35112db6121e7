"""Static stand-ins for callables: equal when built alike, holding the callable weakly.

``jax.jit`` caches a compiled program per value of its static arguments, compared with
``==``, and keeps those values alive. An optimizer is a tuple of closures, which compare
by identity: every new ``zoaq(...)`` object would compile again and stay alive in the
cache. :class:`Static` compares callables by their *configuration* instead (code, default
arguments and the values their closures hold, recursively; arrays by dtype, shape and
bytes) and refers to the callable itself only weakly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import types
import weakref
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

_SCALARS = (bool, int, str, bytes, type(None), complex)
_SHARED = (types.BuiltinFunctionType, types.ModuleType, type)


def fingerprint(obj: Any, seen: frozenset = frozenset()) -> Any:
    """A hashable value equal for objects that behave alike; a fresh token when unsure.

    Functions are described by their code, defaults and closure contents; tuples, dicts
    and frozen dataclasses by their items; concrete arrays (typed keys included) by dtype,
    shape and bytes; modules, classes and builtins by themselves (they live as long as the
    process).
    Any other object (a list, a user's object) is compared by identity and kept alive by
    the fingerprint; a tracer gets a token equal only to itself.
    """
    if isinstance(obj, float):
        return ("float", obj.hex())
    if isinstance(obj, _SCALARS):
        return (type(obj), obj)
    if isinstance(obj, _SHARED):
        return ("shared", obj)
    if isinstance(obj, tuple):
        return (type(obj), tuple(fingerprint(x, seen) for x in obj))
    if isinstance(obj, dict):
        return (dict, tuple(sorted((k, fingerprint(v, seen)) for k, v in obj.items())))
    if (dataclasses.is_dataclass(obj) and not isinstance(obj, type)
            and obj.__dataclass_params__.frozen):  # type: ignore[attr-defined]
        # immutable: its fields describe it
        return ("dataclass", type(obj),
                tuple(fingerprint(getattr(obj, f.name), seen) for f in dataclasses.fields(obj)))
    if isinstance(obj, (np.ndarray, np.generic)) or (
            isinstance(obj, jax.Array) and not isinstance(obj, jax.core.Tracer)):
        if isinstance(obj, jax.Array) and jax.dtypes.issubdtype(obj.dtype, jax.dtypes.prng_key):
            return ("key", str(jax.random.key_impl(obj)), fingerprint(jax.random.key_data(obj)))
        a = np.asarray(obj)
        return ("array", a.dtype.str, a.shape, a.tobytes())
    if isinstance(obj, functools.partial):
        return ("partial", fingerprint(obj.func, seen), fingerprint(obj.args, seen),
                fingerprint(obj.keywords, seen))
    if isinstance(obj, contextlib.ContextDecorator) and hasattr(obj, "func"):
        # a @contextmanager used as a decorator (e.g. host_errors on an update function)
        return ("contextmanager", fingerprint(obj.func, seen),
                fingerprint(getattr(obj, "args", ()), seen),
                fingerprint(getattr(obj, "kwds", {}), seen))
    if isinstance(obj, types.MethodType):
        return ("method", fingerprint(obj.__func__, seen), fingerprint(obj.__self__, seen))
    if isinstance(obj, types.FunctionType):
        if id(obj) in seen:  # a recursive closure: its code identifies it
            return ("recursion", obj.__code__)
        seen = seen | {id(obj)}
        cells = []
        for cell in obj.__closure__ or ():
            try:
                cells.append(fingerprint(cell.cell_contents, seen))
            except ValueError:  # an empty cell
                cells.append(("empty",))
        return ("function", obj.__code__, fingerprint(obj.__defaults__, seen),
                fingerprint(obj.__kwdefaults__, seen), tuple(cells))
    if isinstance(obj, jax.core.Tracer):
        return ("token", object())  # never kept: equal to nothing else
    return ("object", _Identity(obj))


class _Identity:
    """Equal only to the same object (kept alive, so that its id is never reused)."""

    def __init__(self, obj: Any):
        self.obj = obj

    def __hash__(self) -> int:
        return id(self.obj)

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, _Identity) and other.obj is self.obj


class Static:
    """A callable as a static ``jit`` argument: compared by :func:`fingerprint`, held weakly.

    The callable must stay alive while the program that uses it is traced (it does: the
    caller of ``jit`` holds it); afterwards the compiled program no longer needs it.
    """

    def __init__(self, fn: Any):
        self.key = fingerprint(fn)
        try:
            self._ref: Callable[[], Any] = weakref.ref(fn)
        except TypeError:  # not weakly referable (e.g. a tuple of callables): held strongly
            self._ref = lambda: fn

    def __call__(self) -> Any:
        fn = self._ref()
        if fn is None:
            raise RuntimeError("Static: the callable was discarded before it was traced.")
        return fn

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, Static) and self.key == other.key
