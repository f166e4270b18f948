# Sourced by the scripts: where the PyTorch 2.x virtual environment lives and how to build
# against its libtorch. Defines TORCH2_SPEC, TORCH2_VENV, TORCH2_PYTHON and TORCH2_WHEELS.
#   DDPRUN_TORCH2_VENV   the virtual environment (default: ~/.cache/ddprun/venv-<pinned version>)
#   DDPRUN_WHEELS        downloaded wheels, kept so that a second install downloads nothing
#                        (default: ~/.cache/ddprun/wheels)
#   DDPRUN_TORCH2_PYTHON an interpreter that already has torch 2.x, used instead of the venv's
#                        by the benchmarks (scripts/gpu-check.sh sets it to the GPU machine's)
TORCH2_SPEC=$(grep -v '^#' "$(dirname "${BASH_SOURCE[0]}")/torch2-requirements.txt" | grep -m1 .)
_cache=${XDG_CACHE_HOME:-$HOME/.cache}/ddprun
TORCH2_VENV=${DDPRUN_TORCH2_VENV:-$_cache/venv-${TORCH2_SPEC//=/}}
TORCH2_PYTHON=${DDPRUN_TORCH2_PYTHON:-$TORCH2_VENV/bin/python}
TORCH2_WHEELS=${DDPRUN_WHEELS:-$_cache/wheels}
unset _cache

# The CMAKE_PREFIX_PATH for building against the venv's libtorch. TorchConfig.cmake looks for
# libtorch.so and libc10.so with find_library(... PATHS <its prefix>/lib), which searches the
# system folders first: with Debian's libtorch-dev installed as well, the wheel's headers would
# be linked against Debian's 1.13 libc10.so. Naming the torch folder itself first prevents that.
torch2_cmake_prefix_path() {
  "$TORCH2_PYTHON" -c 'import os, torch, torch.utils; print(os.path.dirname(torch.__file__) + ";" + torch.utils.cmake_prefix_path)'
}
