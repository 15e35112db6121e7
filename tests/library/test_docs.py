"""The tutorial and the README example run as written (the docs build is its own CI step)."""

import contextlib
import io
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def tutorial_blocks() -> list[tuple[str, str]]:
    """The tutorial's code blocks, each with the output shown in the ``text`` block after it."""
    fences = re.findall(r"```(\w+)\n(.*?)```", (ROOT / "docs" / "tutorial.md").read_text(),
                        flags=re.S)
    pairs = [(code, after) for (lang, code), after in zip(fences, [*fences[1:], ("", "")])
             if lang == "python"]
    missing = [code.split("\n")[0] for code, (lang, _) in pairs if lang != "text"]
    assert not missing, f"code blocks without their output: {missing}"
    return [(code, output) for code, (_, output) in pairs]


def test_tutorial_blocks_print_their_expected_output():
    """Every code block, run in order, prints exactly the output the page shows."""
    blocks = tutorial_blocks()
    assert len(blocks) >= 9
    namespace: dict = {}
    for number, (code, expected) in enumerate(blocks, 1):
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(code, f"docs/tutorial.md block {number}", "exec"), namespace)  # noqa: S102
        assert printed.getvalue() == expected, f"block {number}"


def test_readme_example_prints_its_expected_output_and_makes_progress():
    text = (ROOT / "README.md").read_text()
    ((block, expected),) = re.findall(r"```python\n(.*?)```\n.*?```text\n(.*?)```", text,
                                      flags=re.S)
    namespace: dict = {}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(block, "README.md", "exec"), namespace)  # noqa: S102
    assert printed.getvalue() == expected
    loss, params, batch = namespace["loss"], namespace["params"], namespace["batch"]
    assert float(loss(params, batch)) < 1e-2 * float(loss(0 * params, batch))


def test_readme_opens_with_the_main_job_and_the_test_command_ci_runs():
    """The README's first two commands are the main job and the tests; ``.ci/run`` runs
    the test command exactly as written, then the type check and the docs build."""
    main_job, tests = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(),
                                 flags=re.S)[:2]
    assert "python -m benchmarks synthetic" in main_job
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    command = tests.strip().splitlines()[-1]
    assert command == 'python -m pip install -e ".[dev]" && python -m pytest'
    assert ci.index(command) < ci.index("python -m mypy") < next(
        i for i, line in enumerate(ci) if line.startswith("python -m sphinx"))


def test_api_page_documents_every_public_name_and_every_diagnostic():
    import zoaq_jax

    api = (ROOT / "docs" / "api.md").read_text()
    documented = set(re.findall(r"\.\. auto(?:function|class|data|module):: (\S+)", api))
    public = {f"{module.__name__}.{name}" for module in (
        zoaq_jax, zoaq_jax.gates, zoaq_jax.budgets, zoaq_jax.retention)
        for name in module.__all__}
    assert public - documented == set()
    readme = (ROOT / "README.md").read_text()
    listed = re.search(r"reaches the diagnostics of any chained state:(.*?)The counters",
                       readme, flags=re.S).group(1)
    table = set(re.findall(r"^\| `(\w+)` \|", api, flags=re.M))
    names = set(re.findall(r"`(\w+)`", re.sub(r"\([^)]*\)", "", listed)))  # not the asides
    assert len(names) >= 7 and names - table == set()


def test_every_documented_namedtuple_field_has_a_description():
    """The API page's states and records (``autoclass`` with ``:members:``) get each field's
    source comment (docs/conf.py's hook), never the generated "Alias for field number N"."""
    import importlib
    import sys

    sys.path.insert(0, str(ROOT / "docs"))
    try:
        conf = importlib.import_module("conf")
    finally:
        sys.path.pop(0)
    api = (ROOT / "docs" / "api.md").read_text()
    names = re.findall(r"autoclass:: (\S+)\n\s+:members:", api)
    assert len(names) >= 12
    for name in names:
        module, _, attr = name.rpartition(".")
        cls = getattr(importlib.import_module(module), attr)
        comments = conf._field_comments(cls)
        assert set(comments) == set(cls._fields), name
        for field in cls._fields:
            lines = [f"Alias for field number {cls._fields.index(field)}"]
            conf._describe_fields(None, "attribute", f"{name}.{field}", None, None, lines)
            assert lines == [comments[field]] and lines[0], (name, field)


