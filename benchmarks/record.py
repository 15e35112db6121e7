"""The run record every benchmark writes next to its results, and its one renderer.

A record says what was run and where: the command line, the machine (CPU, cores the run
could use, memory, accelerator), the load average before and after, start and finish
times, wall time, and the versions of the libraries that produced the numbers. Reports
render it with :func:`machine_line` and :func:`run_line`, so every page words it the same.

Example:
  >>> from benchmarks import record
  >>> with record.Recorder("python -m benchmarks synthetic") as run:
  ...     pass  # the computation
  >>> sorted(run.record.as_dict())[:3]
  ['command', 'finished', 'load_after']
"""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import time
from dataclasses import asdict, dataclass, field
from typing import Any

VERSIONED = ("zoaq-jax", "jax", "jaxlib", "optax", "numpy", "flax", "evosax", "torch")


@dataclass(frozen=True)
class RunRecord:
    """What was run, where, when and with which libraries."""

    command: str
    machine: dict[str, Any]  # see :func:`machine_info`
    started: str  # ISO 8601, seconds
    finished: str = ""
    wall_s: float | None = None  # wall time, compilation and data loading included
    load_before: float | None = None  # 1-minute load average
    load_after: float | None = None
    versions: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RunRecord":
        """A record from :meth:`as_dict`'s output (unknown keys are ignored)."""
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in names})


class Recorder:
    """``with Recorder(command) as run: ...`` then ``run.record`` (a :class:`RunRecord`)."""

    def __init__(self, command: str):
        self.command = command

    def __enter__(self) -> "Recorder":
        self._start = time.perf_counter()
        self._started = _now()
        self._load = load_average()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.record = self.snapshot()

    def snapshot(self) -> RunRecord:
        """The record as of now: inside the ``with`` block, for results saved as they come."""
        return RunRecord(
            command=self.command, machine=machine_info(), started=self._started,
            finished=_now(), wall_s=round(time.perf_counter() - self._start, 3),
            load_before=self._load, load_after=load_average(), versions=versions())


def _now() -> str:
    return datetime.datetime.now().isoformat(timespec="seconds")


def versions() -> dict[str, str]:
    """Installed versions of the libraries in :data:`VERSIONED` (absent ones left out)."""
    found = {}
    for name in VERSIONED:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return found


def load_average() -> float | None:
    """The 1-minute load average (``uptime``), to record next to timings."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def available_cores() -> list[int]:
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


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
    return {"cpu": cpu, "cores": len(available_cores()), "memory_gib": _memory_gib(),
            "platform": platform.platform(), "python": platform.python_version(),
            "jax": jax.__version__, "devices": [str(d.device_kind) for d in jax.devices()],
            "backend": jax.default_backend()}


def _memory_gib() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            kib = int(next(ln for ln in f if ln.startswith("MemTotal")).split()[1])
        return round(kib / 2**20, 1)
    except (OSError, StopIteration, ValueError):
        return None


def machine_line(machine: dict[str, Any]) -> str:
    """``Machine: CPU, N cores, M GiB; JAX v on backend (devices).``"""
    devices = sorted(set(machine.get("devices") or ()))
    accel = "" if machine.get("backend") == "cpu" or not devices else f" ({', '.join(devices)})"
    memory = f", {machine['memory_gib']} GiB" if machine.get("memory_gib") else ""
    return (f"Machine: {machine['cpu']}, {machine['cores']} cores{memory}; "
            f"JAX {machine['jax']} on {machine['backend']}{accel}.")


def run_line(record: RunRecord) -> str:
    """``Run: started ..., wall time ...; load average before/after ...``."""
    parts = [f"Run: started {record.started}" if record.started else "Run:"]
    if record.wall_s is not None:
        parts.append(f"wall time {_duration(record.wall_s)} (compilation included)")
    if record.load_before is not None or record.load_after is not None:
        parts.append(f"load average before/after {record.load_before} / {record.load_after}")
    text = "; ".join(parts) + "."
    if record.versions:
        text += " Versions: " + ", ".join(f"{k} {v}" for k, v in record.versions.items()) + "."
    return text


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 600 else f"{seconds / 60:.1f} min"
