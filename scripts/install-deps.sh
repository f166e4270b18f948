#!/usr/bin/env bash
# Installs what ddprun needs to build and test on Debian 12, as root (or through sudo).
# Idempotent: packages already present are skipped by apt; waits for the dpkg lock
# instead of failing when another apt is running.
#   scripts/install-deps.sh --main            only what building and running ddprun and the example
#                                             train needs (scripts/run-main.sh): main_packages
#   scripts/install-deps.sh                   build + test dependencies: main_packages, test_packages,
#                                             py-spy and OpenSSL 1.1's libcrypto for the tests
#   scripts/install-deps.sh --slurm           also the SLURM daemons used by the SLURM tests
#   scripts/install-deps.sh --torch2          also PyTorch 2.x from PyPI in a virtual environment
#                                             (version and place: scripts/torch2-env.sh)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
main=0 slurm=0 torch2=0
for arg in "$@"; do
  case $arg in
    --main) main=1 ;;
    --slurm) slurm=1 ;;
    --torch2) torch2=1 ;;
    *) echo "install-deps: unknown option $arg (expected --main, --slurm, --torch2)" >&2; exit 64 ;;
  esac
done
if (( main && (slurm || torch2) )); then
  echo "install-deps: --main installs only what ddprun and the example train need; it does not go with --slurm or --torch2" >&2
  exit 64
fi

# Building ddprun and the example train with the tests off (scripts/build.sh --main), and running
# them: what CMakeLists.txt, elastic/ and worker/ find when DDPRUN_BUILD_TESTS is OFF.
main_packages=(
  build-essential cmake ninja-build ccache
  libcli11-dev libfmt-dev nlohmann-json3-dev libasio-dev
  libmunge-dev                     # munge.h: the rendezvous authenticated by MUNGE under SLURM
  libcurl4-openssl-dev             # curl.h: the etcd rendezvous (libcurl is opened at run time); its
                                   # libssl3 is the libcrypto.so.3 the authenticated rendezvous opens
  libtorch-dev libgloo-dev libopenblas0-pthread  # the worker library; OpenBLAS for its CPU math
)
# What only the tests, the manual, the wheels and the benchmarks use.
test_packages=(
  pkg-config git
  doctest-dev                      # the unit tests
  libcpp-httplib-dev               # the status server's tests (an HTTP client)
  libssl-dev                       # libcrypto: the authenticated rendezvous (HMAC-SHA256)
  etcd-server etcd-client          # a real etcd (3.4) and etcdctl for the etcd rendezvous tests
  prometheus                       # Prometheus 2.42 and promtool: the /metrics tests start their own server on a free port
  chromium                         # tests/launcher/job_report_test.sh: ddprun report's page rendered in a real (headless) browser
  elfutils                         # eu-stack: a hung worker's native stacks (gdb also works)
  strace                           # tests/elastic/partition_test.sh: a launcher held in its start of workers
  python3 python3-torch            # reference for the sampler test and the Python side of benchmarks
  python3-pip                      # downloads py-spy's wheel (below): Debian does not package it
  python3-venv                     # the PyTorch 2.x virtual environment (--torch2)
  iproute2 procps psmisc util-linux time  # namespaces, process checks, script(1), benchmarks
  nftables                         # nft: the network faults of tests/elastic/netfault.sh (cuts, one-way cuts, loss)
  iptables                         # its NFQUEUE target: netfault.sh's delay and reordering (tests/elastic/nf_delay.py)
  clang libclang-rt-14-dev         # the fuzz/sanitizer build (build-fuzz/): libFuzzer, ASan, UBSan
  python3-sphinx python3-myst-parser furo  # the manual (docs/): sphinx-build -W -n, HTML and the man page
  groff-base man-db zsh            # the man page's check (man -l, groff -ww) and the zsh completion's test
  llvm                             # llvm-ar: the wheels' static libraries for any CPU (cmake/zig-toolchain.cmake)
  qemu-user-static libc6-arm64-cross  # the aarch64 wheel's launcher runs under qemu-aarch64 (package_wheel_aarch64)
  debootstrap                      # a Debian 11 root where the x86_64 wheel is installed and run (package_wheel_bullseye)
  hyperfine                        # scripts/wheel-figures.sh: the start-up time of the installed ddprun
)
packages=("${main_packages[@]}")
(( main )) || packages+=("${test_packages[@]}")
if (( slurm )); then
  packages+=(slurmctld slurmd slurm-client munge)
fi

sudo=()
if [[ $(id -u) -ne 0 ]]; then sudo=(sudo); fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "install-deps: installing ${missing[*]}"
  apt_opts=(-o DPkg::Lock::Timeout=600 -o Acquire::Retries=3)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get "${apt_opts[@]}" update -qq
  "${sudo[@]}" apt-get "${apt_opts[@]}" install -y -qq --no-install-recommends "${missing[@]}"
fi

# The first command (scripts/run-main.sh) stops here: py-spy, OpenSSL 1.1 and PyTorch 2.x are the
# tests' (py-spy: the Python stacks of a hung Python worker; the example train is C++).
if (( main )); then exit 0; fi