# --------------------------------------------------------------------------- page rules
# The pages a reader meets: the README, the docs (design notes, tutorial, API) and every
# results page. Other changes' new pages must pass these too.

RESULTS = ROOT / "docs" / "results"
KB = 1024
PAGE_LIMIT = 30 * KB  # bytes of one Markdown page
RESULTS_LIMIT = 5_000_000  # bytes of docs/results, every data file, figure and page
FIGURE_WIDTH = 1600  # pixels: figures at screen resolution
README_LINES, README_CELL = 180, 300


def markdown_pages() -> list[Path]:
    """The README and every Markdown page under docs/ (the report inputs under
    docs/results/*/ included)."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def results_pages() -> list[Path]:
    """The results pages: docs/results/*.md but its index."""
    return [p for p in sorted(RESULTS.glob("*.md")) if p.name != "index.md"]


def test_readme_is_short_and_its_table_cells_are_narrow():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_LINES
    cells = [cell.strip() for line in lines if line.startswith("|")
             for cell in line.strip().strip("|").split(" | ")]
    assert [c for c in cells if len(c) > README_CELL] == []


def test_readme_quotes_no_dated_run_commit_or_design_round():
    text = (ROOT / "README.md").read_text()
    assert re.findall(r"\b20\d\d-\d\d-\d\d\b|\bcommits?\b|\b[Dd]esign rounds?\b|"
                      r"\b[Rr]ounds? \d+[a-z]?\b|\bstop \d+\b", text) == []


def test_no_markdown_page_above_30_kb():
    sizes = {p.relative_to(ROOT).as_posix(): p.stat().st_size for p in markdown_pages()}
    assert {page: size for page, size in sizes.items() if size > PAGE_LIMIT} == {}


def test_every_results_page_opens_with_its_question_answer_and_command():
    """Within the first 25 lines: a line starting with ``**Question.**``, then the answer (a
    table row or an image) and the command (``python -m benchmarks ...``), as
    :func:`benchmarks.pages.page` writes them."""
    from benchmarks.pages import opening_problems

    pages = results_pages()
    assert len(pages) >= 20
    problems = {p.name: opening_problems(p.read_text()) for p in pages}
    assert {name: found for name, found in problems.items() if found} == {}


NARRATION = re.compile(
    r"\bcommits?\b|\bgit (?:show|log|diff|checkout)\b|\bstop \d+\b|\b[Dd]esign rounds?\b|"
    r"\b[Rr]ounds? \d+[a-z]?\b|\b[Ii]ssues? \d+\b|\bfixed in\b")
"""Words that narrate the order of the work (commits, stops, design rounds, issues): git's,
the CHANGELOG's and the design notes', never a results page's."""


def test_no_results_page_narrates_the_work():
    found = {p.name: NARRATION.findall(p.read_text()) for p in results_pages()}
    assert {name: words for name, words in found.items() if words} == {}


LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def test_relative_links_resolve():
    """Every relative link and image of the README and the docs names a file that exists."""
    broken = []
    for page in markdown_pages():
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # code is not a link
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue  # a web address or an anchor on the page
            if not (page.parent / target.split("#")[0]).exists():
                broken.append(f"{page.relative_to(ROOT).as_posix()}: {target}")
    assert broken == []


def test_docs_results_stay_under_5_mb():
    """Results are stored compactly (``benchmarks.common.write_json``, palette PNGs); the
    cap holds every page this cycle adds (a standard black-box suite's page among them)."""
    size = sum(p.stat().st_size for p in RESULTS.rglob("*") if p.is_file())
    assert size <= RESULTS_LIMIT, f"docs/results holds {size / 1e6:.2f} MB"


def test_figures_are_at_screen_resolution():
    """Every PNG under docs/results is at most 1600 pixels wide (the width in its header)."""
    import struct

    wide = {}
    for png in RESULTS.rglob("*.png"):
        width, height = struct.unpack(">II", png.read_bytes()[16:24])
        if width > FIGURE_WIDTH:
            wide[png.relative_to(ROOT).as_posix()] = (width, height)
    assert wide == {}


def test_every_page_has_its_own_title():
    pages = sorted((ROOT / "docs").rglob("*.md"))
    titles = {}
    for page in pages:
        (first,) = re.findall(r"^# (.+)$", page.read_text(), flags=re.M)[:1]
        titles.setdefault(first, []).append(page.relative_to(ROOT).as_posix())
    assert len(pages) >= 20
    assert {t: p for t, p in titles.items() if len(p) > 1} == {}
