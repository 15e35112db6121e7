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
