"""`python -m ddprun`: replaces this Python process with the launcher that the package installed.

The wheel puts the launcher itself (a C++ executable) in the environment's scripts folder as
`ddprun`, so the `ddprun` command starts no interpreter; there it takes the Python beside it for
Python workers. Through `python -m ddprun` the workers' Python is this interpreter instead (unless
PYTHON_EXEC names another), and the launcher takes a hung Python worker's stacks with the py-spy
this package depends on, wherever pip put its program."""
import os
import sys
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path


def installed_program(distribution_name: str, program: str) -> str:
    """The path of `program` among the files a distribution installed in a scripts folder ("" if
    none). pip puts them in the scripts folder of the scheme it installed into (a virtual
    environment's bin/, ~/.local/bin with --user, PREFIX/bin with --prefix), which need not be
    next to sys.executable nor in PATH; the distribution's record says where."""
    try:
        files = distribution(distribution_name).files or []
    except PackageNotFoundError:
        return ""
    found = [f for f in files if f.name == program and len(f.parts) > 1 and f.parts[-2] == "bin"]
    return str(found[0].locate().resolve()) if found else ""


def executable() -> str:
    """The launcher executable the ddprun package installed."""
    return installed_program("ddprun", "ddprun")


def py_spy() -> str:
    """The program of the installed py-spy distribution ("" if none)."""
    for name in ("py-spy", "py_spy"):  # Python 3.8 and 3.9 do not normalize the name themselves
        found = installed_program(name, "py-spy")
        if found:
            return found
    return ""


def main() -> None:
    launcher = executable()
    if not launcher:
        sys.exit("ddprun: the ddprun package's launcher is not installed (reinstall the ddprun package)")
    if sys.executable:
        os.environ["DDPRUN_DEFAULT_PYTHON"] = sys.executable
    if "DDPRUN_PY_SPY" not in os.environ:
        found = py_spy()
        if found:
            os.environ["DDPRUN_PY_SPY"] = found
    try:
        os.execv(launcher, ["ddprun", *sys.argv[1:]])
    except OSError as error:
        sys.exit(f"ddprun: cannot run {launcher}: {error.strerror} (reinstall the ddprun package)")
