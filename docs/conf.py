# Sphinx configuration for the uvsched documentation.
# Build: sphinx-build -b html docs build/docs-html (or docs/meson.build).

import os
import re

_here = os.path.dirname(os.path.abspath(__file__))


def _project_version():
    """Reads the version from the top-level meson.build, the one source."""
    try:
        with open(os.path.join(_here, "..", "meson.build"), encoding="utf-8") as f:
            m = re.search(r"version\s*:\s*'([^']+)'", f.read())
            if m:
                return m.group(1)
    except OSError:
        pass
    return "unknown"


project = "uvsched"
author = "the uvsched authors"
copyright = "the uvsched authors"
release = _project_version()
version = ".".join(release.split(".")[:2])

extensions = []
templates_path = []
exclude_patterns = ["_build"]
master_doc = "index"
primary_domain = "c"
highlight_language = "c"

html_theme = "alabaster"
html_title = f"uvsched {release}"
html_static_path = []
