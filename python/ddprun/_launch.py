"""The `ddprun` command of the pip package: replaces this Python process with the bundled
launcher. Python programs then run under this interpreter (the one ddprun was installed
with, as torchrun does) unless PYTHON_EXEC names another. The launcher takes a hung Python
worker's stacks with the py-spy that this package depends on, wherever pip put its program."""
import os
import sys
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path


def executable() -> Path:
    """The launcher executable inside the installed package."""
    return Path(__file__).resolve().parent / "bin" / "ddprun"


def py_spy() -> str:
    """The program of the installed py-spy distribution ("" if none): pip puts it in the scripts
    folder of the scheme it installed into (a virtual environment's bin/, ~/.local/bin with
    --user), which need not be next to sys.executable nor in PATH. Its record says where."""
    for name in ("py-spy", "py_spy"):  # Python 3.8 and 3.9 do not normalize the name themselves
        try:
            files = distribution(name).files or []
        except PackageNotFoundError:
            continue
        programs = [f for f in files if f.name == "py-spy"]
        return str(programs[0].locate().resolve()) if programs else ""
    return ""


def main() -> None:
    launcher = executable()
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
