"""Every committed results page is its results file rendered by the code as it is (the
hand-written text after the generated block kept), and so are its figures' files: nothing
measured is lost or changed by a change to the renderers, only moved.

The re-renders are slow (about two minutes on 2 cores: they draw every figure), so outside
the default suite: ``python -m pytest -n 0 -m slow tests/bench/test_pages.py``. That every
generated page is listed here is a fast test.
"""

import re
import shutil
from pathlib import Path

import pytest

from benchmarks.__main__ import main as cli

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"
R = "RESULTS"  # stands for the results folder in the arguments below
RENDERS = {  # page: the arguments that render it (and the pages beside it it writes)
    **{p.name.removesuffix(".json.xz"): ["synthetic", "--render", f"{R}/{p.name}", "--out", R]
       for p in RESULTS.glob("synthetic*.json.xz")},
    **{p.name.removesuffix(".json.xz"): ["generalization", "--render", f"{R}/{p.name}",
                                         "--out", R]
       for p in RESULTS.glob("generalization_*.json.xz")},
    "overhead": ["overhead", "--render", f"{R}/overhead.json.xz", "--previous",
                 f"{R}/overhead_run1.json.xz"],
    "overhead_large_d": ["overhead", "--render", f"{R}/overhead_large_d.json.xz", "--previous",
                         f"{R}/overhead_large_d_run1.json.xz"],
    "overhead_compile": ["overhead", "--render", f"{R}/overhead_compile.json.xz", "--previous",
                         f"{R}/overhead_compile_run1.json.xz"],
    "overhead_torch": ["overhead", "--render", f"{R}/overhead_torch.json.xz"],
    "overhead_gpu": ["overhead", "--render", f"{R}/overhead_gpu/compare.json.xz", "--report",
                     f"{R}/overhead_gpu.md"],
    "overhead_gpu_dims": ["overhead", "--render", f"{R}/overhead_gpu/dims.json.xz", "--report",
                          f"{R}/overhead_gpu_dims.md"],
    "devices": ["devices", "--render", f"{R}/devices.json.xz"],
    "attack": ["attack", "--render", f"{R}/attack/attack.json.xz", "--report", f"{R}/attack.md"],
    "synthetic_budget_grid": ["synthetic", "--render",
                              f"{R}/synthetic_grid/synthetic_budget.json.xz", "--out",
                              f"{R}/synthetic_grid", "--report",
                              f"{R}/synthetic_budget_grid.md"],
    **{name: ["llm", "--render", f"{R}/llm/{name}.json.xz", "--report", f"{R}/{name}.md"]
       for name in ("llm", "llm_anytime", "llm_directions", "llm_mezo_cpu", "llm_speed",
                    "llm_speed_1core")},
}
BESIDE = {  # pages a render writes beside its own (a long page's second part)
    "attack_extended": "attack", "synthetic_budget_grid_fixed_k": "synthetic_budget_grid",
    "generalization_heldout_problems": "generalization_heldout",
    "generalization_tuning_problems": "generalization_tuning"}
HAND_WRITTEN = {"directions"}  # pages without a generated block, from runs they cite


def test_every_generated_page_is_rendered_here():
    generated = {p.stem for p in RESULTS.glob("*.md") if "<!-- BEGIN GENERATED" in p.read_text()}
    assert generated == set(RENDERS) | set(BESIDE)
    assert {p.stem for p in RESULTS.glob("*.md")} - generated == {"index", *HAND_WRITTEN}


@pytest.mark.slow
@pytest.mark.parametrize("page", sorted(RENDERS))
def test_committed_page_renders_bit_for_bit_from_its_json(page, tmp_path):
    copy = tmp_path / "results"
    shutil.copytree(RESULTS, copy)
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in copy.rglob("*")
              if p.is_file()}
    assert cli([re.sub(f"^{R}", str(copy), a) for a in RENDERS[page]]) == 0
    files = [p for p in copy.rglob("*") if p.is_file()]
    assert [str(p.relative_to(copy)) for p in files if p not in before] == []
    assert [str(p.relative_to(copy)) for p in files if before[p][0] != p.read_bytes()] == []
    for name in [page, *(b for b, of in BESIDE.items() if of == page)]:
        assert (copy / f"{name}.md").stat().st_mtime_ns > before[copy / f"{name}.md"][1]
