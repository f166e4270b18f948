#!/usr/bin/env python3
"""The manual's reference names what the sources make public.

- every `DDPRUN_*` variable the sources read or set (a string literal in config/, launcher/,
  elastic/, worker/ or python/), and every variable of the launcher/worker contract
  (config/include/ddprun/worker_env.hpp: torchrun's and SLURM's among them), is in
  docs/reference/environment.md;
- every exit code of config/include/ddprun/exit_codes.hpp is a term of the Exit status section
  of docs/reference/ddprun.md (the man page);
- every event the launcher writes to --event_log (each record of launcher/report/event_records.cpp,
  and any written by name elsewhere in launcher/) is in docs/reference/event-log.md;
- every failure kind of config/include/ddprun/failure_kind.hpp is in docs/guides/failures.md.

Usage: reference_test.py [SOURCE_DIR]. Exit 0 when all are documented; 1 with what is missing
and the page to add it to.
"""
import re
import sys
from pathlib import Path

root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[2])
docs = root / "docs"
missing = []


def sources(*folders, suffixes=(".cpp", ".hpp", ".py", ".sh")):
    for folder in folders:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix in suffixes and path.is_file():
                yield path


def backquoted(text):
    """The names a page shows in code spans: `NAME`, `NAME=1`, `--x NAME`."""
    return set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", " ".join(re.findall(r"`([^`]+)`", text))))


environment_page = docs / "reference" / "environment.md"
documented = backquoted(environment_page.read_text())
variables = {}
for path in sources("config", "launcher", "elastic", "worker", "python"):
    for name in re.findall(r'"(DDPRUN_[A-Z0-9_]+)"', path.read_text(errors="replace")):
        variables.setdefault(name, path.relative_to(root))
contract = root / "config" / "include" / "ddprun" / "worker_env.hpp"
for name in re.findall(r'constexpr const char\* k\w+ = "([A-Z][A-Z0-9_]*)";', contract.read_text()):
    variables.setdefault(name, contract.relative_to(root))
if len(variables) < 30:
    sys.exit(f"only {len(variables)} variables found in the sources: is {root} ddprun's source tree?")
for name, where in sorted(variables.items()):
    if name.endswith("_") or name == "PET_":
        name = name.rstrip("_")
        if f"`{name}_<OPTION>`" not in environment_page.read_text():
            missing.append(f"{name}_<OPTION> (from {where}): not in {environment_page.relative_to(root)}")
        continue
    if name not in documented:
        missing.append(f"{name} (from {where}): not in {environment_page.relative_to(root)}")

man_page = (docs / "reference" / "ddprun.md").read_text()
exit_status = man_page.split("## Exit status", 1)[1].split("\n## ", 1)[0]
terms = {line.strip() for line in exit_status.splitlines() if line and not line.startswith((":", " "))}
codes = re.findall(r"constexpr int (k\w+) = (\d+);", (root / "config/include/ddprun/exit_codes.hpp").read_text())
for name, code in codes:
    if name == "kSignalBase":
        code = "128+N"
    if not any(code in re.split(r",\s*", term) for term in terms):
        missing.append(f"exit code {code} ({name}): not a term of the Exit status section of docs/reference/ddprun.md")

events_page = (docs / "reference" / "event-log.md").read_text()
events = set()
for records in ("launcher/report/event_records.cpp", "launcher/report/goodput_ledger.cpp"):
    events |= set(re.findall(r'return \{"([a-z_]+)",', (root / records).read_text()))
for path in sources("launcher", suffixes=(".cpp",)):
    events |= set(re.findall(r'\b(?:write|event)\("([a-z_]+)"', path.read_text()))
if len(events) < 10:
    sys.exit(f"only {len(events)} events found in launcher/: have the records of report/event_records.cpp changed their form?")
for event in sorted(events):
    if f"| `{event}` |" not in events_page:
        missing.append(f"event {event}: not a row of docs/reference/event-log.md")

failures_page = (docs / "guides" / "failures.md").read_text()
kinds = re.findall(r'X\(k\w+, "([a-z_]+)"', (root / "config/include/ddprun/failure_kind.hpp").read_text())
if not kinds:
    missing.append("failure kinds: none found in config/include/ddprun/failure_kind.hpp's DDPRUN_FAILURE_KINDS")
for kind in kinds:
    if f"`{kind}`" not in failures_page:
        missing.append(f"failure kind {kind}: not in docs/guides/failures.md")

if missing:
    print("not documented:\n  " + "\n  ".join(missing))
    sys.exit(1)
print(f"documented: {len(variables)} environment variables, {len(codes)} exit codes, {len(events)} events, "
      f"{len(kinds)} failure kinds")
