"""The `ddprun` command of the pip package: replaces this Python process with the bundled
launcher. Python programs then run under this interpreter (the one ddprun was installed
with, as torchrun does) unless PYTHON_EXEC names another."""
import os
import sys
from pathlib import Path


def executable() -> Path:
    """The launcher executable inside the installed package."""
    return Path(__file__).resolve().parent / "bin" / "ddprun"


def main() -> None:
    launcher = executable()
    if sys.executable:
        os.environ["DDPRUN_DEFAULT_PYTHON"] = sys.executable
    try:
        os.execv(launcher, ["ddprun", *sys.argv[1:]])
    except OSError as error:
        sys.exit(f"ddprun: cannot run {launcher}: {error.strerror} (reinstall the ddprun package)")
