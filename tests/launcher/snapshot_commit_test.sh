#!/usr/bin/env bash
# What a later round sees in DDPRUN_SNAPSHOT_DIR (issue 57, item 2): every file committed before a
# failure, nothing half-written. A writer of big files (written in place, in small writes) SIGKILLed
# mid-write 20 times, by another process or by itself: every restart finds only whole files (each
# carries its length and checksum), and the files finished before the kill; a tmp + rename writer
# killed mid-write: the last renamed version is there; a survivor's file closed while another
# worker was dying is removed (conservatively); a file written just before a worker's own exit is
# kept.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"

uid=$(id -u)
if [[ $(stat -f -c %T /dev/shm 2>/dev/null) == tmpfs && -w /dev/shm ]]; then parent=/dev/shm; else parent=${TMPDIR:-/tmp}; fi
id_base="snapcommit-$(basename "$T")"
trap 'rc=$?; rm -rf "$parent"/ddprun-snapshots."$uid"."$id_base"*; cleanup $rc' EXIT
command -v python3 >/dev/null || skip "no python3"

# The writer: at each start it checks every file of the folder (seen.N: "name whole|BROKEN"), then
# writes files until it is killed. argv: inplace|rename LAST (the restart that ends the job).
cat > "$T/writer.py" <<'PY'
import os, random, signal, struct, subprocess, sys, zlib

mode, last = sys.argv[1], int(sys.argv[2])
d, T = os.environ["DDPRUN_SNAPSHOT_DIR"], os.environ["T"]
n = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
MAGIC = b"WHOLE!"
SIZE, CHUNK = 24 << 20, 8 << 10  # tens of MB, in small writes

def whole(path):
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 14 or data[-6:] != MAGIC:
        return False
    length, crc = struct.unpack("<II", data[-14:-6])
    return length == len(data) - 14 and zlib.crc32(data[:length]) == crc

with open(f"{T}/{mode}.seen.{n}", "w") as seen:
    for name in sorted(os.listdir(d)):
        seen.write(f"{name} {'whole' if whole(os.path.join(d, name)) else 'BROKEN'}\n")
if n == last:
    sys.exit(0)

rng = random.Random()
if n % 2 == 0:  # killed by another process, at any point of a write
    subprocess.Popen(["sh", "-c", f"sleep {rng.uniform(0.05, 0.6):.3f}; kill -KILL {os.getpid()}"], close_fds=True)
    kill_at = None
else:  # killed by itself, between two writes of its file number kill_at
    kill_at = (rng.randrange(4), rng.randrange(SIZE))

block = bytes(rng.getrandbits(8) for _ in range(CHUNK))
done = open(f"{T}/{mode}.done.{n}", "a", buffering=1)
k = 0
while True:
    target = f"{d}/ckpt_{n}_{k}" if mode == "inplace" else f"{d}/ckpt.tmp"
    crc, length = 0, 0
    with open(target, "wb", buffering=0) as f:
        stamp = f"{n} {k} ".encode()
        while length < SIZE:
            chunk = stamp + block[len(stamp):]
            f.write(chunk)
            crc = zlib.crc32(chunk, crc)
            length += len(chunk)
            if kill_at and kill_at[0] == k and length >= kill_at[1]:
                os.kill(os.getpid(), signal.SIGKILL)
        f.write(struct.pack("<II", length, crc) + MAGIC)
    if mode == "rename":
        os.rename(target, f"{d}/ckpt")
        done.write(f"{n} {k}\n")
    else:
        done.write(f"ckpt_{n}_{k}\n")
        if k >= 2:  # two finished files at most, and the one being written (said before it goes)
            done.write(f"-ckpt_{n}_{k - 2}\n")
            os.unlink(f"{d}/ckpt_{n}_{k - 2}")
    k += 1
PY
worker writer <<'SH'
#!/bin/sh
exec python3 "$T/writer.py" "$@"
SH

# The files of the folder the writer saw at start N are all whole, and none is missing of those
# its start N-1 finished (and did not remove), unless ddprun removed it because it read that file's
# close only as the writer died (README: a close read after the worker's death is doubted; said in
# the removal line). Prints how many were removed so.
check_inplace() {
  python3 - "$T" "$1" "$2" <<'PY'
import re, sys
T, last, err = sys.argv[1], int(sys.argv[2]), open(sys.argv[3]).read()
removed = set()
for line in err.splitlines():
    if line.startswith("ddprun: snapshots: removed"):
        removed.update(re.findall(r"(ckpt_\d+_\d+) \(", line))
raced = 0
for n in range(last + 1):
    seen = dict(l.split() for l in open(f"{T}/inplace.seen.{n}") if l.strip())
    broken = [f for f, state in seen.items() if state != "whole"]
    if broken:
        sys.exit(f"start {n} saw half-written files: {broken}")
    if n == 0:
        continue
    try:
        lines = open(f"{T}/inplace.done.{n - 1}").read().split()
    except FileNotFoundError:
        lines = []
    finished = {l for l in lines if not l.startswith("-")} - {l[1:] for l in lines if l.startswith("-")}
    for f in sorted(finished):
        if f in seen:
            continue
        if f not in removed:
            sys.exit(f"start {n} did not see {f}, finished before the kill and not said removed; saw {sorted(seen)}")
        raced += 1
print(raced)
PY
}

