#!/usr/bin/env bash
# Installs what ddprun needs to build and test on Debian 12, as root (or through sudo).
# Idempotent: packages already present are skipped by apt; waits for the dpkg lock
# instead of failing when another apt is running.
#   scripts/install-deps.sh          build + test dependencies
#   scripts/install-deps.sh --slurm  also the SLURM daemons used by the SLURM tests
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config git
  libcli11-dev libfmt-dev nlohmann-json3-dev doctest-dev libasio-dev
  libtorch-dev libgloo-dev libopenblas0-pthread
  python3 python3-torch            # reference for the sampler test and the Python side of benchmarks
  iproute2 procps psmisc util-linux time  # namespaces, process checks, script(1), benchmarks
)
if [[ "${1:-}" == "--slurm" ]]; then
  packages+=(slurmctld slurmd slurm-client munge)
fi

sudo=()
if [[ $(id -u) -ne 0 ]]; then sudo=(sudo); fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
apt_opts=(-o DPkg::Lock::Timeout=600 -o Acquire::Retries=3)
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get "${apt_opts[@]}" update -qq
"${sudo[@]}" apt-get "${apt_opts[@]}" install -y -qq --no-install-recommends "${missing[@]}"
