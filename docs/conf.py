"""Sphinx configuration of the hierfl documentation (MyST Markdown; strict: make docs uses -W -n)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS.parent))
sys.path.insert(0, str(DOCS / "_ext"))

project = "hierfl"
author = "the hierfl authors"
copyright = "the hierfl authors"  # noqa: A001
release = "0.1.0"

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon", "hierfl_reference"]
if importlib.util.find_spec("sphinxarg") is not None:
    extensions.append("sphinxarg.ext")

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "**/_build", "Thumbs.db", ".DS_Store"]
myst_enable_extensions = ["colon_fence", "deflist", "dollarmath"]
myst_heading_anchors = 3
suppress_warnings = ["myst.header"]  # the generated plug-in pages nest docstring headings freely

autodoc_typehints = "description"
autodoc_member_order = "bysource"
napoleon_numpy_docstring = True
napoleon_google_docstring = False
# types named in signatures that are not documented here (the standard library, numpy, pandas, ...)
nitpick_ignore_regex = [
    ("py:.*", r"(pd|pandas|np|numpy|Path|pathlib|typing|collections|ray|torch)(\..*)?"),
    ("py:.*", r"(hierfl\.|~hierfl\.)?.*(Scenario|RunResult|RunResultFrames|SweepResult|RunReadError|ConfigError)"),
    ("py:.*", r"(str|int|float|bool|dict|list|tuple|None|Any|Sequence|Mapping|optional|path|mapping|"
              r"sequence|sequence of str|RunError|DataFrame|ndarray|Callable|Iterable|Iterator)"),
    ("py:.*", r"hierfl\..*"),
]

html_theme = "furo" if importlib.util.find_spec("furo") is not None else "alabaster"
html_title = "hierfl"
html_static_path: list[str] = []
