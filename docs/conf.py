"""Sphinx configuration: API reference from docstrings, Markdown pages via MyST."""

project = "zoaq_jax"
author = "zoaq_jax developers"
copyright = "2026, zoaq_jax developers"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build", "results/*/*"]  # report inputs (notes, data), not pages
myst_enable_extensions = ["dollarmath"]
myst_heading_anchors = 3
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_custom_sections = [("References", "notes_style")]
autodoc_typehints = "none"  # signatures carry the types; docstrings explain them
autodoc_member_order = "bysource"
html_theme = "alabaster"
html_static_path = []
suppress_warnings = ["myst.xref_missing"]


def _field_comments(cls):
    """``{field: text}`` for a NamedTuple class: each field's trailing ``# comment`` (or,
    without one, its annotation) read from the class source."""
    import ast
    import inspect
    import textwrap
    import tokenize

    source = textwrap.dedent(inspect.getsource(cls))
    comments = {
        token.start[0]: token.string.lstrip("#").strip()
        for token in tokenize.generate_tokens(iter(source.splitlines(True)).__next__)
        if token.type == tokenize.COMMENT
    }
    fields = {}
    for node in ast.parse(source).body[0].body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            annotation = ast.get_source_segment(source, node.annotation)
            fields[node.target.id] = comments.get(node.lineno) or f"``{annotation}``"
    return fields


def _describe_fields(app, what, name, obj, options, lines):
    """Replaces a NamedTuple field's generated "Alias for field number N" by the field's
    comment in the source."""
    import importlib

    if not (len(lines) == 1 and lines[0].startswith("Alias for field number")):
        return
    owner_name, field = name.rsplit(".", 1)
    module_name, _, class_path = owner_name.rpartition(".")
    while module_name:
        try:
            owner = importlib.import_module(module_name)
            break
        except ImportError:
            module_name, _, head = module_name.rpartition(".")
            class_path = f"{head}.{class_path}"
    for part in class_path.split("."):
        owner = getattr(owner, part)
    text = _field_comments(owner).get(field)
    if text is not None:
        lines[:] = [text]


def setup(app):
    app.connect("autodoc-process-docstring", _describe_fields)
