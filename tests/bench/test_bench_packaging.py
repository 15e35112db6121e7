"""The benchmarks declare what they import: every third-party module imported under
``benchmarks/`` is a core dependency or in the ``bench`` extra of pyproject.toml (and every
package of the extra is imported), or an optional one imported inside a function behind a
clear ``ImportError`` (as ``tests/library/test_packaging.py`` checks the library)."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DISTRIBUTION = {"PIL": "pillow"}  # import name -> the package that provides it
# PyTorch checkpoints (llm.models.hf_loader) and the speed baseline (overhead.torch_loop)
OPTIONAL = {"torch"}
NEEDS = {"safetensors.torch": "torch"}  # modules that import an optional package


def _imports() -> list[tuple[str, Path, list[ast.AST]]]:
    """``(package, file, the import's ancestors)`` of every third-party import."""
    out = []

    def visit(node, path, ancestors):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        for name in names:
            top = NEEDS.get(name, name.split(".")[0])
            if top not in sys.stdlib_module_names | {"benchmarks", "zoaq_jax", "__future__"}:
                out.append((DISTRIBUTION.get(top, top), path, ancestors))
        for child in ast.iter_child_nodes(node):
            visit(child, path, [*ancestors, node])

    for path in sorted((ROOT / "benchmarks").rglob("*.py")):
        visit(ast.parse(path.read_text()), path, [])
    return out


def _requirements(names: list[str]) -> set[str]:
    return {re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0].lower() for req in names}


def _guarded(ancestors: list[ast.AST]) -> bool:
    """Inside a function, in a ``try`` whose handler catches ``ImportError``."""
    in_function = any(isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef)) for a in ancestors)
    return in_function and any(
        isinstance(a, ast.Try) and any(isinstance(h.type, ast.Name) and h.type.id in (
            "ImportError", "ModuleNotFoundError") for h in a.handlers) for a in ancestors)


def test_benchmarks_declare_what_they_import():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = _requirements(project["dependencies"])
    bench = _requirements(project["optional-dependencies"]["bench"])
    imports = _imports()
    imported = {name.lower() for name, _, _ in imports}
    undeclared = imported - core - bench - OPTIONAL
    assert not undeclared, f"imported by benchmarks/ but not declared: {sorted(undeclared)}"
    unused = bench - imported
    assert not unused, f"in the bench extra but never imported: {sorted(unused)}"
    unguarded = sorted({str(path.relative_to(ROOT)) for name, path, ancestors in imports
                        if name in OPTIONAL and not _guarded(ancestors)})
    assert not unguarded, f"{sorted(OPTIONAL)} imported without a clear error in {unguarded}"
