#!/usr/bin/env bash
# Hang detection with the worker library and with PyTorch (issue 15), in this build's libtorch:
#  1. a C++ DDP worker (rank_driver hang) that stops stepping: the library's own beats, no user
#     code; the summary names rank 1, its last step and the frame it is stuck in;
#  2. a Python worker (TORCH_PYTHON) stuck in a blocking call while rank 0 waits in an
#     all_reduce: its Python stack by py-spy where installed, else by its faulthandler;
#  3. torchelastic's FileTimerClient with TORCHELASTIC_ENABLE_FILE_TIMER=1: the timer expires.
# Each: exit 124, the hung rank named, detection time against the timeout, stacks of every
# rank in the log folder, the event log, nothing left running.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
# py-spy lives in the 2.x virtual environment (scripts/install-deps.sh --torch2); ddprun finds it
# in PATH or next to the worker's Python.
source "$DDPRUN_SOURCE_DIR/scripts/torch2-env.sh"
[[ -x "$TORCH2_VENV/bin/py-spy" ]] && export PATH="$PATH:$TORCH2_VENV/bin"
py_spy=$(command -v py-spy || true)

# common_checks NAME: exit 124, rank 1 named as the root cause, stacks of both ranks kept.
common_checks() {
  expect_eq "$RC" 124 "$1: exit code"
  expect_in "$T/$1.err" "root cause: rank 1 \(local rank 1\) on .*: hung \(exit code 124\)"
  for r in 0 1; do expect_in "$(run_dir "$T/logs_$1")/attempt_0/rank_$r/stacks.txt" "^== (eu-stack|gdb)"; done
  expect_in "$T/$1.jsonl" '"event":"exit".*"exit_code":124.*"hung":true,"kind":"hang","rank":1'
  wait_for 20 no_leftovers
}

# 1. C++: the library beats at every collective and DDP backward by itself.
mkdir -p "$T/cpp"
run_ddprun cpp --nproc_per_node=2 --hang_timeout=5 --log_dir="$T/logs_cpp" --event_log="$T/cpp.jsonl" "$RANK_DRIVER" hang "$T/cpp" 3
common_checks cpp
# Rank 0 entered the next backward a moment after rank 1's last step: on a loaded machine both
# may be past the timeout when it is checked; rank 1, silent longest, comes first. The library's
# progress records show rank 0 inside the next backward and rank 1 not: rank 1 is named for it.
expect_in "$T/cpp.err" "ranks? 1(, 0)? hung: (rank 0 waits in ddp_backward #[0-9]+; rank 1 has not entered it: [^;]+; )?no progress for [0-9.]+ s \(hang timeout 5\.0 s; last step 3\)"
expect_in "$T/cpp.err" "^        .*stuck_loading_batch"
# Its steps, from the library's progress record: three synchronised backward passes done.
expect_in "$T/cpp.err" "^    error: (.*; )?no progress for [0-9.]+ s \(hang timeout 5\.0 s; last step 3\)"
delay=$(hang_delay "$T/cpp.jsonl" 1 "$T/cpp/lastbeat.1")
within 4.5 12 "$delay" || fail "C++ rank 1 found hung ${delay}s after its last step, with a 5 s timeout"
ok "C++ worker: found ${delay} s after its last step (timeout 5 s), stuck in stuck_loading_batch, exit 124"

# The same job restarts and completes when restarts remain.
rm -f "$T"/cpp/step.*
run_ddprun cpp_restart --nproc_per_node=2 --hang_timeout=5 --max_restarts=1 "$RANK_DRIVER" hang "$T/cpp" 3
expect_eq "$RC" 0 "C++ worker: exit code after a hang and a restart"
expect_in "$T/cpp_restart.err" "restarting workers \(restart 1 of 1\)"
ok "C++ worker: restarted after the hang, then completed"

# 2. Python: rank 1 blocks outside any collective; rank 0 waits in all_reduce.
mkdir -p "$T/py"
PYTHON_EXEC=$TORCH_PYTHON run_ddprun py --nproc_per_node=2 --hang_timeout=5 --log_dir="$T/logs_py" --event_log="$T/py.jsonl" \
  "$DDPRUN_TESTS_DIR/worker/hang_worker.py" collective "$T/py"
common_checks py
# ddprun's module keeps a progress record (a .py program): rank 1 is named as the rank that has
# not entered the all_reduce rank 0 waits in.
expect_in "$T/py.err" "^ddprun: rank 1 hung: rank 0 waits in all_reduce #[0-9]+; rank 1 has not entered it"
delay=$(hang_delay "$T/py.jsonl" 1 "$T/py/lastbeat.1")
within 4.5 12 "$delay" || fail "Python rank 1 found hung ${delay}s after its last beat, with a 5 s timeout"
# Python stacks either way: py-spy's, else (without it) those of the worker's faulthandler, which
# ddprun's bootstrap registered.
expect_in "$T/py.err" "^        stuck_in_data_loader \(.*hang_worker.py:[0-9]+\)"
expect_in "$(run_dir "$T/logs_py")/attempt_0/rank_0/stacks.txt" "all_reduce"
by=faulthandler
[[ -n "$py_spy" ]] && by=py-spy
expect_in "$(run_dir "$T/logs_py")/attempt_0/rank_1/stacks.txt" "$([[ $by == py-spy ]] && echo "py-spy' dump --pid" || echo "^== faulthandler of")"
ok "Python worker: found ${delay} s after its last beat (timeout 5 s), Python stacks by $by: rank 1 in stuck_in_data_loader, rank 0 in all_reduce"

# 3. torchelastic's FileTimerClient: ddprun serves the pipe and enforces the expiry.
"$TORCH_PYTHON" -c "import torch.distributed.elastic.timer.file_based_local_timer" 2>/dev/null \
  || skip "$TORCH_PYTHON has no torchelastic FileTimerClient"
mkdir -p "$T/timer"
TORCHELASTIC_ENABLE_FILE_TIMER=1 PYTHON_EXEC=$TORCH_PYTHON run_ddprun timer --nproc_per_node=2 --log_dir="$T/logs_timer" \
  --event_log="$T/timer.jsonl" "$DDPRUN_TESTS_DIR/worker/hang_worker.py" file_timer "$T/timer"
common_checks timer
expect_in "$T/timer.err" "rank 1 hung: its torchelastic timer 'train_step' expired"
expect_in "$T/timer.jsonl" '"event":"timer_expired".*"scope_id":"train_step"'
delay=$(python3 - "$T/timer.jsonl" "$T/timer/acquired.1" <<'PY'
import json, sys
e = next(json.loads(l) for l in open(sys.argv[1]) if '"timer_expired"' in l)
print("%.2f" % (e["time"] - float(open(sys.argv[2]).read())))
PY
)
within 1.9 8 "$delay" || fail "the 2 s timer was enforced ${delay}s after it was acquired"
[[ ! -e "$(run_dir "$T/logs_timer")/watchdog_timer" ]] || fail "the timer pipe was left in the log folder"
ok "FileTimerClient: the 2 s timer expired ${delay} s after it was acquired; rank 1 reported hung, exit 124"
