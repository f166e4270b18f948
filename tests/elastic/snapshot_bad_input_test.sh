#!/usr/bin/env bash
# Bad input to the replicated snapshot folder (issue 57), with real nodes, each in a mount namespace
# of its own (nodes.sh's nsnode: only the replication carries a file between their folders), and
# real workers. Two nodes: a hosts the rendezvous, b's folder is capped (--snapshot_dir_size=8M).
#  - a full folder: a commits a file larger than b's cap: b's copy fails with ENOSPC, in one line
#    naming the file, the folder and its cap; b keeps what it had, whole (the part is removed); a's
#    file is intact; b's own worker writing past the cap gets ENOSPC itself;
#  - a raw peer without the secret connects to b's replication port and sends a copy: refused in
#    one line naming its address; nothing written;
#  - a writer that never closes: a's worker rewrites a committed file in place and writes a new one,
#    holding both open: neither is copied; the round's end removes both on a in one line, and the
#    next round's workers on a read the committed version again, restored from b.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
source "$DDPRUN_TESTS_DIR/elastic/nodes.sh"

can_nsnode || skip "needs root and unshare -m: each node runs in a mount namespace of its own"
command -v nsenter >/dev/null && command -v ss >/dev/null || skip "needs nsenter and ss"

id=snapbad-$$
dir=/dev/shm/ddprun-snapshots.0.$id  # each node's folder, in its own /dev/shm
# in NODE COMMAND...: COMMAND in node NODE's mount namespace (its folder).
on_node() { local pid; pid=$(eval echo "\$PID_$1"); shift; nsenter -t "$pid" -m -- "$@"; }
sum_in() { on_node "$1" sha256sum "$dir/$2" 2>/dev/null | cut -d' ' -f1; }
# wait_flag NAME: the workers wrote $T/NAME.
wait_flag() { wait_for 60 test -e "$T/$1"; }

# Round 0: a's worker commits `small` and `ckpt`, then `big` (past b's cap), then holds files
# open; b's worker writes past its own cap, then fails (exit 1), which ends the round. Round 1:
# each worker says what its folder holds, and exits 0. Every step waits for the test's go.
worker node <<'SH'
#!/bin/sh
node=$1 d=$DDPRUN_SNAPSHOT_DIR
go() { until [ -e "$T/go.$1" ]; do sleep 0.02; done; }
commit() { mv "$d/$1.tmp" "$d/$1"; }  # written to a temporary name, renamed: committed
if [ "$TORCHELASTIC_RESTART_COUNT" = 1 ]; then
  { cat "$d/ckpt"; echo; sha256sum "$d/small" | cut -d' ' -f1; ls -A "$d"; } > "$T/seen.$node"
  exit 0
fi
if [ "$node" = a ]; then
  head -c 1048576 /dev/urandom > "$d/small.tmp" && commit small
  printf 'version 1' > "$d/ckpt.tmp" && commit ckpt
  sha256sum "$d/small" | cut -d' ' -f1 > "$T/small.sum"
  touch "$T/a.step1"
  go big
  # Renamed before its close, so that only big is committed (a close alone commits big.tmp).
  exec 3>"$d/big.tmp"
  head -c 12582912 /dev/urandom >&3 && commit big
  exec 3>&-
  sha256sum "$d/big" | cut -d' ' -f1 > "$T/big.sum"
  touch "$T/a.big"
  go open
  # ckpt rewritten in place and a new file, both written and held open (by sleep, after exec);
  # then a marker committed after them: once b has the marker, it would have had them.
  exec 3>"$d/ckpt" 4>"$d/part.bin"
  printf 'half of version 2' >&3
  printf 'partial' >&4
  echo after > "$d/after.tmp" && commit after
  touch "$T/a.open"
  exec sleep 600
