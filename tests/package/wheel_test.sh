#!/usr/bin/env bash
# The launcher's wheel (issues 14 and 40): scripts/build-wheel.sh gives one manylinux_2_28 wheel
# (zig's toolchain) whose ELF files need no GLIBC_ version above 2.28 and nothing but glibc, as
# auditwheel agrees (scripts/check-wheel.py). Installed into a fresh venv (which sees PyTorch 2.x
# through a .pth file, rather than a 2.5 GB copy of it) where no compiler and no -dev header can
# be found (a mount namespace hides them, as root; else the test skips), the venv's bin/ddprun is
# the launcher itself (no console script), `ddprun` and `python -m ddprun` work from there, without
# the venv on PATH, and run a Python DDP script (gloo, 2 workers, a crash and a restart) with the
# venv's own interpreter (the one beside ddprun), not the python3 on PATH; PYTHON_EXEC still
# chooses another. The wheel brings py-spy, and a hung Python worker's stacks are Python's with
# nothing else in PATH, also when pip put both in a scripts folder of their own (--prefix), and
# through `python -m ddprun`, which finds both through the packages' records.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
: "${TORCH_PYTHON:?}"

# The wheel, once checked, is also left in the build tree's tests/package/wheel/ for the tests
# that take it from here (this test is their fixture: wheel_old_userland_test.sh).
handoff=$DDPRUN_BUILD_DIR/tests/package/wheel
rm -rf "$handoff"
PYTHON=$TORCH_PYTHON bash "$DDPRUN_SOURCE_DIR/scripts/build-wheel.sh" "$T/dist" >"$T/build.log" 2>&1 \
  || { cat "$T/build.log"; fail "the wheel did not build"; }
