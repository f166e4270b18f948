#!/usr/bin/env bash
# Worker output under a slow or stalled console. A slow reader (slow_reader.py: 64 KiB reads at
# about 100 MB/s, slower than the workers) gets every byte: ddprun holds the workers back instead
# of dropping. A console never read: SIGTERM and a failure are handled at once, a worker blocked
# on it is not judged hung, and output is dropped (and counted) only after --output_stall_timeout.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"

READER=(/usr/bin/python3 "$DDPRUN_TESTS_DIR/launcher/slow_reader.py")
now_ms() { date +%s%3N; }

# 1. Two ranks flood 1 GB (500,000 numbered lines of 1000 bytes each) into a slow reader.
worker flood <<'PY'
#!/usr/bin/python3
import os, sys
sys.path.insert(0, os.environ["DDPRUN_TESTS_DIR"] + "/launcher")
from slow_reader import flood_line
rank, lines, width = int(os.environ["RANK"]), int(os.environ["FLOOD_LINES"]), int(os.environ["FLOOD_WIDTH"])
batch = []
for i in range(lines):
    batch.append(flood_line(rank, i, width) + b"\n")
    if len(batch) == 64 or i == lines - 1:
        sys.stdout.buffer.write(b"".join(batch))
        batch.clear()
sys.stdout.buffer.flush()
PY
start=$(now_ms)
set +e
FLOOD_LINES=500000 FLOOD_WIDTH=1000 "$DDPRUN" --nproc_per_node=2 "$T/flood" 2>"$T/flood.err" |
  "${READER[@]}" --flood 2 500000 1000 >"$T/flood.read" 2>"$T/flood.reader.err"
status=("${PIPESTATUS[@]}")
set -e
[[ ${status[1]} == 0 ]] || fail "slow reader of the 1 GB flood: $(cat "$T/flood.reader.err") (ddprun said: $(tail -3 "$T/flood.err"))"
expect_eq "${status[0]}" 0 "exit code of the flood"
expect_not_in "$T/flood.err" "dropp"
ok "1 GB from 2 ranks through a slow reader: every line whole, none missing ($(tr '\n' ' ' <"$T/flood.read")in $(( $(now_ms) - start )) ms)"

# 2. One line of 200 MB, into a slow reader; ddprun's peak RSS meanwhile.
worker longline <<'SH'
#!/bin/sh
head -c 200000000 /dev/zero | tr '\0' x
echo
while [ ! -e "$T/release" ]; do sleep 0.05; done  # the reader has checked ddprun's peak RSS
SH
mkfifo "$T/line.fifo"
"$DDPRUN" --nproc_per_node=1 "$T/longline" >"$T/line.fifo" 2>"$T/line.err" &
pid=$!
set +e
"${READER[@]}" --line 200000000 --ddprun_pid "$pid" --release "$T/release" <"$T/line.fifo" >"$T/line.read" 2>"$T/line.reader.err"
rrc=$?
set -e
rc=0; wait "$pid" || rc=$?
[[ $rrc == 0 ]] || fail "slow reader of the 200 MB line: $(cat "$T/line.reader.err") (ddprun said: $(tail -3 "$T/line.err"))"
expect_eq "$rc" 0 "exit code of the 200 MB line"
expect_not_in "$T/line.err" "dropp"
rss=$(sed -n 's/^ddprun_peak_rss_kib=//p' "$T/line.read")
(( rss < 32 * 1024 )) || fail "ddprun's peak RSS was $rss KiB while a 200 MB line passed (expected under 32 MiB)"
ok "a 200 MB line through a slow reader: every byte, ddprun's peak RSS $rss KiB ($(tr '\n' ' ' <"$T/line.read"))"

# A console nobody reads: a fifo that a sleeping process holds open. Rank 0 floods it (8 MB:
# far more than ddprun's queue), with SIGTERM recorded; rank 1 waits, or fails on request.
worker spam <<'PY'
#!/usr/bin/python3
import os, signal, sys, time
T, rank = os.environ["T"], os.environ["RANK"]
def term(*_):
    open(f"{T}/term.{rank}", "w").close()
    os._exit(0)
signal.signal(signal.SIGTERM, term)
with open(f"{T}/pid.{rank}", "w") as f:
    f.write(str(os.getpid()))
if rank == "0":
    if os.environ.get("BEAT"):
        os.utime(os.environ["DDPRUN_HEARTBEAT_FILE"])
    for _ in range(800):
        os.write(1, (b"x" * 99 + b"\n") * 100)
    open(f"{T}/spammed", "w").close()
    while os.environ.get("BEAT"):
        os.utime(os.environ["DDPRUN_HEARTBEAT_FILE"])
        time.sleep(0.1)
    sys.exit(0)
if os.environ.get("BEAT"):
    # Beats once more after rank 0 is blocked, then goes silent: rank 1 is the hung one, though
    # rank 0 has been silent longer.
    os.utime(os.environ["DDPRUN_HEARTBEAT_FILE"])
    while not os.path.exists(f"{T}/blocked"):
        time.sleep(0.02)
    os.utime(os.environ["DDPRUN_HEARTBEAT_FILE"])