fi
go fill
if head -c 12582912 /dev/zero > "$d/mine" 2> "$T/b.fill.err"; then echo wrote > "$T/b.fill"; else rm -f "$d/mine"; echo failed > "$T/b.fill"; fi
go fail
exit 1
SH

export DDPRUN_RDZV_SECRET=bad-input-secret
job=(--nnodes=2 --nproc_per_node=1 --max_restarts=1 --restart_backoff_max=0 --rdzv_backend=c10d
     --rdzv_endpoint=127.0.0.2:$port --rdzv_id="$id" --rdzv_conf=join_timeout=60)
nsnode 127.0.0.2 a "${job[@]}" --event_log="$T/a.events" "$T/node" a
nsnode 127.0.0.3 b "${job[@]}" --snapshot_dir_size=8M "$T/node" b
wait_flag a.step1
small=$(cat "$T/small.sum")
holds_v1() { [[ $(sum_in b small) == "$small" && $(on_node b cat "$dir/ckpt" 2>/dev/null) == "version 1" ]]; }
poll_until 60 holds_v1 || { show a b >&2; fail "b never held a's small and ckpt"; }
on_node b grep -q " $dir tmpfs .*size=8192k" /proc/self/mounts || fail "b's folder is not its own 8M tmpfs: $(on_node b grep "$dir" /proc/self/mounts)"

# --- a full folder: b's copy of a file past its cap ---------------------------------------------
touch "$T/go.big"
wait_flag a.big
full="^ddprun: snapshots: cannot receive the copy of big \(12.0 MiB\) in $dir: No space left on device \(the folder's --snapshot_dir_size is 8.0 MiB, [0-9.]+ [KM]iB free\); a copy needs room for the whole file beside the version it replaces; this node keeps what it had of big$"
poll_until 60 grep -Eq "$full" "$T/b.err" || { show a b >&2; fail "b did not say its copy of big failed"; }
expect_eq "$(grep -c 'cannot receive the copy of big ' "$T/b.err")" 1 "lines b said for the copy"
expect_eq "$(sum_in b small)" "$small" "b's small after the failed copy"
expect_eq "$(on_node b cat "$dir/ckpt")" "version 1" "b's ckpt after the failed copy"
on_node b test ! -e "$dir/big" || fail "b shows big"
expect_eq "$(on_node b ls -A "$dir/.ddprun-incoming")" "" "b's incoming folder (the part removed)"
expect_eq "$(sum_in a big)" "$(cat "$T/big.sum")" "a's big"
ok "a full folder: b's copy of a 12 MiB file fails in one line (file, folder, cap, what is free); b keeps its files whole, no part left; a's file intact"

touch "$T/go.fill"
wait_for 60 test -s "$T/b.fill"
expect_eq "$(cat "$T/b.fill")" failed "b's worker writing 12 MiB into its 8 MiB folder"
expect_in "$T/b.fill.err" "No space left on device"
expect_eq "$(sum_in b small)" "$small" "b's small after its worker filled the folder"
ok "a worker's own write past the cap fails with ENOSPC in the worker; the folder's committed files stay"