wheels=("$T"/dist/*.whl)
expect_eq "${#wheels[@]}" 1 "wheels built"
wheel=$(basename "${wheels[0]}")
[[ "$wheel" =~ ^ddprun-[0-9.]+-py3-none-manylinux_2_28_x86_64\.whl$ ]] || fail "unexpected wheel name $wheel"
ok "built $wheel"
"$TORCH_PYTHON" "$DDPRUN_SOURCE_DIR/scripts/check-wheel.py" "${wheels[0]}" >"$T/check.log" 2>&1 \
  || { cat "$T/check.log"; fail "$wheel is not manylinux_2_28"; }
ok "glibc 2.28 at most, nothing but glibc, auditwheel agrees: $(tail -1 "$T/check.log")"
mkdir -p "$handoff"
cp "${wheels[0]}" "$handoff/"

# without_toolchain COMMAND...: COMMAND where no compiler, linker, CMake, zig or -dev header is
# found: read-only empty folders over the include folders, GCC's and the torch venv's ziglang,
# and /dev/null (not executable) over every compiler program.
[[ $(id -u) -eq 0 ]] || skip "hiding the compilers takes a mount namespace: run as root"
ziglang_dir=$("$TORCH_PYTHON" -c 'import os, ziglang; print(os.path.dirname(ziglang.__file__))' 2>/dev/null || true)
without_toolchain() {
  unshare -m bash -c '
    for d in /usr/include /usr/local/include /usr/lib/gcc /usr/lib/llvm-14 "$1"; do
      [[ -d $d ]] && mount -t tmpfs -o ro none "$d"
    done
    shift
    for c in cc c++ gcc g++ cpp clang clang++ ld ld.bfd ld.gold ld.lld as cmake ninja zig; do
      p=$(command -v "$c") && mount --bind /dev/null "$(readlink -f "$p")"
    done
    exec "$@"' _ "${ziglang_dir:-/nonexistent}" "$@"
}
without_toolchain bash -c '! cc --version && ! c++ --version && ! clang++ --version && ! cmake --version &&
  [[ ! -e /usr/include/stdio.h ]] && ! "$1" -m ziglang version' _ "$TORCH_PYTHON" >/dev/null 2>&1 \
  || fail "the namespace still shows a compiler, CMake, zig or /usr/include/stdio.h"

/usr/bin/python3 -m venv "$T/venv"
V=$T/venv/bin
site=$("$V/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$TORCH_PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' >"$site/torch2.pth"
# With its dependency, py-spy, from the wheels that scripts/install-deps.sh --torch2 keeps
# (--ignore-installed: the 2.x venv seen through torch2.pth has a py-spy of its own).
source "$DDPRUN_SOURCE_DIR/scripts/torch2-env.sh"
ls "$TORCH2_WHEELS"/py_spy-*.whl >/dev/null 2>&1 || skip "no py-spy wheel in $TORCH2_WHEELS (scripts/install-deps.sh --torch2)"
without_toolchain "$V/python" -m pip install --disable-pip-version-check -q --no-index --find-links "$TORCH2_WHEELS" \
  --ignore-installed "${wheels[0]}"
"$V/python" - "${wheels[0]}" <<'PY' || fail "the wheel does not depend on py-spy"
import sys, zipfile
wheel = zipfile.ZipFile(sys.argv[1])
metadata = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
sys.exit(not any(l.startswith("Requires-Dist: py-spy") for l in wheel.read(metadata).decode().splitlines()))
PY
[[ -x "$V/py-spy" ]] || fail "pip install ddprun did not bring py-spy"
[[ "$(head -c4 "$V/ddprun" | od -An -c | tr -d ' ')" == '177ELF' ]] || fail "$V/ddprun is not the launcher itself"
[[ -e $T/venv/share/ddprun/python/sitecustomize.py ]] || fail "the Python bootstrap is not in the venv's share/ddprun/python"
[[ -e $T/venv/share/man/man1/ddprun.1 ]] || fail "the man page is not in the venv's share/man/man1"
ok "the venv's bin/ddprun is the launcher itself; its bootstrap and man page in the venv's share/"
version=$(sed -nE 's/^project\(ddprun VERSION ([0-9.]+).*/\1/p' "$DDPRUN_SOURCE_DIR/CMakeLists.txt")
expect_eq "$("$V/ddprun" --version)" "ddprun $version" "ddprun --version"
expect_eq "$("$V/python" -m ddprun --version)" "ddprun $version" "python -m ddprun --version"
ok "ddprun and python -m ddprun run from the venv"

cat >"$T/train.py" <<'PY'
import os, sys
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

assert torch.__version__.startswith("2."), f"{sys.executable} has torch {torch.__version__}"
if os.environ["TORCHELASTIC_RESTART_COUNT"] == "0" and os.environ["RANK"] == "1":
    sys.exit("crashing on purpose in attempt 0")
dist.init_process_group("gloo")
torch.manual_seed(dist.get_rank())  # different replicas: DDP's broadcast must unify them
model = DistributedDataParallel(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
g = torch.Generator().manual_seed(7 + dist.get_rank())
for _ in range(5):
    x = torch.randn(8, 4, generator=g)
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True)).backward()
    opt.step()
flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
gathered = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
dist.all_gather(gathered, flat)
assert all(torch.equal(flat, other) for other in gathered), "replicas differ"
print(f"identical after restart {os.environ['TORCHELASTIC_RESTART_COUNT']} under {sys.executable}", flush=True)
dist.barrier()
dist.destroy_process_group()
# Past this point torch's gloo teardown at interpreter exit sometimes aborts ("terminate called
# without an active exception", pytorch/pytorch#190489): not what this test is about.
os._exit(0)
PY
# PATH without the venv: the python3 found there is not the venv's.
PATH=/usr/bin:/bin without_toolchain "$V/ddprun" --nproc_per_node=2 --max_restarts=1 "$T/train.py" >"$T/run.out" 2>"$T/run.err" \
  || { cat "$T/run.out" "$T/run.err"; fail "the DDP script failed under the installed ddprun"; }
