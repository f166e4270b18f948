#!/usr/bin/env bash
# A real out-of-memory kill: ddprun runs inside a cgroup with memory.max, its worker allocates
# until the kernel's OOM killer takes it, and ddprun names the kind host_oom as a certain fact
# (memory.events' oom_kill), not a guess from SIGKILL. Needs cgroup v2 with the memory controller
# delegable where this test runs (root, or systemd delegation); skipped with the reason otherwise.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"

PY=/usr/bin/python3
mount=$(awk '$3 == "cgroup2" {print $2; exit}' /proc/mounts)
[[ -n $mount ]] || skip "no cgroup v2 hierarchy mounted"
own=$(sed -n 's/^0:://p' /proc/self/cgroup)
base="$mount${own%/}"
grep -qw memory "$mount/cgroup.controllers" 2>/dev/null ||
  skip "the memory controller is not on cgroup v2 here ($mount has: $(cat "$mount/cgroup.controllers" 2>/dev/null)); cgroup v1 holds it"
if ! grep -qw memory "$base/cgroup.subtree_control" 2>/dev/null; then
  echo +memory >"$base/cgroup.subtree_control" 2>/dev/null ||
    skip "cannot delegate the memory controller below $base (it holds processes, or no permission)"
fi
limit="$base/ddprun-oom-test.$$"
mkdir "$limit" 2>/dev/null || skip "cannot create a cgroup in $base"
trap 'rc=$?; rmdir "$limit/launcher" "$limit" 2>/dev/null || true; cleanup $rc' EXIT
echo +memory >"$limit/cgroup.subtree_control"
mkdir "$limit/launcher"
echo $((200 << 20)) >"$limit/memory.max"
[[ -e $limit/memory.swap.max ]] && echo 0 >"$limit/memory.swap.max"

cat >"$T/hog.py" <<'PY'
chunks = []
while True:
    chunks.append(bytearray(16 << 20))  # touched: bytearray zero-fills
PY
RC=0
( echo "$BASHPID" >"$limit/launcher/cgroup.procs"
  exec "$DDPRUN" --result_file="$T/oom.json" --event_log="$T/oom.jsonl" "$PY" "$T/hog.py" ) >"$T/oom.out" 2>"$T/oom.err" || RC=$?
expect_eq "$RC" 137 "killed by SIGKILL"
expect_in "$T/oom.err" "host_oom \(killed by the out-of-memory killer \(SIGKILL; memory.events oom_kill \+[1-9]"
expect_eq "$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["kind"])' "$T/oom.json")" host_oom "result file"
ok "a real OOM kill in a cgroup with memory.max is host_oom, for certain"
