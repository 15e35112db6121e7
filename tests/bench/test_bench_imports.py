"""The import graph of ``benchmarks/``, read from the source (ast): no circle, whether the
imports sit at the top of a module or inside a function (an import moved into a function
only hides a circle), and no experiment imports another (what two share lives in the
harness, ``benchmarks/*.py``)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENTS = {"synthetic", "generalization", "attack", "llm", "overhead"}


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _exists(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def graph() -> dict[str, set[str]]:
    """``{module: the benchmarks modules it imports}``, every import statement counted."""
    edges: dict[str, set[str]] = {}
    for path in sorted((ROOT / "benchmarks").rglob("*.py")):
        source = _module(path)
        package = source if path.name == "__init__.py" else source.rpartition(".")[0]
        targets = edges.setdefault(source, set())
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets |= {a.name for a in node.names if a.name.startswith("benchmarks")}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from . import x
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, *([node.module] if node.module else [])])
                if not base.startswith("benchmarks"):
                    continue
                for alias in node.names:  # a submodule, else a name of the module
                    name = f"{base}.{alias.name}"
                    targets.add(name if _exists(name) else base)
        targets.discard(source)
    return edges


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One circle through each strongly connected part with more than one module."""
    found, state = [], {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                found.append(trail[trail.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, [*trail, nxt])
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    return found


def test_the_checker_sees_a_circle_and_a_relative_import():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle_in_benchmarks():
    edges = graph()
    assert "benchmarks.llm.report" in edges["benchmarks.llm.cli"]  # function-local, counted
    assert circles(edges) == []


def test_no_experiment_imports_another():
    crossing = sorted((source, target) for source, targets in graph().items()
                      for target in targets
                      if len(source.split(".")) > 2 and len(target.split(".")) > 1
                      and source.split(".")[1] in EXPERIMENTS
                      and target.split(".")[1] in EXPERIMENTS
                      and source.split(".")[1] != target.split(".")[1])
    assert crossing == []
