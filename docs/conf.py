"""Sphinx configuration for gpuarray. Built by `make docs` with -W (warnings are errors)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

# Document the source tree even without an install, and never touch a GPU
# while importing the package for autodoc.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("GPUARRAY_BACKEND", "sim")

project = "gpuarray"
author = "gpuarray developers"
copyright = "gpuarray developers"
release = version = "0.1.0"

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "numpydoc",
    "myst_parser",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]

# No network at build time: no intersphinx. Unresolved references are not
# warnings (nitpicky off); everything else is, under -W.
nitpicky = False

autodoc_member_order = "bysource"
autodoc_typehints = "none"  # numpydoc's Parameters sections carry the types
autosummary_generate = False

numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

myst_heading_anchors = 3

# The PyData theme (NumPy's, CuPy's, JAX's): a wide content area, so code
# blocks and the migrating page's tables fit without scrolling at 1280 px.
# custom.css widens the article further; no network at build or view time.
html_theme = "pydata_sphinx_theme"
html_static_path = ["_static"]
html_css_files = ["custom.css"]
html_title = "gpuarray 0.1.0"
# No sidebars: the pages are few, the header lists them, and the text column
# gets the whole window (about 1200 px of 1280).
html_theme_options = {
    "navigation_with_keys": False,
    "header_links_before_dropdown": 4,
    "navbar_persistent": ["search-button"],
    "navbar_end": ["theme-switcher"],
    "secondary_sidebar_items": [],
    "footer_start": ["copyright"],
    "footer_end": [],
}
html_sidebars: dict[str, list[str]] = {"**": []}


# -- Every public name is rendered -------------------------------------------
# The API reference is generated from the public lists; a name autodoc skips
# (no docstring, a data name without a ``#:`` comment or explicit directive)
# would vanish silently. Under -W this warning fails the build.
def _check_public_names(app, env):
    import types

    from sphinx.util import logging

    import gpuarray
    import gpuarray.errors
    import gpuarray.memory

    modules = (gpuarray, gpuarray.errors, gpuarray.memory)
    documented = set(env.get_domain("py").objects)
    logger = logging.getLogger("gpuarray.docs")
    for mod in modules:
        for name in mod.__all__:
            obj = getattr(mod, name)
            if isinstance(obj, (types.FunctionType, type, types.ModuleType)):
                aliases = {f"{m.__name__}.{n}" for m in modules for n in m.__all__
                           if getattr(m, n) is obj}
            else:
                aliases = {f"{mod.__name__}.{name}"}
            if isinstance(obj, types.ModuleType):
                aliases.add(obj.__name__)
            if not aliases & documented:
                logger.warning("public name %s.%s is not rendered by the API reference "
                               "(docs/api.rst): it needs a docstring", mod.__name__, name)


def setup(app):
    app.connect("env-check-consistency", _check_public_names)
    return {"parallel_read_safe": True}
