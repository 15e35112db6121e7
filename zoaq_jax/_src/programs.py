"""The cache of :func:`zoaq_jax.run`'s compiled programs, by the identity of their parts.

A program is cached as ``jax.jit`` caches a function: by the identity of the objects it
is traced from (the optimizer's ``init`` and ``update`` and the objective), so a new
function (another closure, global, default or schedule) is a new program. Nothing here
keeps the objects alive: the cache holds weak references and drops a program when one
of its objects is collected, with the arrays its trace captured.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, NamedTuple

_PROGRAMS: dict[tuple[int, ...], Any] = {}  # ids of (init, update, value_fn) -> program


class _Program(NamedTuple):
    jitted: Callable[..., Any]
    finalizers: list


def cached(parts: tuple, build: Callable[[Callable[[], tuple]], Callable[..., Any]]
           ) -> Callable[..., Any]:
    """The program ``build(get)`` of ``parts`` (``get()`` returns them), cached by their
    identity. Parts that cannot be weakly referenced are not cached (a new program each
    call)."""
    key = tuple(map(id, parts))
    found = _PROGRAMS.get(key)
    if found is not None:
        return found.jitted
    try:
        refs = tuple(weakref.ref(part) for part in parts)
    except TypeError:
        return build(lambda: parts)
    entry = _Program(build(lambda: tuple(ref() for ref in refs)), [])
    _PROGRAMS[key] = entry
    entry.finalizers.extend(weakref.finalize(part, _forget, key) for part in parts)
    return entry.jitted


def _forget(key: tuple[int, ...]) -> None:
    """Drops the program of ``key`` (one of its objects was collected)."""
    entry = _PROGRAMS.pop(key, None)
    for finalizer in entry.finalizers if entry is not None else ():
        finalizer.detach()
