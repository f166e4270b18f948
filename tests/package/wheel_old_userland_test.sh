#!/usr/bin/env bash
# The x86_64 wheel on an older distribution's userland (issue 60): a minimal root of Debian SUITE
# made with debootstrap (bullseye: glibc 2.31, Python 3.9, OpenSSL 1.1, libcurl 7.74, and Debian's
# own PyTorch 1.7.1 for Python 3.9, python3-torch; buster, glibc 2.28: archive.debian.org, its
# only host now, is not reachable from these machines, and that test skips saying so), where the wheel that package_wheel built (its
# fixture) is installed by that system's own `python3 -m venv` and pip, and everything runs
# inside the root (chroot in a mount namespace of its own, as root), with the root's own
# libraries only: `ddprun --version`; a 2-worker DDP job (gloo) with a failure and a restart; the
# bootstrap's progress on that Python finding a hung collective, with the hung rank's Python stack
# by the py-spy the wheel brought; `--status_port` answered (`ddprun status` and /status); the TCP
# rendezvous of two nodes with a secret (the launcher maps the root's libcrypto.so.1.1); the etcd
# rendezvous of two nodes through the root's libcurl, against an etcd of this machine on loopback.
#   wheel_old_userland_test.sh SUITE     (bullseye or buster)
# The root is a download (924 MB installed, python3-torch's dependencies most of it; 7.5 min on
# the 2-core CI machine, then about a minute for the checks): it is made once and kept in
# DDPRUN_TEST_ROOTS (default: ${XDG_CACHE_HOME:-~/.cache}/ddprun/roots/SUITE-amd64), made again
# only when the list of packages below changes. Mirror: DDPRUN_DEBIAN_MIRROR.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
suite=${1:?usage: wheel_old_userland_test.sh bullseye|buster}
case $suite in
  bullseye) mirror=${DDPRUN_DEBIAN_MIRROR:-http://deb.debian.org/debian} python_minor=3.9 ;;
  # Debian moved buster to its archive host in 2024.
  buster) mirror=${DDPRUN_DEBIAN_ARCHIVE_MIRROR:-http://archive.debian.org/debian} ;;
  *) fail "wheel_old_userland_test.sh: SUITE $suite: expected bullseye or buster" ;;
esac
[[ $(uname -m) == x86_64 ]] || skip "the x86_64 wheel's test runs on x86_64"
[[ $(id -u) -eq 0 ]] || skip "a chroot takes root"
command -v debootstrap >/dev/null || skip "needs debootstrap (apt-get install debootstrap; scripts/install-deps.sh)"
for c in unshare chroot flock curl etcd; do
  command -v $c >/dev/null || skip "needs $c (scripts/install-deps.sh)"
done
handoff=$DDPRUN_BUILD_DIR/tests/package/wheel
wheels=("$handoff"/ddprun-*-manylinux_2_28_x86_64.whl)
[[ -f ${wheels[0]} ]] || skip "no x86_64 wheel in $handoff: package_wheel (this test's fixture) made none"
source "$DDPRUN_SOURCE_DIR/scripts/torch2-env.sh"
py_spy_wheels=("$TORCH2_WHEELS"/py_spy-*manylinux*x86_64*.whl)
[[ -f ${py_spy_wheels[0]} ]] || skip "no py-spy wheel in $TORCH2_WHEELS (scripts/install-deps.sh --torch2)"

