"""The progress callbacks of compiled runs, registered on the host by token.

A compiled run cannot hold a Python function: :func:`zoaq_jax.run` registers its
``progress`` callback under a fresh integer token, passes the token into the program,
and the program's ``io_callback`` calls :func:`report` with it at every log point. An
exception of the callback is kept under the same token, so that each run re-raises its
own.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np

from zoaq_jax._src import host

_LISTENERS: dict[int, Callable[[int, int], Any]] = {}  # progress callbacks by token
_ERRORS: dict[int, BaseException] = {}  # a progress callback's exception, by token
_DEFERRED: set[int] = set()  # tokens of runs under an outer transformation (run returned)
_TOKENS = itertools.count(1)


def register(listener: Callable[[int, int], Any]) -> int:
    """Registers ``listener`` and returns its token."""
    token = next(_TOKENS)
    _LISTENERS[token] = listener
    return token


def report(token, step, num_queries) -> np.ndarray:
    """Host side of the progress callback: calls the listener registered under ``token``.

    Returns whether the run may go on. When the listener raises, a run that ``run`` is
    still waiting for stops (``STOPPED``) and ``run`` re-raises the exception; a run
    under an outer transformation (executed after ``run`` returned) raises it here, for
    :func:`zoaq_jax.host_errors` to re-raise as itself.
    """
    token = int(token)
    listener = _LISTENERS.get(token)
    if listener is None or token in _ERRORS:
        return np.asarray(token not in _ERRORS)
    try:
        listener(int(step), int(num_queries))
    except Exception as err:
        if token in _DEFERRED:
            host.note_error(err)
            raise
        _ERRORS[token] = err
        return np.asarray(False)
    return np.asarray(True)


def release(token: int, *, deferred: bool) -> BaseException | None:
    """Ends ``run``'s wait for the run of ``token`` and returns the exception its
    listener raised (None: none). A ``deferred`` run (under an outer transformation, so
    executed later) keeps its listener, and raises where it runs."""
    if deferred:
        _DEFERRED.add(token)
    else:
        _LISTENERS.pop(token, None)
    return _ERRORS.pop(token, None)