expect_in "$T/run.err" 'crashing on purpose in attempt 0'
expect_in "$T/run.out" "^\[rank1\]: identical after restart 1 under $T/venv/bin/python3?\$"
ok "a Python DDP script restarts and trains under the venv's Python, with no compiler or header to be found"

printf 'import sys\nprint(sys.executable)\n' >"$T/which.py"
PATH=/usr/bin:/bin PYTHON_EXEC=/usr/bin/python3 "$V/ddprun" "$T/which.py" >"$T/which.out" 2>&1 \
  || { cat "$T/which.out"; fail "which.py failed"; }
expect_in "$T/which.out" '^\[rank0\]: /usr/bin/python3$'
ok "PYTHON_EXEC still chooses the interpreter"

# A hung Python worker: its Python frames, by the py-spy that came with the package.
cat >"$T/stuck.py" <<'PY'
import os, time
def stuck_in_python():
    while True:
        time.sleep(3600)
os.utime(os.environ["DDPRUN_HEARTBEAT_FILE"])
stuck_in_python()
PY
# expect_hung_stack NAME PY_SPY COMMAND...: COMMAND (a ddprun) runs stuck.py with --hang_timeout=2
# and a fresh --log_dir, into $T/NAME.out and .err; it must exit 124 with the worker's stacks
# dumped by PY_SPY.
expect_hung_stack() {
  local name=$1 py_spy=$2 rc
  shift 2
  rm -rf "$T/logs"
  set +e
  "$@" --hang_timeout=2 --log_dir="$T/logs" "$T/stuck.py" >"$T/$name.out" 2>"$T/$name.err"
  rc=$?
  set -e
  expect_eq "$rc" 124 "exit code of the hung worker ($name)"
  expect_in "$(run_dir "$T/logs")/attempt_0/rank_0/stacks.txt" "^== '$py_spy' dump --pid"
}
expect_hung_stack hang "$T/venv/bin/py-spy" env PATH=/usr/bin:/bin "$V/ddprun"
expect_in "$T/hang.err" "^        stuck_in_python \(.*stuck.py:[0-9]+\)"
ok "a hung Python worker's Python stack, by the py-spy the wheel brought, with PATH=/usr/bin:/bin"

# pip install --prefix: the package and its py-spy away from the venv's Python; the launcher
# takes the py-spy beside it, before the one next to the venv's Python.
"$V/python" -m pip install --disable-pip-version-check -q --no-index --find-links "$TORCH2_WHEELS" \
  --ignore-installed --prefix "$T/prefix" "${wheels[0]}"
prefix_site=$("$V/python" -c "import sysconfig; print(sysconfig.get_paths(vars={'base': '$T/prefix', 'platbase': '$T/prefix'})['purelib'])")
[[ -x "$T/prefix/bin/py-spy" ]] || fail "pip install --prefix did not put py-spy in $T/prefix/bin"
expect_hung_stack prefix "$T/prefix/bin/py-spy" env PYTHONPATH="$prefix_site" PATH=/usr/bin:/bin "$T/prefix/bin/ddprun"
expect_in "$T/prefix.err" "^        stuck_in_python \(.*stuck.py:[0-9]+\)"
ok "pip install --prefix: the py-spy of the package's own scripts folder"

# python -m ddprun from that --prefix install: the launcher and py-spy found through the packages'
# records, and the workers' Python is the one that ran `-m ddprun`.
expect_hung_stack module "$T/prefix/bin/py-spy" env PYTHONPATH="$prefix_site" PATH=/usr/bin:/bin "$V/python" -m ddprun
PYTHONPATH=$prefix_site PATH=/usr/bin:/bin "$V/python" -m ddprun "$T/which.py" >"$T/which.out" 2>&1 \
  || { cat "$T/which.out"; fail "which.py failed under python -m ddprun"; }
expect_in "$T/which.out" "^\[rank0\]: $T/venv/bin/python\$"
ok "python -m ddprun: the prefix's launcher and py-spy, and the Python that ran it"
