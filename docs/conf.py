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
# benchmarks.md and reliability.md are not pages of their own:
# benchmarks.rst and reliability.rst include them.
exclude_patterns = ["_build", "*.md"]

# benchmarks.md is Markdown, read with MyST (Debian: python3-myst-parser).
# Without MyST, or before the file exists, benchmarks.rst shows a note
# instead (see _md_include_fallback below), so the pages still build; the
# same goes for reliability.md, included at the end of reliability.rst.
try:
    import myst_parser  # noqa: F401

    extensions.append("myst_parser")
    have_myst = True
except ImportError:
    have_myst = False
myst_heading_anchors = 3
# Links in benchmarks.md to files of the repository (bench/...) are right on
# a forge and in a checkout, and not pages of this site: don't warn.
suppress_warnings = ["ref.myst"]
master_doc = "index"
primary_domain = "c"
highlight_language = "c"

html_theme = "alabaster"
html_title = f"uvsched {release}"
html_static_path = []


# Pages that include a Markdown file of the same name, which other work
# keeps up to date: docname -> what to show while the file does not exist.
_MD_INCLUDES = {
    "benchmarks": ".. note::\n\n   ``docs/benchmarks.md`` is not written yet.\n",
    "reliability": "",
}


def _md_include_fallback(app, docname, source):
    """Replaces the MyST include of DOCNAME.md when it cannot work: without
    MyST the file is shown as text; without the file, as _MD_INCLUDES says."""
    if docname not in _MD_INCLUDES:
        return
    md = docname + ".md"
    exists = os.path.exists(os.path.join(_here, md))
    if have_myst and exists:
        return
    if exists:
        text = (".. note::\n\n   python3-myst-parser is not installed: "
                "``%s`` is shown as text.\n\n"
                ".. literalinclude:: %s\n"
                "   :language: markdown\n" % (md, md))
    else:
        text = _MD_INCLUDES[docname]
    pattern = re.compile(r"^\.\. include:: %s\n(?:   :.*\n)*" % re.escape(md),
                         re.M)
    source[0] = pattern.sub(lambda m: text, source[0])


def setup(app):
    app.connect("source-read", _md_include_fallback)
    return {"parallel_read_safe": True}
