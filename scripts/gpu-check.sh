#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: builds the worker library against the torch 2.x of its
# python3, runs the worker tests (the GPU ones, label gpu, among them) and the GPU benchmarks,
# and writes everything to OUT_DIR. Needs CUDA, CMake, Ninja, a C++ compiler and python3 with
# torch there, and the folder scripts/gpu-prepare.sh made here (.gpu-bundle/) for the other
# headers; nothing is downloaded.
#   scripts/gpu-check.sh [OUT_DIR]    default: gpu-results/ in the repository
# PYTHON names another interpreter; DDPRUN_GPU_BUNDLE another bundle folder.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/gpu-results}
bundle=${DDPRUN_GPU_BUNDLE:-$root/.gpu-bundle}
python=${PYTHON:-python3}
build=${DDPRUN_GPU_BUILD_DIR:-$root/build-gpu}
mkdir -p "$out"
[[ -d "$bundle/usr/include" ]] || { echo "gpu-check: no $bundle; run scripts/gpu-prepare.sh where Debian's packages can be had" >&2; exit 1; }
# The benchmarks and torch2_cmake_prefix_path take this interpreter instead of a venv.
export DDPRUN_TORCH2_PYTHON
DDPRUN_TORCH2_PYTHON=$(command -v "$python") || { echo "gpu-check: no $python" >&2; exit 1; }
source "$root/scripts/torch2-env.sh"
prefix_path=$(torch2_cmake_prefix_path) || { echo "gpu-check: $python has no torch" >&2; exit 1; }
{
  nvidia-smi || echo "nvidia-smi: not available"
  "$python" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())'
  nproc
} >"$out/machine.txt" 2>&1
cat "$out/machine.txt"

# The bundle's CMake package files, named directly: CMake looks in lib/<arch>/cmake only where it
# knows the multiarch folder.
config_dir() { dirname "$(find "$bundle" -name "$1" -print -quit)"; }
set -e
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_PREFIX_PATH="$prefix_path;$bundle/usr" \
  -Dfmt_DIR="$(config_dir fmt-config.cmake)" \
  -Dnlohmann_json_DIR="$(config_dir nlohmann_jsonConfig.cmake)" \
  -DCLI11_DIR="$(config_dir CLI11Config.cmake)" \
  -Ddoctest_DIR="$(config_dir doctestConfig.cmake)" \
  -DDDPRUN_TORCH_PYTHON="$DDPRUN_TORCH2_PYTHON" -DDDPRUN_LAUNCHER_TESTS=OFF \
  2>&1 | tee "$out/configure.txt" | tail -3
ninja -C "$build" 2>&1 | tee "$out/build.txt" | tail -3
set +e
status=0
(cd "$build" && ctest --output-on-failure -j 4 --output-junit "$out/ctest.xml") 2>&1 | tee "$out/ctest.txt" || status=1
"$python" "$root/scripts/test-summary.py" "gpu machine=$out/ctest.xml" | tee -a "$out/ctest.txt" || status=1
DDPRUN_BUILD_DIR="$build" DDPRUN_TORCH2_BUILD_DIR="$build" "$python" "$root/scripts/bench/gpu.py" \
  2>&1 | tee "$out/bench-gpu.txt" || status=1
echo "gpu-check: results in $out"
exit $status
