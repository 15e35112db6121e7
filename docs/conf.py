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
