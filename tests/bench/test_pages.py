"""Every committed results page is its results file rendered by the code as it is (the
hand-written text around the generated block kept), and so are its figures' files.

Slow (about a minute and a half on 2 cores: it draws every figure), so outside the default
suite: ``python -m pytest -n 0 -m slow tests/bench/test_pages.py``. The LLM pages have a
fast check of their own (tests/bench/test_llm_cli.py).
"""

import shutil
from pathlib import Path

import pytest

from benchmarks.__main__ import main as cli

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"
RENDERS = {  # page: the arguments that render it, RESULTS standing for the results folder
    **{p.name.removesuffix(".json.xz"): ["synthetic", "--render", f"RESULTS/{p.name}",
                                         "--out", "RESULTS"]
       for p in RESULTS.glob("synthetic*.json.xz")},
    **{p.name.removesuffix(".json.xz"): ["generalization", "--render", f"RESULTS/{p.name}",
                                         "--out", "RESULTS"]
       for p in RESULTS.glob("generalization_*.json.xz")},
    "overhead": ["overhead", "--render", "RESULTS/overhead.json.xz"],
    "overhead_large_d": ["overhead", "--render", "RESULTS/overhead_large_d.json.xz"],
    "overhead_torch": ["overhead", "--render", "RESULTS/overhead_torch.json.xz"],
    "devices": ["devices", "--render", "RESULTS/devices.json.xz"],
    "attack": ["attack", "--render", "RESULTS/attack/attack.json.xz", "--report",
               "RESULTS/attack.md"],
    "synthetic_budget_grid": ["synthetic", "--render",
                              "RESULTS/synthetic_grid/synthetic_budget.json.xz", "--out",
                              "RESULTS/synthetic_grid", "--report",
                              "RESULTS/synthetic_budget_grid.md"],
}


@pytest.mark.slow
@pytest.mark.parametrize("page", sorted(RENDERS))
def test_committed_page_renders_bit_for_bit_from_its_json(page, tmp_path):
    copy = tmp_path / "results"
    shutil.copytree(RESULTS, copy)
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in copy.rglob("*")
              if p.is_file()}
    assert cli([a.replace("RESULTS", str(copy)) for a in RENDERS[page]]) == 0
    files = [p for p in copy.rglob("*") if p.is_file()]
    assert [str(p.relative_to(copy)) for p in files if before[p][0] != p.read_bytes()] == []
    assert (copy / f"{page}.md").stat().st_mtime_ns > before[copy / f"{page}.md"][1]  # written
