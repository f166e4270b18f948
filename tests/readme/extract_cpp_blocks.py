#!/usr/bin/python3
"""Writes every ```cpp block of the given Markdown files to OUT_DIR/<file>_<n>.cpp, one complete
program each, and prints their paths (one a line). Compiler messages point at the README's own
lines. Used by tests/readme/CMakeLists.txt.

    extract_cpp_blocks.py SOURCE_ROOT OUT_DIR FILE.md [FILE.md ...]   (FILE relative to SOURCE_ROOT)
"""
import os
import re
import sys


def main():
    root, out_dir, files = sys.argv[1], sys.argv[2], sys.argv[3:]
    os.makedirs(out_dir, exist_ok=True)
    for name in files:
        path = os.path.join(root, name)
        text = open(path, encoding="utf-8").read()
        stem = re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_")
        for n, match in enumerate(re.finditer(r"^```cpp\n(.*?)^```", text, re.S | re.M)):
            first_line = text.count("\n", 0, match.start(1)) + 1
            source = f'#line {first_line} "{path}"\n{match.group(1)}'
            target = os.path.join(out_dir, f"{stem}_{n}.cpp")
            # Rewrite only what changed, so that the build does not recompile untouched blocks.
            if not os.path.exists(target) or open(target, encoding="utf-8").read() != source:
                with open(target, "w", encoding="utf-8") as f:
                    f.write(source)
            print(target)


if __name__ == "__main__":
    main()
