"""The one renderer of the benchmark pages: Markdown tables of rows (a method label, its
columns, mean ± spread, the best marked), figures of curves against oracle calls, and the
page skeleton every results page follows (:func:`page`): within its first 25 lines the
question, the answer (one table or figure) and the command that made it; then the setup
(run record, machine, protocol), the other sections, and the notes written by hand after
the generated block (kept by a re-render).

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
"""Resolution of every saved figure: screen resolution (a 3-panel row is 1,404 pixels
wide); with the palette below, it keeps ``docs/results`` small."""
FIGURE_COLOURS = 64
"""The adaptive palette of every saved figure: enough for a dozen line colours and their
anti-aliased edges (32 merges neighbouring line colours)."""


def save_figure(fig, path: Path, dpi: int = FIGURE_DPI) -> Path:
    """Saves ``fig`` as a PNG at ``path`` (creating folders) and closes it.

    The PNG has an adaptive palette of :data:`FIGURE_COLOURS` colours (no dithering): line
    plots look the same at about a third of the size of matplotlib's RGBA file of the same
    resolution.
    """
    from PIL import Image

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    pyplot().close(fig)
    image = Image.open(buffer).convert("RGB")
    image.quantize(FIGURE_COLOURS, dither=Image.Dither.NONE).save(path, optimize=True)
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
    """The run and machine lines of a run (:mod:`benchmarks.record`), the first lines of a
    page's setup (its command is in the page's opening, :func:`page`)."""
    return [f"- {run_record.run_line(record)}", f"- {run_record.machine_line(record.machine)}"]


OPENING_LINES = 25
"""A results page's question, answer and command all sit within its first this many lines."""
QUESTION = "**Question.**"
"""How the line of a page's question starts."""
_ANSWER = ("|", "![")  # a table row or an image: the answer's first line


def opening_problems(text: str) -> list[str]:
    r"""What a results page's opening lacks (empty: it has it all): within its first
    :data:`OPENING_LINES` lines, in this order, a line starting with :data:`QUESTION`, the
    answer (a line starting a Markdown table row ``|`` or an image ``![``) and the command
    (a line holding ``python -m benchmarks``).

    >>> opening_problems("# T\n\n**Question.** Which?\n\n| a |\n|---|\n\n"
    ...                  "Command: `python -m benchmarks x`\n")
    []
    >>> opening_problems("# T\n\nCommand: `python -m benchmarks x`\n")
    ['no line starting with **Question.** in the first 25 lines']
    """
    head = text.splitlines()[:OPENING_LINES]
    found = next((i for i, line in enumerate(head) if line.startswith(QUESTION)), None)
    if found is None:
        return [f"no line starting with {QUESTION} in the first {OPENING_LINES} lines"]
    answer = next((i for i, line in enumerate(head) if i > found and line.startswith(_ANSWER)),
                  None)
    if answer is None:
        return [f"no answer (a table row or an image) after the question in the first "
                f"{OPENING_LINES} lines"]
    if not any("python -m benchmarks" in line for line in head[answer:]):
        return [f"no command (python -m benchmarks ...) after the answer in the first "
                f"{OPENING_LINES} lines"]
    return []


def opening(question: str, answer: str, command: str | Sequence[str]) -> str:
    """A page's first paragraphs: the question, the answer (a table or a figure, optionally
    followed by one paragraph defining its columns) and the command that made it (or the
    commands, in one line, of an answer pooled from several runs)."""
    run = (f"Command: `{command}`" if isinstance(command, str) else
           "Commands: " + "; ".join(f"`{c}`" for c in command))
    return f"{QUESTION} {question}\n\n{answer.strip()}\n\n{run}"


_BEGIN = "<!-- BEGIN GENERATED by `python -m benchmarks {command}`; edits here are overwritten -->"
_END = "<!-- END GENERATED -->"
_BLOCK = re.compile(r"<!-- BEGIN GENERATED[^\n]*-->\n.*?<!-- END GENERATED -->", re.S)


def _merged(path: Path, title: str, generated: str, command: str) -> str:
    """The text of the page ``path`` with its generated block replaced by ``generated`` (a
    new page: ``# title`` and the block)."""
    body = f"{_BEGIN.format(command=command)}\n{generated.strip()}\n{_END}"
    old = path.read_text() if path.exists() else ""
    return (_BLOCK.sub(lambda _: body, old, count=1) if _BLOCK.search(old)
            else f"# {title}\n\n{body}\n")


def write_markdown(path: Path, title: str, generated: str, command: str) -> Path:
    """Writes the generated part of the report ``path``, keeping hand-written text around it.

    The generated text sits between BEGIN/END comment lines; everything outside them
    (discussion added by hand) survives a re-render. A new file gets ``# title`` first.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(_merged(path, title, generated, command))
    return path


def page(path: Path, title: str, *, question: str, answer: str, run: str | Sequence[str],
         setup: str, sections: Iterable[str | None], command: str) -> Path:
    """Writes the results page ``path`` of ``python -m benchmarks command``: its opening
    (:func:`opening`: ``question``, ``answer``, the command line ``run``), then ``## Setup``
    and ``setup``, then ``sections`` (None and empty ones left out), one paragraph apart,
    as the generated block (:func:`write_markdown`; hand-written text goes after it).

    Raises:
      ValueError: the page would not open with its question, answer and command
        (:func:`opening_problems`: an answer too long, or hand-written text above the
        generated block); nothing is written.
    """
    path = Path(path)
    parts = [opening(question, answer, run), "## Setup", setup, *sections]
    generated = "\n\n".join(s for s in parts if s)
    problems = opening_problems(_merged(path, title, generated, command))
    if problems:
        raise ValueError(f"{path}: {'; '.join(problems)}")
    return write_markdown(path, title, generated, command)