# The root, made once. What the wheel's users have: Python with venv and pip, OpenSSL's and
# curl's libraries (debootstrap); and PyTorch for the Python jobs, Debian's own, built for this
# Python (apt-get in the root: debootstrap alone cannot resolve its desktop dependencies' virtual
# packages, dbus-session-bus).
base=python3,python3-venv,libssl1.1,libcurl4
extra=python3-torch
roots=${DDPRUN_TEST_ROOTS:-${XDG_CACHE_HOME:-$HOME/.cache}/ddprun/roots}
R=$roots/$suite-amd64
mkdir -p "$roots"
exec 9>"$roots/$suite.lock"
flock 9  # another run making the same root
if [[ "$(cat "$R/.ddprun-root" 2>/dev/null)" != "$suite $base $extra" ]]; then
  curl -sf -m 30 -o /dev/null "$mirror/dists/$suite/Release" \
    || skip "debootstrap cannot reach $mirror (no $mirror/dists/$suite/Release from this machine)"
  # Written from what buster is, never run: its archive was out of reach when this test was made.
  [[ $suite != buster ]] || fail "$mirror is reachable now, but this test does not handle buster yet: its pip 18.1 predates manylinux_2_28 tags (upgrade pip in the venv first) and buster has no python3-torch"
  rm -rf "$R" "$R.new"
  start=$SECONDS
  # In mount namespaces: debootstrap and apt-get's packages mount /proc and /sys in the root.
  unshare -m --propagation private debootstrap --variant=minbase --include="$base" \
    "$suite" "$R.new" "$mirror" >"$T/debootstrap.log" 2>&1 \
    || { tail -30 "$T/debootstrap.log"; rm -rf "$R.new"; fail "debootstrap $suite from $mirror failed (log above)"; }
  unshare -m --propagation private bash -c 'mount -t proc proc "$1/proc" && chroot "$1" /usr/bin/env -i \
      PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive sh -c "apt-get install -y --no-install-recommends $2 && apt-get clean"' \
    _ "$R.new" "$extra" >"$T/apt.log" 2>&1 \
    || { tail -30 "$T/apt.log"; rm -rf "$R.new"; fail "apt-get install $extra in the $suite root failed (log above)"; }
  echo "$suite $base $extra" >"$R.new/.ddprun-root"
  mv "$R.new" "$R"
  ok "made the $suite root in $R ($((SECONDS - start)) s, $(du -sm --exclude=./proc "$R" | cut -f1) MB)"
fi
flock -u 9

# in_root COMMAND...: COMMAND in the root, in a mount namespace of its own: the host's /dev, a
# /proc, a private /tmp, and the test's folder $T at its own path (every process started carries
# it in its command line, as lib.sh's cleanup expects). Shares the host's network: loopback.
in_root() {
  unshare -m --propagation private bash -c '
    R=$1; shift
    mount --rbind /dev "$R/dev" && mount -t proc proc "$R/proc" && mount -t tmpfs -o mode=1777 none "$R/tmp" \
      && mkdir -p "$R$T" && mount --bind "$T" "$R$T" || exit 70
    exec chroot "$R" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root LANG=C.UTF-8 T="$T" "$@"' _ "$R" "$@"
}

