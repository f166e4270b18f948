# Sphinx configuration of ddprun's manual: MyST Markdown pages, the furo theme for HTML, and the
# ddprun(1) man page from reference/ddprun.md. Built with warnings as errors by the docs_build
# test (sphinx-build -W -n) and, when Sphinx is found, by the build itself (the man page).
import re
from pathlib import Path

_root = Path(__file__).resolve().parent.parent
_version = re.search(r"project\(ddprun VERSION ([0-9.]+)", (_root / "CMakeLists.txt").read_text()).group(1)

project = "ddprun"
author = "the ddprun authors"
copyright = "the ddprun authors"
version = release = _version

extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "examples", "README.md", "reference/options.md"]
myst_enable_extensions = ["deflist"]
myst_heading_anchors = 3
# Every link between pages must resolve (-n): no external fetches are made.
nitpicky = True

html_theme = "furo"
html_title = f"ddprun {release}"

man_pages = [("reference/ddprun", "ddprun", "start and supervise distributed training workers, a native torchrun",
              [author], 1)]
man_show_urls = False
# Quotes as written: the man page stays ASCII where the text is (grep-able, and plain groff reads it).
smartquotes = False