# py-spy: a hung Python worker's stacks, which ddprun looks for in PATH (without it, the
# worker's own faulthandler gives them). The pip-installed ddprun brings it as a dependency; the
# from-source route installs the same program here, so that both routes behave alike. Its wheel
# holds one static binary and no Python package: the binary is taken out of the wheel into
# /usr/local/bin (pip itself would put it where Debian's scheme says, /usr/local/local/bin).
# The version is the one the tests pin (torch2-requirements.txt).
py_spy_spec=$(grep -m1 '^py-spy==' "$here/torch2-requirements.txt")
py_spy_version=${py_spy_spec#py-spy==}
if [[ "$(/usr/local/bin/py-spy --version 2>/dev/null)" != "py-spy $py_spy_version" ]]; then
  wheels=${DDPRUN_WHEELS:-${XDG_CACHE_HOME:-$HOME/.cache}/ddprun/wheels}
  mkdir -p "$wheels"
  py_spy_wheel() { compgen -G "$wheels/py_spy-$py_spy_version-*$(uname -m)*.whl" | head -1 || true; }
  wheel=$(py_spy_wheel)
  if [[ -z $wheel ]]; then
    /usr/bin/python3 -m pip --disable-pip-version-check --no-input -q download --no-deps --only-binary=:all: \
      --dest "$wheels" "$py_spy_spec"
    wheel=$(py_spy_wheel)
    [[ -n $wheel ]] || { echo "install-deps: no $py_spy_spec wheel for $(uname -m) in $wheels" >&2; exit 1; }
  fi
  "${sudo[@]}" /usr/bin/python3 - "$wheel" "$py_spy_version" <<'PY'
import os, shutil, sys, zipfile
wheel, version = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z, z.open(f"py_spy-{version}.data/scripts/py-spy") as binary:
    with open("/usr/local/bin/py-spy.new", "wb") as out:
        shutil.copyfileobj(binary, out)
os.chmod("/usr/local/bin/py-spy.new", 0o755)
os.replace("/usr/local/bin/py-spy.new", "/usr/local/bin/py-spy")
PY
  echo "install-deps: $(/usr/local/bin/py-spy --version) in /usr/local/bin"
fi

# OpenSSL 1.1's libcrypto, as RHEL 8 and Ubuntu 20.04 have it: Debian 11's libssl1.1, downloaded
# with apt from Debian 11's archive (an apt configuration of its own, in a temporary folder: the
# system's sources and lists stay as they are) and unpacked into the cache, never installed. The
# test elastic_auth runs the authenticated rendezvous with it.
openssl11=${DDPRUN_OPENSSL11_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ddprun/openssl1.1}
if [[ $(uname -m) == x86_64 && ! -e $openssl11/usr/lib/x86_64-linux-gnu/libcrypto.so.1.1 ]]; then
  apt_dir=$(mktemp -d)
  mkdir -p "$apt_dir"/{lists/partial,cache/archives/partial,parts,deb}
  chmod -R a+rwx "$apt_dir"  # apt downloads as its own user, _apt
  keys=/usr/share/keyrings/debian-archive-bullseye
  cat >"$apt_dir/sources.list" <<LIST
deb [signed-by=$keys-security-automatic.gpg] http://deb.debian.org/debian-security bullseye-security main
deb [signed-by=$keys-stable.gpg] http://deb.debian.org/debian bullseye main
LIST
  own_apt=(-o Dir::Etc::SourceList="$apt_dir/sources.list" -o Dir::Etc::SourceParts="$apt_dir/parts"
           -o Dir::State::Lists="$apt_dir/lists" -o Dir::Cache="$apt_dir/cache" -o Dir::State::status=/dev/null
           -o APT::Architecture=amd64 -o APT::Architectures::=amd64 -o Acquire::Retries=3)
  "${sudo[@]}" apt-get "${own_apt[@]}" update -qq
  (cd "$apt_dir/deb" && "${sudo[@]}" apt-get "${own_apt[@]}" download -qq libssl1.1)
  mkdir -p "$openssl11"
  dpkg -x "$apt_dir"/deb/libssl1.1_*.deb "$openssl11"
  "${sudo[@]}" rm -rf "$apt_dir"
  echo "install-deps: OpenSSL 1.1's libcrypto in $openssl11 (for the tests only)"
fi

(( torch2 )) || exit 0
# PyTorch 2.x: a CUDA build from PyPI (it ships libtorch, c10d and NCCL for C++, and the CUDA
# libraries it needs), in a virtual environment of Debian's python3, never the system's. The
# wheels are kept in TORCH2_WHEELS and installed from there without the index, so a second
# install (a new clone, a CI run) downloads nothing.
source "$here/torch2-env.sh"
requirements=$here/torch2-requirements.txt
[[ -x "$TORCH2_PYTHON" ]] || { mkdir -p "$(dirname "$TORCH2_VENV")"; /usr/bin/python3 -m venv "$TORCH2_VENV"; }
mkdir -p "$TORCH2_WHEELS"
pip=("$TORCH2_PYTHON" -m pip --disable-pip-version-check --no-input -q)
# Already installed: a second or two, no network. Wheels kept: no download.
if ! "${pip[@]}" install --no-index --find-links "$TORCH2_WHEELS" -r "$requirements" 2>/dev/null; then
  echo "install-deps: downloading $TORCH2_SPEC (and what it needs) into $TORCH2_WHEELS"
  "${pip[@]}" download --dest "$TORCH2_WHEELS" -r "$requirements"
  "${pip[@]}" install --no-index --find-links "$TORCH2_WHEELS" -r "$requirements"
fi