while not os.path.exists(f"{T}/fail_now"):
    time.sleep(0.02)
sys.exit(3)
PY
# Rank 0 waits in write() on its pipe: ddprun stopped reading it.
rank0_blocked() {
  local p
  p=$(cat "$T/pid.0" 2>/dev/null) || return 1
  grep -q pipe_write "/proc/$p/wchan" 2>/dev/null
}
start_stalled() {  # NAME ARGS...: ddprun's stdout into a fifo nobody reads
  local name=$1; shift
  rm -f "$T/console" "$T"/term.* "$T"/pid.* "$T/spammed" "$T/blocked" "$T/fail_now"
  mkfifo "$T/console"
  exec -a "$T/stalled-reader" sleep 300 <"$T/console" &
  reader=$!
  "$DDPRUN" "$@" >"$T/console" 2>"$T/$name.err" &
  pid=$!
  wait_for 60 rank0_blocked
}
stop_stalled() {  # the reader goes, so ddprun's exit need not wait for it; sets rc
  kill "$reader"; wait "$reader" 2>/dev/null || true
  rc=0; wait "$pid" || rc=$?
}

# 3. SIGTERM, while rank 0 waits on the console.
start_stalled sigterm --nproc_per_node=2 "$T/spam"
wait_for 60 test -e "$T/pid.1"  # rank 1 handles SIGTERM from now on
expect_not_in "$T/sigterm.err" "dropp"
t0=$(now_ms)
kill -TERM "$pid"
wait_for 10 test -e "$T/term.0" -a -e "$T/term.1"
handled=$(( $(now_ms) - t0 ))
[[ ! -e $T/spammed ]] || fail "rank 0 finished its 8 MB with nobody reading: output was dropped"
stop_stalled
expect_eq "$rc" 143 "exit code after SIGTERM with a stalled console"
ok "a console nobody reads: rank 0 held back, SIGTERM reached both ranks in $handled ms"

# 4. A failure, while rank 0 waits on the console.
start_stalled failure --nproc_per_node=2 "$T/spam"
wait_for 60 test -e "$T/pid.1"
t0=$(now_ms)
touch "$T/fail_now"
wait_for 10 test -e "$T/term.0"
handled=$(( $(now_ms) - t0 ))
expect_in "$T/failure.err" "^ddprun: rank 1 \(local rank 1\) failed: exit code 3; stopping the other workers"
stop_stalled
expect_eq "$rc" 3 "exit code of a failure with a stalled console"
ok "a console nobody reads: rank 1's failure stopped rank 0 in $handled ms"

# 5. Rank 0 beats, then waits on the console longer than --hang_timeout; rank 1 beats once more
# after that and goes silent. Only rank 1 is hung.
BEAT=1 start_stalled hang --nproc_per_node=2 --hang_timeout=3 --event_log="$T/hang.jsonl" "$T/spam"
touch "$T/blocked"
wait_for 60 grep -q '"event":"hang"' "$T/hang.jsonl"
stop_stalled
expect_eq "$rc" 124 "exit code of a hung job"
expect_in "$T/hang.err" "rank 1 hung: no progress for"
expect_not_in "$T/hang.err" "rank 0 hung"
expect_not_in "$T/hang.jsonl" '"event":"hang".*"rank":0[,}]'
ok "a worker waiting on a console nobody reads is not hung; the silent one is"

# 6. --output_stall_timeout: the console takes nothing for 1 s, so rank 0's output is dropped
# and it goes on; then the reader comes back: ddprun says how much was lost, and the reader's
# whole lines and the bytes dropped make up all of rank 0's output.
rm -f "$T/console" "$T/spammed"
mkfifo "$T/console"
exec -a "$T/stalled-reader" sleep 300 <"$T/console" &
reader=$!
"$DDPRUN" --nproc_per_node=1 --output_stall_timeout=1 "$T/spam" >"$T/console" 2>"$T/stall.err" &
pid=$!
wait_for 60 test -e "$T/spammed"
expect_in "$T/stall.err" "^ddprun: the console \(stdout\) took nothing for 1 s: dropping its output until it takes some again \(--output_stall_timeout\)$"
cat <"$T/console" >"$T/stall.out" &
cat_pid=$!
wait_for 60 grep -q "takes output again" "$T/stall.err"  # cat reads: the sleeping reader may go
kill "$reader"; wait "$reader" 2>/dev/null || true
rc=0; wait "$pid" || rc=$?
wait "$cat_pid"
expect_eq "$rc" 0 "exit code after the stall"
expect_in "$T/stall.err" "^ddprun: the console \(stdout\) takes output again; [0-9]+ bytes of it were dropped while it took nothing$"
dropped=$(sed -n 's/.*takes output again; \([0-9]*\) bytes.*/\1/p' "$T/stall.err")
bad=$(grep -cvx '\[rank0\]: x\{99\}' "$T/stall.out" || true)
expect_eq "$bad" 0 "broken lines after a stall"
expect_eq "$(( $(wc -c <"$T/stall.out") + dropped ))" $(( 80000 * 109 )) "bytes received + bytes dropped"
ok "after --output_stall_timeout: $dropped bytes dropped and counted, the rest whole"
