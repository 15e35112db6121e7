"""The library declares exactly what it imports (pyproject's ``[project] dependencies``)."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NEEDED_BUT_NOT_IMPORTED = {"jaxlib"}  # jax's backend: installed with it, never imported


def _imported_packages() -> set[str]:
    names = set()
    for path in (ROOT / "zoaq_jax").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - {"zoaq_jax", "__future__"}


def _declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0] for req in project["dependencies"]}


def test_library_declares_exactly_what_it_imports():
    imported, declared = _imported_packages(), _declared()
    assert imported <= declared, f"imported but not declared: {sorted(imported - declared)}"
    unused = declared - imported - NEEDED_BUT_NOT_IMPORTED
    assert not unused, f"declared but never imported: {sorted(unused)}"


def test_wheel_ships_the_type_marker_and_the_license(tmp_path):
    """The wheel holds ``zoaq_jax/py.typed`` (PEP 561: type checkers read the library's
    annotations) and the license text; built from a copy, so the checkout stays clean."""
    import shutil
    import subprocess
    import zipfile

    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source)
    shutil.copytree(ROOT / "zoaq_jax", source / "zoaq_jax",
                    ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps",
                    "--no-build-isolation", "--quiet", "-w", str(tmp_path)], check=True)
    (wheel,) = tmp_path.glob("zoaq_jax-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "zoaq_jax/py.typed" in names
    (license_file,) = [n for n in names if n.endswith("/licenses/LICENSE")]
    assert "Apache License" in zipfile.ZipFile(wheel).read(license_file).decode()
