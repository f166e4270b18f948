"""ddprun: a native launcher and supervisor for PyTorch distributed training.

The pip package carries the launcher only (a C++ executable, no libtorch); `ddprun` and
`python -m ddprun` run it. The C++ worker library is installed with CMake (see docs/install.md).
"""
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("ddprun")
except PackageNotFoundError:  # imported from a source tree, not installed
    __version__ = "unknown"
