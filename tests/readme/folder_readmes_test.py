#!/usr/bin/env python3
"""Every folder README names every file and sub-folder directly in its folder.

A folder README is a "where is X" table: a file it does not name is a question it cannot answer.
For each README.md below the source root (the top-level one aside, and build*/ and fuzz corpora,
which are not sources), every file and sub-folder directly beside it, as git sees them (tracked,
or new and not ignored), must appear in its text by name, in backquotes or not (`spawn.cpp`,
`process/`). Without git (a source tarball) the tree is walked instead.

Usage: folder_readmes_test.py [SOURCE_DIR]  (default: $DDPRUN_SOURCE_DIR, else this checkout)
Exit 0 when every README names every file; 1 with the missing names, README by README.
"""
import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import PurePosixPath

SKIPPED_DIRS = {".git", "__pycache__"}


def skipped(folder):
    """Folders whose README is not checked and whose files are not sources."""
    parts = PurePosixPath(folder).parts
    if any(p in SKIPPED_DIRS for p in parts):
        return True
    if parts and parts[0].startswith("build"):
        return True
    # tests/fuzz/<target>/corpus: seed inputs, named by their hashes.
    return len(parts) >= 4 and parts[:2] == ("tests", "fuzz") and parts[3] == "corpus"


def source_files(root):
    """Paths relative to root, '/'-separated: git's tracked and new files, or a walk."""
    try:
        out = subprocess.run(
            ["git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            check=True, capture_output=True).stdout
        paths = [p for p in out.decode().split("\0") if p]
        # A file deleted but not yet staged is still in the index.
        return [p for p in paths if os.path.lexists(os.path.join(root, p))]
    except (OSError, subprocess.CalledProcessError):
        pass
    paths = []
    for folder, dirs, files in os.walk(root):
        rel = os.path.relpath(folder, root)
        rel = "" if rel == "." else rel.replace(os.sep, "/")
        dirs[:] = [d for d in dirs if not skipped(f"{rel}/{d}".lstrip("/"))]
        paths += [f"{rel}/{f}".lstrip("/") for f in files if not f.endswith(".pyc")]
    return paths


def entries_by_folder(paths):
    """folder -> the names directly in it: its files and its sub-folders."""
    entries = defaultdict(set)
    for path in paths:
        parts = PurePosixPath(path).parts
        for depth in range(len(parts)):
            folder = "/".join(parts[:depth])
            entries[folder].add(parts[depth])
    return entries


def names(text, name):
    """Whether text names `name`: not as part of a longer name (`agent.hpp` in `agent.hpp.in`,
    `ddp` in `ddp.cpp` or `ddp_join.cpp`); a path before it (`process/spawn.cpp`) is fine."""
    pattern = r"(?<![\w.-])" + re.escape(name) + r"(?![\w-]|\.\w)"
    return re.search(pattern, text) is not None


def main():
    root = (sys.argv[1] if len(sys.argv) > 1 else os.environ.get("DDPRUN_SOURCE_DIR")
            or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    entries = entries_by_folder(source_files(root))
    readmes = sorted(folder for folder, names_here in entries.items()
                     if folder and "README.md" in names_here and not skipped(folder))
    missing = {}
    for folder in readmes:
        with open(os.path.join(root, folder, "README.md"), encoding="utf-8") as f:
            text = f.read()
        absent = sorted(n for n in entries[folder] if n != "README.md" and not names(text, n))
        if absent:
            missing[folder] = absent
    for folder, absent in missing.items():
        print(f"{folder}/README.md does not name: {', '.join(absent)}")
    if missing:
        count = sum(len(a) for a in missing.values())
        print(f"FAIL: {count} names missing from {len(missing)} of {len(readmes)} folder READMEs; "
              "each folder README names every file and sub-folder beside it")
        return 1
    print(f"ok: {len(readmes)} folder READMEs name every file and sub-folder beside them")
    return 0


if __name__ == "__main__":
    sys.exit(main())
