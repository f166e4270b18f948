#!/usr/bin/env python3
"""Runs the manual's runnable console examples and checks the lines they show.

A runnable example is a console block marked so in a page of docs/:

    ```{code-block} console
    :class: runnable

    $ ddprun --nproc_per_node=2 examples/train.py
    [rank0]: rank 0 of 2, local rank 0, restart 0
    ...
    ```

Each `$ ` line is run with bash in a fresh folder holding a copy of docs/examples/ (as
`examples/`), with the built ddprun first in PATH, stdout and stderr together as a console shows
them. Every line shown after it must be a line of that output, each matching a different line,
in any order (ranks print side by side); `...` in a shown line matches any text, and a line that
is only `...` stands for lines not shown. Lines the output has and the block does not show are
fine: a block shows what matters.

Usage: run_examples.py DOCS_DIR DDPRUN WORK_DIR. Exit 0 when every example shows what it says;
1 naming the page, the command, the line not found and the whole output.
"""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

docs, ddprun, work = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
block = re.compile(r"^```\{code-block\} console\n:class: runnable\n\n(.*?)^```$", re.S | re.M)


def examples():
    for page in sorted(docs.rglob("*.md")):
        for match in block.finditer(page.read_text()):
            command, shown = None, []
            for line in match.group(1).splitlines():
                if line.startswith("$ "):
                    if command is not None:
                        yield page, command, shown
                    command, shown = line[2:], []
                elif command is not None and line.strip() and line.strip() != "...":
                    shown.append(line)
            if command is not None:
                yield page, command, shown


def pattern(line):
    return re.compile("^" + ".*".join(re.escape(part) for part in line.split("...")) + "$")


failures = 0
count = 0
env = dict(os.environ, PATH=f"{ddprun.parent}:{os.environ['PATH']}")
for page, command, shown in examples():
    count += 1
    folder = work / f"example{count}"
    shutil.copytree(docs / "examples", folder / "examples")
    run = subprocess.run(["bash", "-c", command], cwd=folder, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, timeout=120)
    output = run.stdout.decode(errors="replace").splitlines()
    left = list(output)
    for line in shown:
        found = next((out for out in left if pattern(line).match(out)), None)
        if found is None:
            failures += 1
            print(f"FAIL: {page.relative_to(docs)}: $ {command}\n  shows {line!r}, which the output lacks:")
            print("\n".join("    " + out for out in output))
            break
        left.remove(found)
    else:
        print(f"ok: {page.relative_to(docs)}: $ {command} ({len(shown)} lines)")
if count == 0:
    sys.exit(f"no runnable examples found in {docs}")
sys.exit(1 if failures else 0)
