"""The import graph of ``zoaq_jax/_src`` is the layer drawing of ``docs/design/layers.md``.

The drawing's rows (between its rules) list each layer's modules, top layer first; every
module of ``_src`` sits in exactly one layer, imports only modules of its own layer or
lower ones, the imports form no circle, and no ``zoaq_jax`` import hides inside a
function (where it could close a circle that the module level does not show).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "zoaq_jax" / "_src"


def drawn_layers() -> list[set[str]]:
    """The modules of each layer of the drawing in docs/design/layers.md, top layer first."""
    text = (ROOT / "docs" / "design" / "layers.md").read_text()
    drawing = text.split("# The layers", 1)[1].split("```", 2)[1].split("═")[0]
    rows = re.split(r"\n\s*─+\n", drawing)[1:]  # the first row is the user's code
    return [set(re.findall(r"\b(\w+)\.py\b", row)) for row in rows]


def imports(path: Path) -> tuple[set[str], list[str]]:
    """The ``_src`` modules ``path`` imports at module level, and any ``zoaq_jax``
    import inside a function (as source text)."""
    tree = ast.parse(path.read_text())
    top: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("zoaq_jax._src"):
            if node.module == "zoaq_jax._src":
                top |= {alias.name for alias in node.names}
            else:
                top.add(node.module.split(".")[2])
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [
                node.module or ""]
            assert not any(n.startswith("zoaq_jax") for n in names), ast.unparse(node)
    hidden = [ast.unparse(n) for f in ast.walk(tree)
              if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
              for n in ast.walk(f) if isinstance(n, ast.Import | ast.ImportFrom)
              and any((a.name if isinstance(n, ast.Import) else n.module or "")
                      .startswith("zoaq_jax") for a in n.names)]
    return top, hidden


GRAPH = {p.stem: imports(p) for p in sorted(SRC.glob("*.py")) if p.stem != "__init__"}


def test_every_module_sits_in_one_drawn_layer():
    layers = drawn_layers()
    drawn = [m for layer in layers for m in layer]
    assert len(drawn) == len(set(drawn)), "a module drawn in two layers"
    assert set(drawn) == set(GRAPH), (set(GRAPH) - set(drawn), set(drawn) - set(GRAPH))


def test_no_import_hides_in_a_function():
    assert {m: hidden for m, (_, hidden) in GRAPH.items() if hidden} == {}


def test_imports_point_to_the_same_layer_or_below():
    level = {m: -i for i, layer in enumerate(drawn_layers()) for m in layer}  # top: 0
    up = sorted((m, d) for m, (deps, _) in GRAPH.items() for d in deps if level[d] > level[m])
    assert up == []


def test_the_import_graph_has_no_circle():
    done: set[str] = set()

    def visit(m: str, path: tuple[str, ...]) -> None:
        assert m not in path, " -> ".join((*path, m))
        if m not in done:
            for d in GRAPH[m][0]:
                visit(d, (*path, m))
            done.add(m)

    for m in GRAPH:
        visit(m, ())
