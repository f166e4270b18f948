#!/usr/bin/env python3
"""README.md is a five-minute read that starts a newcomer off and links into the manual.

- at most 300 lines;
- its first code block is the two commands for a fresh Debian 12 machine (scripts/run-main.sh,
  then scripts/run-tests.sh), and .ci/run (where there is one) calls only the second;
- every relative link in it names a file that exists (docs/ pages above all).

Usage: readme_test.py [SOURCE_DIR]. Exit 0, or 1 with what is wrong.
"""
import re
import sys
from pathlib import Path

root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[2])
text = (root / "README.md").read_text()
problems = []
lines = text.count("\n")
if lines > 300:
    problems.append(f"README.md has {lines} lines, more than 300: move the detail into docs/")
first_block = re.search(r"```sh\n(.*?)```", text, re.S)
commands = [l.split("#")[0].strip() for l in first_block.group(1).splitlines()] if first_block else []
if commands != ["bash scripts/run-main.sh", "bash scripts/run-tests.sh"]:
    problems.append(f"README.md's first code block is not the two commands run-main.sh, run-tests.sh: {commands}")
ci = root / ".ci" / "run"
if ci.exists():
    calls = re.findall(r"scripts/[\w.-]+\.sh", ci.read_text())
    if calls != ["scripts/run-tests.sh"]:
        problems.append(f".ci/run calls {calls}, not scripts/run-tests.sh alone")
for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text):
    if not (root / target).exists():
        problems.append(f"README.md links to {target}, which does not exist")
if problems:
    print("\n".join(problems))
    sys.exit(1)
print(f"README.md: {lines} lines, the two commands first, every link resolves")