# --- a raw peer without the secret ----------------------------------------------------------------
pid_b=$PID_b
ports=$(ss -ltnpH | awk -v p="pid=$pid_b," 'index($0, p) { n = split($4, a, ":"); print a[n] }')
[[ -n $ports ]] || fail "b's ddprun listens on no port: $(ss -ltnpH)"
# The peer knows the protocol, not the secret: a hello, a forged proof, then a copy of a file.
python3 - "$T/peer.out" $ports <<'PY'
import json, os, socket, sys
out = open(sys.argv[1], "w")
for port in map(int, sys.argv[2:]):
    s = socket.socket()
    s.bind(("127.0.0.9", 0))
    s.settimeout(5)  # another port of b's (the workers' store) does not answer a hello
    s.connect(("127.0.0.3", port))
    s.sendall((json.dumps({"type": "hello", "version": 1, "nonce": os.urandom(32).hex()}) + "\n").encode())
    line = b""
    try:
        while not line.endswith(b"\n"):
            part = s.recv(4096)
            if not part:
                break
            line += part
        challenge = json.loads(line)
    except (ValueError, OSError):
        s.close()
        continue
    if challenge.get("type") != "challenge":
        continue
    s.settimeout(60)
    entry = {"version": {"clock": 1 << 40, "origin": "eeeeeeeeeeeeeeee-peer"}, "size": 1024, "removed": False}
    s.sendall((json.dumps({"type": "proof", "proof": os.urandom(32).hex()}) + "\n").encode())
    try:
        s.sendall((json.dumps({"type": "copy", "path": "evil.pt", "entry": entry}) + "\n").encode())
        s.sendall((json.dumps({"type": "chunk", "n": 1024, "mac": "0" * 64}) + "\n").encode() + b"x" * 1024)
        while s.recv(4096):
            pass
        out.write(f"{port} closed\n")
    except OSError as e:
        out.write(f"{port} {e}\n")
    break
PY
[[ -s $T/peer.out ]] || fail "no port of b answered the handshake: $ports"
refused="^ddprun: snapshots: refused a connection: 127\.0\.0\.9:[0-9]+ did not prove it knows the job's secret \(DDPRUN_RDZV_SECRET\): its proof does not match the job's secret; nothing it sent was taken$"
poll_until 30 grep -Eq "$refused" "$T/b.err" || { show b >&2; fail "b did not refuse the raw peer in one line"; }
expect_eq "$(grep -c 'refused a connection' "$T/b.err")" 1 "lines b said for the raw peer"
on_node b test ! -e "$dir/evil.pt" || fail "the raw peer's file is in b's folder"
expect_eq "$(on_node b ls -A "$dir/.ddprun-incoming")" "" "b's incoming folder after the raw peer"
ok "a raw peer without the secret sending a copy to b's replication port: refused in one line naming it, nothing written"

# --- a writer that never closes -------------------------------------------------------------------
touch "$T/go.open"
wait_flag a.open
poll_until 60 on_node b test -e "$dir/after" || { show a b >&2; fail "b never got the marker committed after the open files"; }
expect_eq "$(on_node b cat "$dir/ckpt")" "version 1" "b's ckpt while a's worker rewrites it in place"
on_node b test ! -e "$dir/part.bin" || fail "a file never closed was copied to b"
expect_eq "$(on_node a cat "$dir/ckpt")" "half of version 2" "a's ckpt being rewritten"
touch "$T/go.fail"
finish_within 120 a
finish_within 120 b
expect_eq "$RC_a" 0 "a's exit ($(show a))"
expect_eq "$RC_b" 0 "b's exit ($(show b))"
removed="^ddprun: snapshots: removed 2 files that may be half-written, so that no later round reads them: ckpt \([^)]+\), part.bin \([^)]+\)$"
expect_in "$T/a.err" "$removed"
expect_in "$T/a.events" '"event":"snapshots_removed".*"path":"ckpt".*"path":"part.bin"'
expect_in "$T/a.err" "^ddprun: snapshots: 1 file fetched from the other nodes"
{ echo "version 1"; echo "$small"; } > "$T/expected"
for n in a b; do
  expect_eq "$(head -2 "$T/seen.$n")" "$(cat "$T/expected")" "what node $n's round-1 worker read"
  grep -qx part.bin "$T/seen.$n" && fail "node $n's round-1 worker saw part.bin"
done
grep -qx big "$T/seen.a" || fail "a lost its big"
grep -qx big "$T/seen.b" && fail "b shows big"
expect_eq "$(grep -c 'cannot receive the copy of big' "$T/b.err")" 2 "lines b said for big (its copy, then its restore's fetch)"
ok "a writer holding files open: not copied; removed at the round's end on a in one line; the next round read the committed ckpt again, restored from b"
wait_for 30 no_leftovers
