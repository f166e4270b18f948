#!/usr/bin/env python3
"""Checks a ddprun wheel against its manylinux_2_28 promise (issue 40):
    check-wheel.py WHEEL
Every ELF file in it may need no GLIBC_ symbol version above 2.28 and no shared library but
glibc's; `auditwheel show` must agree that the wheel is manylinux_2_28 (or older) for its CPU.
Prints one line per ELF file; exits 1 with one line per problem. Runs with the Python that has
auditwheel (and so pyelftools), whatever the wheel's CPU."""
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection

MAX_GLIBC = (2, 28)
# glibc's own libraries: what a manylinux wheel may need from the system.
GLIBC_LIBS = {"libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1", "libutil.so.1",
              "libresolv.so.2", "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1"}


def needs(path):
    """(the shared libraries it names, the highest GLIBC_ version it needs)"""
    with open(path, "rb") as f:
        elf = ELFFile(f)
        dynamic = elf.get_section_by_name(".dynamic")
        libraries = [t.needed for t in dynamic.iter_tags() if t.entry.d_tag == "DT_NEEDED"] if dynamic else []
        highest = (0, 0)
        for section in elf.iter_sections():
            if isinstance(section, GNUVerNeedSection):
                for _, auxiliaries in section.iter_versions():
                    for aux in auxiliaries:
                        m = re.fullmatch(r"GLIBC_(\d+)\.(\d+)(?:\.\d+)?", aux.name)
                        if m:
                            highest = max(highest, (int(m[1]), int(m[2])))
        return libraries, highest


def main():
    wheel = Path(sys.argv[1])
    cpu = re.search(r"-py3-none-manylinux_2_28_(x86_64|aarch64)\.whl$", wheel.name)
    problems = [] if cpu else [f"{wheel.name}: not tagged py3-none-manylinux_2_28_x86_64 or _aarch64"]
    elf_files = 0
    with tempfile.TemporaryDirectory() as tmp:
        zipfile.ZipFile(wheel).extractall(tmp)
        for path in sorted(Path(tmp).rglob("*")):
            if not path.is_file() or path.read_bytes()[:4] != b"\x7fELF":
                continue
            elf_files += 1
            libraries, highest = needs(path)
            name = path.relative_to(tmp)
            print(f"{name}: GLIBC_{highest[0]}.{highest[1]} at most; needs {', '.join(libraries) or 'nothing'}")
            if highest > MAX_GLIBC:
                problems.append(f"{name} needs GLIBC_{highest[0]}.{highest[1]}, above 2.28")
            for library in set(libraries) - GLIBC_LIBS:
                problems.append(f"{name} needs {library}, which is not glibc's")
    if elf_files == 0:
        problems.append(f"{wheel.name} has no ELF file")
    shown = subprocess.run([sys.executable, "-m", "auditwheel", "show", str(wheel)], capture_output=True, text=True)
    tag = re.search(r'consistent\s+with\s+the\s+following\s+platform\s+tag:\s*"manylinux_(\d+)_(\d+)_(\w+)"', shown.stdout)
    if shown.returncode != 0 or not tag:
        problems.append(f"auditwheel show {wheel.name} found no manylinux tag: {(shown.stdout + shown.stderr).strip()}")
    elif (int(tag[1]), int(tag[2])) > MAX_GLIBC or (cpu and tag[3] != cpu[1]):
        problems.append(f"auditwheel show: {wheel.name} is manylinux_{tag[1]}_{tag[2]}_{tag[3]}")
    else:
        print(f"auditwheel show: consistent with manylinux_{tag[1]}_{tag[2]}_{tag[3]}")
    for p in problems:
        print(f"check-wheel: {p}", file=sys.stderr)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
