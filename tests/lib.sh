# Helpers for the integration tests (bash). Source after `set -euo pipefail`.
# Every test runs in its own temporary folder, and every process it starts carries that
# folder's path in its command line, so "nothing left behind" is checked with pgrep -f.

: "${DDPRUN:?run this test through ctest (DDPRUN is not set)}"
T=$(mktemp -d "${TMPDIR:-/tmp}/ddprun-test.XXXXXX")
export T
# cleanup [RC]: ends the test with RC (default: the status it exits with), killing what it started.
# An EXIT trap that runs something first passes the status on: trap 'rc=$?; undo || true; cleanup $rc' EXIT
cleanup() {
  local rc=${1:-$?}
  pkill -KILL -f "$T" 2>/dev/null || true
  rm -rf "$T"
  exit $rc
}
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "SKIP: $*"; exit "${DDPRUN_SKIP_CODE:-77}"; }
ok() { echo "ok: $*"; }

# expect_eq ACTUAL EXPECTED WHAT
expect_eq() { [[ "$1" == "$2" ]] || fail "$3: expected '$2', got '$1'"; }
# expect_in FILE PATTERN (grep -E)
expect_in() { grep -Eq -- "$2" "$1" || { echo "--- $1:" >&2; cat "$1" >&2; fail "expected /$2/ in $1"; }; }
expect_not_in() { ! grep -Eq -- "$2" "$1" || { echo "--- $1:" >&2; cat "$1" >&2; fail "did not expect /$2/ in $1"; }; }

# hang_delay EVENTS RANK STAMP: seconds from the time in file STAMP (a worker's last beat, line
# or step, as seconds since the epoch) to ddprun's "hang" event for RANK in the event log EVENTS.
hang_delay() {
  python3 - "$1" "$2" "$3" <<'PY'
import json, sys
events = [json.loads(l) for l in open(sys.argv[1])]
hang = next(e for e in events if e["event"] == "hang" and e["rank"] == int(sys.argv[2]))
print("%.2f" % (hang["time"] - float(open(sys.argv[3]).read())))
PY
}
# within LOW HIGH VALUE: LOW <= VALUE <= HIGH, in decimals.
within() { python3 -c "import sys; sys.exit(not ($1 <= $3 <= $2))"; }
# expect_stacks WHAT FILE PATTERN [FILE PATTERN]...: where py-spy is installed, each FILE must
# match its PATTERN (expect_in: a hung worker's Python stack) and STACKS is ", WHAT"; without
# py-spy nothing is checked and STACKS says so. For the case's ok line: ok "...$STACKS".
expect_stacks() {
  STACKS=" (no py-spy: stacks not checked)"
  command -v py-spy >/dev/null || return 0
  local what=$1; shift
  while (($# >= 2)); do expect_in "$1" "$2"; shift 2; done
  STACKS=", $what"
}

# free_tcp_port [AFTER]: a TCP port nothing has bound, below the kernel's range of automatic ports
# (ip_local_port_range), so that no outgoing connection is given it later; from a random start,
# or the first free one after AFTER. (Tests run beside each other: a fixed or unchecked port
# collides, a port in the automatic range may be taken by any connection.)
free_tcp_port() {
  python3 - "${1:-}" <<'PY'
import random, socket, sys
floor, ceiling = 10000, int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
port = int(sys.argv[1]) + 1 if sys.argv[1] else random.randrange(floor, ceiling - 1000)
for _ in range(ceiling - floor):
    port = port if floor <= port < ceiling else floor
    with socket.socket() as s:
        try:
            s.bind(("", port))
        except OSError:
            port += 1
            continue
    print(port)
    sys.exit(0)
sys.exit("no free TCP port below %d" % ceiling)
PY
}

# json_field FILE EXPR: a value of the JSON file FILE as Python prints it, e.g. json_field r.json '["kind"]'.
json_field() { python3 -c "import json, sys; print(json.load(open(sys.argv[1]))$2)" "$1"; }
# events FILE EVENT KEY: KEY of every EVENT in the event log FILE, one a line (None where absent).
events() {
  python3 -c "
import json, sys
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e['event'] == sys.argv[2]:
        print(e.get(sys.argv[3]))" "$1" "$2" "$3"
}

# poll_until SECONDS COMMAND...: polls until COMMAND succeeds (true), or SECONDS have passed (false).
poll_until() {
  local limit=$1; shift
  local deadline=$((SECONDS + limit))
  until "$@"; do
    (( SECONDS < deadline )) || return 1
    sleep 0.05
  done
}
# wait_for SECONDS COMMAND...: polls until COMMAND succeeds; fails after SECONDS.
wait_for() { poll_until "$@" || fail "timed out after ${1}s waiting for: ${*:2}"; }

# torch_workers: for a test of Python workers in TORCH_PYTHON's PyTorch: skips without its torch,
# makes it the workers' interpreter (PYTHON_EXEC) with no PYTHONPATH, and puts the py-spy of the
# 2.x virtual environment (scripts/install-deps.sh --torch2) last in PATH where there is one.
torch_workers() {
  "$TORCH_PYTHON" -c 'import torch.distributed' 2>/dev/null || skip "$TORCH_PYTHON has no torch.distributed"
  export PYTHON_EXEC=$TORCH_PYTHON
  unset PYTHONPATH
  source "$DDPRUN_SOURCE_DIR/scripts/torch2-env.sh"
  if [[ -x "$TORCH2_VENV/bin/py-spy" ]]; then export PATH="$PATH:$TORCH2_VENV/bin"; fi
}

# status_url FILE: the URL (http://HOST:PORT) of the status server ddprun announced in FILE (its
# stderr), once it has.
status_url() {
  wait_for 60 grep -qs "status at http://" "$1"
  sed -n 's|.*status at \(http://[^ ]*\)/status.*|\1|p' "$1"
}

# Processes of this test still alive (zombies excluded).
# ps runs alone first, so the filter's own command line (which names $T) is never listed.
leftovers() {
  local snapshot
  snapshot=$(ps -eo pid=,stat=,args=)
  awk -v t="$T" 'index($0, t) && $2 !~ /^Z/' <<<"$snapshot"
}
no_leftovers() { [[ -z "$(leftovers)" ]]; }

# run_ddprun NAME ARGS...: runs ddprun, stdout in $T/NAME.out, stderr in $T/NAME.err, exit code in RC.
run_ddprun() {
  local name=$1; shift
  set +e
  "$DDPRUN" "$@" >"$T/$name.out" 2>"$T/$name.err"
  RC=$?
  set -e
}

# round_events FILE: the rounds' starts and ends and the exit in an --event_log, in order, each
# followed by a space.
round_events() { grep -o '"event":"\(round_started\|round_ended\|exit\)"' "$1" | cut -d'"' -f4 | tr '\n' ' '; }

# worker NAME <<'EOF' ... EOF: writes an executable sh script $T/NAME.
worker() { cat >"$T/$1"; chmod +x "$T/$1"; }

# run_dir LOG_DIR: the folder of the one run that ddprun made under --log_dir=LOG_DIR
# (<run id>_<random>/, as torchrun 2.x makes it); fails unless there is exactly one.
run_dir() {
  local dirs=("$1"/*/)
  [[ ${#dirs[@]} == 1 && -d ${dirs[0]} ]] || fail "expected one run's folder in $1, found: $(ls -A "$1" 2>&1)"
  echo "${dirs[0]%/}"
}