# --- in place, 20 kills --------------------------------------------------------------------------
id="$id_base-inplace"
run_ddprun inplace --max_restarts=20 --restart_backoff_max=0 --rdzv_id="$id" --event_log="$T/inplace.jsonl" \
  "$T/writer" inplace 20
expect_eq "$RC" 0 "20 SIGKILLs mid-write, then a success"
raced=$(check_inplace 20 "$T/inplace.err" 2>&1) || fail "$raced"
removals=$(grep -c "^ddprun: snapshots: removed .* (closed as rank 0 ended)" "$T/inplace.err" || true)
((removals >= 1)) || fail "no round removed a half-written file in 20 kills mid-write: $(cat "$T/inplace.err")"
expect_eq "$(grep -c '"event":"snapshots_removed"' "$T/inplace.jsonl")" \
  "$(grep -c '^ddprun: snapshots: removed' "$T/inplace.err")" "snapshots_removed records, one per removal line"
ok "in place, 20 SIGKILLs mid-write: every start saw only whole files and those finished before the kill" \
   "($removals rounds removed a half-written file; $raced finished files closed too near the kill were removed)"

# --- tmp + rename, 6 kills ----------------------------------------------------------------------
id="$id_base-rename"
run_ddprun rename --max_restarts=6 --restart_backoff_max=0 --rdzv_id="$id" "$T/writer" rename 6
expect_eq "$RC" 0 "6 SIGKILLs of the rename writer, then a success"
python3 - "$T" 6 <<'PY' || fail "the rename writer's starts"
import sys
T, last = sys.argv[1], int(sys.argv[2])
renamed = None  # the last version the writer renamed into place before the kill: "n k"
for n in range(last + 1):
    seen = dict(l.split() for l in open(f"{T}/rename.seen.{n}") if l.strip())
    if any(state != "whole" for state in seen.values()):
        sys.exit(f"start {n} saw half-written files: {seen}")
    if renamed is not None and "ckpt" not in seen:
        sys.exit(f"start {n}: no ckpt, though version {renamed} was renamed into place")
    try:
        versions = open(f"{T}/rename.done.{n}").read().split("\n")
        renamed = [v for v in versions if v][-1] if any(versions) else renamed
    except FileNotFoundError:
        pass
PY
ok "tmp + rename, 6 SIGKILLs mid-write: every start saw the last renamed checkpoint whole, no half-written tmp"

# --- a survivor's close while another worker dies: removed --------------------------------------
# Rank 0's main thread exits (the process is a zombie, its thread runs on) before rank 1 closes its
# file; then it SIGKILLs itself. ddprun reads rank 1's close with rank 0 ending, then killed.
cat > "$T/zombie.py" <<'PY'
import ctypes, os, threading, time
T = os.environ["T"]
def finish():
    open(f"{T}/zombie", "w").close()
    while not os.path.exists(f"{T}/closed"):
        time.sleep(0.01)
    os.kill(os.getpid(), 9)
threading.Thread(target=finish).start()
ctypes.CDLL(None).pthread_exit(None)
PY
worker survivor <<'SH'
#!/bin/sh
d=$DDPRUN_SNAPSHOT_DIR
if [ "$TORCHELASTIC_RESTART_COUNT" = 1 ]; then ls "$d" > "$T/survivor.seen.$RANK"; exit 0; fi
[ "$RANK" = 0 ] && exec python3 "$T/zombie.py"
while [ ! -e "$T/zombie" ]; do sleep 0.01; done
echo "rank 1's" > "$d/survivor.pt"
touch "$T/closed"
exec sleep 60
SH
id="$id_base-survivor"
run_ddprun survivor --nproc_per_node=2 --max_restarts=1 --restart_backoff_max=0 --rdzv_id="$id" \
  --event_log="$T/survivor.jsonl" "$T/survivor"
expect_eq "$RC" 0 "the survivor's job"
expect_eq "$(cat "$T/survivor.seen.0" "$T/survivor.seen.1")" "" "what the restart saw"
expect_in "$T/survivor.err" "^ddprun: snapshots: removed 1 file that may be half-written, so that no later round reads it: survivor.pt \(closed as rank 0 ended\)$"
expect_in "$T/survivor.jsonl" '"event":"snapshots_removed","files":\[\{"path":"survivor.pt","why":"closed as rank 0 ended"\}\]'
ok "a file a live worker closed while another was dying (a zombie) is removed at the round's end, and said"

# --- written just before a worker's own exit: kept ----------------------------------------------
worker exits <<'SH'
#!/bin/sh
d=$DDPRUN_SNAPSHOT_DIR
if [ "$TORCHELASTIC_RESTART_COUNT" = 1 ]; then cat "$d/last.pt" > "$T/exits.seen"; exit 0; fi
echo "written then exit 3" > "$d/last.pt"
exit 3
SH
id="$id_base-exits"
run_ddprun exits --max_restarts=1 --restart_backoff_max=0 --rdzv_id="$id" "$T/exits"
expect_eq "$RC" 0 "the exiting writer's job"
expect_eq "$(cat "$T/exits.seen")" "written then exit 3" "what the restart read"
expect_not_in "$T/exits.err" "snapshots: removed"
ok "a file written in place just before the worker's own exit (exit 3) is kept"