# 1. The root is the system it stands for, with nothing of this machine's.
libc=$(in_root getconf GNU_LIBC_VERSION)
python=$(in_root python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
expect_eq "$python" "$python_minor" "the $suite root's python3"
in_root sh -c 'ls /usr/lib/x86_64-linux-gnu/libcrypto.so.1.1 && ! ls /usr/lib/x86_64-linux-gnu/libcrypto.so.3' >/dev/null 2>&1 \
  || fail "the $suite root should have libcrypto.so.1.1 and no libcrypto.so.3"
curl_version=$(in_root dpkg-query -W -f '${Version}' libcurl4)
torch_version=$(in_root python3 -c 'import torch.distributed as d, torch; assert d.is_available(); print(torch.__version__)') \
  || fail "the $suite root's python3 has no torch.distributed"
ok "the $suite root: $libc, Python $python, libcrypto.so.1.1 only, libcurl4 $curl_version, torch $torch_version"

# 2. The system's own venv and pip install the wheel (and py-spy, its dependency), without an index.
mkdir "$T/wheels"
cp "${wheels[0]}" "${py_spy_wheels[@]}" "$T/wheels/"
wheel=$T/wheels/$(basename "${wheels[0]}")
in_root python3 -m venv --system-site-packages "$T/venv"
V=$T/venv/bin
pip_version=$(in_root "$V/python" -m pip --version | cut -d' ' -f2)
in_root "$V/python" -m pip install --disable-pip-version-check -q --no-index --find-links "$T/wheels" "$wheel" >"$T/pip.log" 2>&1 \
  || { cat "$T/pip.log"; fail "pip $pip_version of $suite did not install $(basename "$wheel")"; }
[[ -x $T/venv/bin/py-spy ]] || fail "pip install did not bring py-spy"
version=$(sed -nE 's/^project\(ddprun VERSION ([0-9.]+).*/\1/p' "$DDPRUN_SOURCE_DIR/CMakeLists.txt")
expect_eq "$(in_root "$V/ddprun" --version)" "ddprun $version" "ddprun --version in the $suite root"
expect_eq "$(in_root "$V/python" -m ddprun --version)" "ddprun $version" "python -m ddprun --version in the $suite root"
ok "pip $pip_version of $suite installed $(basename "$wheel"); ddprun --version and python -m ddprun --version"

# PyTorch before 1.9 (before torchrun) ignores TORCHELASTIC_USE_AGENT_STORE: its rank 0 binds
# MASTER_PORT itself, where ddprun's store is ("RuntimeError: Address already in use"). Such a
# torch needs TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: ddprun then holds the port until rank 0 binds it.
OLD_TORCH=()
in_root python3 -c 'import sys, torch; sys.exit(tuple(map(int, torch.__version__.split(".")[:2])) >= (1, 9))' \
  && OLD_TORCH=(TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1)

# 3. A 2-worker DDP job on gloo, rank 1 failing in the first attempt, finished by the restart,
# under the venv's Python (beside ddprun), PATH without the venv.
cat >"$T/train.py" <<'PY'
import os, sys
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

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
print(f"identical after restart {os.environ['TORCHELASTIC_RESTART_COUNT']} under {sys.executable}"
      f" {sys.version_info[0]}.{sys.version_info[1]}", flush=True)
dist.barrier()
# Past this point gloo's teardown at interpreter exit aborts ("terminate called without an
# active exception"), in torch 1.7 as in 2.x (see wheel_test.sh): not what this test is about.
os._exit(0)
PY
in_root env "${OLD_TORCH[@]}" "$V/ddprun" --nproc_per_node=2 --max_restarts=1 "$T/train.py" >"$T/run.out" 2>"$T/run.err" \
  || { cat "$T/run.out" "$T/run.err"; fail "the DDP job failed in the $suite root"; }
expect_in "$T/run.err" 'crashing on purpose in attempt 0'
expect_in "$T/run.out" "^\[rank1\]: identical after restart 1 under $V/python3? $python_minor\$"
ok "a 2-worker DDP job (torch $torch_version, gloo) fails, restarts and trains under Python $python"

# 4. The bootstrap's progress on that Python: rank 1 stops before an all_reduce that rank 0 waits
# in; ddprun finds the hang from the collectives the bootstrap counted, names rank 1, and shows its
# Python stack, by the py-spy that came with the wheel.
cp "$DDPRUN_TESTS_DIR/worker/progress_probe.py" "$T/progress_probe.py"
mkdir "$T/hang"
set +e
in_root env "${OLD_TORCH[@]}" "$V/ddprun" --nproc_per_node=2 --hang_timeout=5 --log_dir="$T/hang.logs" "$T/progress_probe.py" collective "$T/hang" \
  >"$T/hang.out" 2>"$T/hang.err"
rc=$?
set -e
expect_eq "$rc" 124 "exit code of the hung job ($(cat "$T/hang.err"))"
expect_in "$T/hang.err" "^ddprun: rank 1 hung: rank 0 waits in all_reduce #[0-9]+; rank 1 has not entered it"
expect_in "$T/hang.err" "^        stuck_before_all_reduce \(.*progress_probe.py:[0-9]+\)"
expect_not_in "$T/hang.err" "Error in sitecustomize|Traceback"
expect_in "$(run_dir "$T/hang.logs")/attempt_0/rank_1/stacks.txt" "^== '$V/py-spy' dump --pid"
ok "the bootstrap counts collectives on Python $python: the hung rank 1 named, its Python stack by the wheel's py-spy"

# 5. --status_port: `ddprun status` and /status (the root's Python asks) while two Python workers run.
cat >"$T/wait.py" <<'PY'
import os, time
while not os.path.exists(os.path.join(os.environ["T"], "stop")):
    time.sleep(0.05)
PY
in_root "$V/ddprun" --nproc_per_node=2 --status_port=0 "$T/wait.py" >"$T/status.out" 2>"$T/status.err" &
status_pid=$!
url=$(status_url "$T/status.err")
status_ok() {
  in_root "$V/python" - "$url" <<'PY'
import json, sys, urllib.request
s = json.load(urllib.request.urlopen(sys.argv[1] + "/status"))
sys.exit(not (len(s["ranks"]) == 2 and all(r["state"] == "running" for r in s["ranks"])))
PY
}
poll_until 60 status_ok || { touch "$T/stop"; fail "$url/status never showed two running ranks"; }
in_root "$V/ddprun" status "${url##*:}" >"$T/status.txt" 2>&1 || { touch "$T/stop"; cat "$T/status.txt"; fail "ddprun status ${url##*:}"; }
touch "$T/stop"
set +e; wait "$status_pid"; rc=$?; set -e
expect_eq "$rc" 0 "exit code of the --status_port job ($(cat "$T/status.err"))"
ok "--status_port answered: ddprun status and $url/status from the $suite root"

# 6 and 7. Two nodes meet in a rendezvous, inside the root: the TCP one with a secret, then etcd's
# through the root's libcurl. Each worker reports the libraries its launcher (its parent) has
# mapped, and the job's world size.
cat >"$T/node.py" <<'PY'
import os
maps = open("/proc/%d/maps" % os.getppid()).read()
libs = sorted({l.split()[-1].rsplit("/", 1)[-1] for l in maps.splitlines() if "libcrypto" in l or "libcurl" in l})
print("world", os.environ["WORLD_SIZE"], "group", os.environ["GROUP_RANK"], " ".join(libs), flush=True)
PY
# two_nodes NAME ARGS...: nodes NAME.a and NAME.b (127.0.0.1 and 127.0.0.2) in the root, each with
# ARGS and the variables in NODE_ENV, one worker each; both must finish in 60 s.
two_nodes() {
  local name=$1 a b rc_a=0 rc_b=0; shift
  in_root env "${NODE_ENV[@]}" "$V/ddprun" --local_addr=127.0.0.1 --nnodes=2 \
    --nproc_per_node=1 "$@" "$T/node.py" >"$T/$name.a.out" 2>"$T/$name.a.err" &
  a=$!
  in_root env "${NODE_ENV[@]}" "$V/ddprun" --local_addr=127.0.0.2 --nnodes=2 \
    --nproc_per_node=1 "$@" "$T/node.py" >"$T/$name.b.out" 2>"$T/$name.b.err" &
  b=$!
  wait_for 60 bash -c '! kill -0 $1 2>/dev/null && ! kill -0 $2 2>/dev/null' _ "$a" "$b"
  wait "$a" || rc_a=$?
  wait "$b" || rc_b=$?
  [[ $rc_a == 0 && $rc_b == 0 ]] || { cat "$T/$name".?.err; fail "$name: the nodes exited $rc_a and $rc_b"; }
  expect_in "$T/$name.a.out" "^\[rank[01]\]: world 2 group [01] "
  expect_in "$T/$name.b.out" "^\[rank[01]\]: world 2 group [01] "
}
port=$(free_tcp_port)
NODE_ENV=(DDPRUN_RDZV_SECRET="$(head -c 24 /dev/urandom | base64)")
two_nodes c10d --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:$port --rdzv_id=olduser
expect_in "$T/c10d.a.out" " libcrypto\.so\.1\.1( |$)"
expect_not_in "$T/c10d.a.err" "without a secret"
ok "two nodes meet in the TCP rendezvous with a secret, the launcher on the root's libcrypto.so.1.1"

source "$DDPRUN_TESTS_DIR/elastic/etcd_lib.sh"
etcd_members http solo
NODE_ENV=()
two_nodes etcd --rdzv_backend=etcd --rdzv_endpoint=127.0.0.1:$CLIENT_solo --rdzv_id=olduser
expect_in "$T/etcd.a.out" " libcurl\.so\.4[.0-9]*( |$)"
kill "$ETCD_solo"; wait "$ETCD_solo" 2>/dev/null || true
ok "two nodes meet in this machine's etcd through the $suite root's libcurl ($curl_version)"
