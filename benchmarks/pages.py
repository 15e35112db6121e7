"""The one renderer of the benchmark pages: Markdown tables of rows (a method label, its
columns, mean ± spread, the best marked), figures of curves against oracle calls, and the
page skeleton (title, command, run record lines, sections; text written by hand around the
generated block kept).

Example::

    >>> print(table(["method", "gap (mean ± std)"], [["ZoAQ", bold(pm(0.25, 0.125), True)]]))
    | method | gap (mean ± std) |
    |---|---|
    | ZoAQ | **0.25 ± 0.125** |
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import record as run_record

MISSING = "—"
"""The cell of a value that does not exist (no reference, not run, not finite)."""


def grouped(rows: Iterable[dict], key: str) -> dict[Any, list[dict]]:
    """``rows`` by their ``key`` value, in order of first appearance.

    >>> grouped([{"f": "a", "x": 1}, {"f": "b", "x": 2}, {"f": "a", "x": 3}], "f")["a"]
    [{'f': 'a', 'x': 1}, {'f': 'a', 'x': 3}]
    """
    out: dict[Any, list[dict]] = {}
    for r in rows:
        out.setdefault(r[key], []).append(r)
    return out


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A GitHub-flavoured Markdown table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def pm(mean: float, spread: float, fmt: str | Callable[[float], str] = "{:.3g}") -> str:
    """``mean ± spread``, both in ``fmt`` (a format string, :data:`MISSING` for a value that
    does not exist; or a function of the value).

    >>> pm(2.0, float("nan"), "{:.1f}")
    '2.0 ± —'
    """
    show = fmt if callable(fmt) else lambda x: num(x, fmt)
    return f"{show(mean)} ± {show(spread)}"


def mean_std(values: Sequence[float], fmt: str = "{:.3g}") -> str:
    """``mean ± std`` of ``values`` (population std, as the paper's tables).

    >>> mean_std([1, 3], "{:.1f}")
    '2.0 ± 1.0'
    """
    arr = np.asarray(values, dtype=float)
    return pm(arr.mean(), arr.std(), fmt)


def num(x: float | None, fmt: str = "{:,.0f}", missing: str = MISSING) -> str:
    """``x`` in ``fmt``; ``missing`` for None, NaN and infinities.

    >>> num(12345.6), num(float("nan")), num(None, "{:.2f}", "–")
    ('12,346', '—', '–')
    """
    return missing if x is None or not np.isfinite(x) else fmt.format(x)


def bold(text: str, best: bool) -> str:
    """``text``, in bold where it is the best of its column."""
    return f"**{text}**" if best else text


def columns(definitions: dict[str, str]) -> str:
    """The definitions of a table's columns, one paragraph.

    >>> columns({"calls": "oracle calls spent", "saving": "1 - calls / reference calls"})
    'Columns: *calls*: oracle calls spent; *saving*: 1 - calls / reference calls.'
    """
    return "Columns: " + "; ".join(f"*{k}*: {v}" for k, v in definitions.items()) + "."


def bullets(items: Iterable[str]) -> str:
    return "\n".join(f"- {item}" for item in items)


# --------------------------------------------------------------------------- figures


def pyplot():
    """matplotlib's pyplot on the headless Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


FIGURE_DPI = 90
"""Resolution of every saved figure (with the palette below, it keeps ``docs/results`` small)."""


def save_figure(fig, path: Path, dpi: int = FIGURE_DPI) -> Path:
    """Saves ``fig`` as a PNG at ``path`` (creating folders) and closes it.

    The PNG has an adaptive palette of 256 colours (no dithering): line plots look the same
    at about 40% of the size of matplotlib's RGBA file of the same resolution.
    """
    from PIL import Image

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    pyplot().close(fig)
    image = Image.open(buffer).convert("RGB")
    image.quantize(256, dither=Image.Dither.NONE).save(path, optimize=True)
    return path


def panels(n: int, cols: int = 3, size: tuple[float, float] = (5.2, 3.8)):
    """A figure of ``n`` panels, ``cols`` a row, each ``size`` inches: ``(fig, axes)``."""
    cols = min(n, cols)
    rows = -(-n // cols)
    fig, axes = pyplot().subplots(rows, cols, figsize=(size[0] * cols, size[1] * rows),
                                  squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n])


ENVELOPE = {"color": "k", "linestyle": "--"}
"""The style of the best fixed K's envelope in every figure."""


def curves(path: Path, plots: Sequence[tuple[str, Sequence[tuple], dict]], *, cols: int = 3,
           size: tuple[float, float] = (5.2, 3.8), legend: tuple[int, float] | None = (0, 7),
           title_size: float | None = None, grid: bool = True, suptitle: str | None = None,
           marks: Sequence[float] = (), **axes: Any) -> Path:
    """A figure of curves (by default against oracle calls on a log axis), one panel a plot.

    Args:
      path: the PNG written.
      plots: ``(title, lines, settings)`` per panel; a line is ``(x, y, label, style)``
        (``style``: ``Axes.plot`` keywords; with ``where``, a step plot), a label of None
        leaves the line out of the legend; ``settings`` override ``axes`` for the panel.
      cols, size: panels a row and inches per panel (:func:`panels`).
      legend: ``(panel, font size)`` of the one legend, or None.
      title_size, grid, suptitle: panel title font size, light grid lines, figure title.
      marks: x positions marked by a grey vertical line in every panel (a switch).
      **axes: ``Axes.set`` settings of every panel (``xlabel``, ``yscale``, ``ylim``, ...).

    Returns:
      ``path``.
    """
    fig, ax_list = panels(len(plots), cols, size)
    settings = {"xscale": "log", "xlabel": "oracle calls"} | axes
    for ax, (title, lines, own) in zip(ax_list, plots):
        for x, y, label, style in lines:
            (ax.step if "where" in style else ax.plot)(x, y, label=label, **style)
        for x in marks:
            ax.axvline(x, color="grey", lw=0.8)
        ax.set(**settings | own)
        if title:
            ax.set_title(title, **({"fontsize": title_size} if title_size else {}))
        if grid:
            ax.grid(alpha=0.3)
    if legend is not None:
        ax_list[legend[0]].legend(fontsize=legend[1])
    if suptitle:
        fig.suptitle(suptitle, fontsize=10)
    return save_figure(fig, path)


# --------------------------------------------------------------------------- pages


def link(path: Path, page: Path) -> str:
    """The address of ``path`` relative to the Markdown page ``page``."""
    return Path(os.path.relpath(path, Path(page).parent)).as_posix()


def images(figures: Iterable[tuple[str, Path]], page: Path) -> str:
    """Each figure under its caption in bold."""
    return "\n\n".join(f"**{t}**\n\n![{t}]({link(p, page)})" for t, p in figures)


def record_lines(record: run_record.RunRecord) -> list[str]:
    """The command of a run, then its run and machine lines (:mod:`benchmarks.record`)."""
    return [f"Command: `{record.command}`", "", f"- {run_record.run_line(record)}",
            f"- {run_record.machine_line(record.machine)}"]


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
    path.write_text(_BLOCK.sub(lambda _: body, old, count=1) if _BLOCK.search(old)
                    else f"# {title}\n\n{body}\n")
    return path


def page(path: Path, title: str, sections: Iterable[str | None], command: str) -> Path:
    """Writes the page ``path`` of ``python -m benchmarks command``: its sections (None
    and empty ones left out) one paragraph apart, as the generated block
    (:func:`write_markdown`)."""
    return write_markdown(path, title, "\n\n".join(s for s in sections if s), command)
