"""Presets as typed frozen dataclasses, with generic overrides from the command line.

A benchmark declares its configuration as a frozen dataclass and its presets as
instances (``smoke`` for tests, ``quick``/``cpu`` for a small real run, ``paper`` for
the paper's protocol, ``gpu`` where an accelerator is meant). A command-line option whose
destination is named like a field overrides that field (``--steps 100`` sets ``steps``);
:func:`from_args` applies every such option at once, so no command keeps its own list.

Example:
  >>> import argparse, dataclasses
  >>> from benchmarks import presets
  >>> @dataclasses.dataclass(frozen=True)
  ... class Config:
  ...     steps: int
  ...     seeds: tuple[int, ...] = (0,)
  >>> presets.from_args(Config(100), argparse.Namespace(steps=5, seeds=[1, 2], out="x"))
  Config(steps=5, seeds=(1, 2))
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any, TypeVar

from benchmarks.flags import fail

T = TypeVar("T")


def override(preset: T, **values: Any) -> T:
    """``preset`` with the fields in ``values`` replaced (``None`` values are skipped;
    lists become tuples, so presets stay hashable)."""
    names = {f.name for f in dataclasses.fields(preset)}
    unknown = sorted(set(values) - names)
    if unknown:
        fail(f"{type(preset).__name__} has no setting {', '.join(unknown)}; it has "
             f"{', '.join(sorted(names))}")
    changes = {k: tuple(v) if isinstance(v, list) else v
               for k, v in values.items() if v is not None}
    return dataclasses.replace(preset, **changes)


def from_args(preset: T, args: argparse.Namespace) -> T:
    """``preset`` overridden by every option of ``args`` named like one of its fields."""
    names = {f.name for f in dataclasses.fields(preset)}
    return override(preset, **{k: v for k, v in vars(args).items() if k in names})


def as_dict(preset: Any) -> dict[str, Any]:
    """The preset as JSON-ready values (tuples become lists)."""
    return dataclasses.asdict(preset)


def from_dict(cls: type[T], data: dict[str, Any]) -> T:
    """The preset :func:`as_dict` wrote (lists back to tuples; unknown keys ignored)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: tuple(v) if isinstance(v, list) else v
                  for k, v in data.items() if k in names})
