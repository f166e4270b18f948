#!/usr/bin/env bash
# Failure kinds with real processes: a real Python raising each exception (the interpreter with
# torch 1.13 for cuda_oom and the gloo timeout), a real C++ program segfaulting and aborting, shell
# workers killed from outside or exiting, a user's rule. For each: the summary names the kind and
# its cause, --result_file holds it (written atomically, also on success), the event log has it.
# A real out-of-memory kill needs the cgroup v2 memory controller: oom_kill_test.sh.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"

PY=/usr/bin/python3
export PYTHON_EXEC=$PY
TORCH_PY=${TORCH_PYTHON:-/usr/bin/python3}

# check NAME KIND CAUSE_REGEX RETRYABLE: the summary line, the result file and the event log of run NAME.
check() {
  local name=$1 kind=$2 cause=$3 retryable=$4
  expect_in "$T/$name.err" "root cause: rank [0-9]+ \(local rank [0-9]+\) on .*, pid [0-9]+: .*: $kind \($cause"
  expect_eq "$(json_field "$T/$name.json" '["kind"]')" "$kind" "$name: result file kind"
  expect_eq "$(json_field "$T/$name.json" '["root_cause"]["kind"]')" "$kind" "$name: result file root cause"
  expect_eq "$(json_field "$T/$name.json" '["retryable"]')" "$retryable" "$name: result file retryable"
  expect_eq "$(json_field "$T/$name.json" '["exit_code"]')" "$RC" "$name: result file exit code"
  json_field "$T/$name.json" '["message"]' | grep -Eq -- "$cause" || fail "$name: result message: $(json_field "$T/$name.json" '["message"]')"
  expect_eq "$(events "$T/$name.jsonl" worker_failed kind | sed -n 1p)" "$kind" "$name: event log kind"
  [[ -z $(ls "$T"/"$name".json.tmp.* 2>/dev/null) ]] || fail "$name: a temporary result file was left"
}
run_kind() { local name=$1; shift; run_ddprun "$name" --result_file="$T/$name.json" --event_log="$T/$name.jsonl" "$@"; }

# --- Python ----------------------------------------------------------------------------------
printf 'import os\nprint("step 1")\ndef f(:\n    pass\n' > "$T/broken_syntax.py"
run_kind syntax --nproc_per_node=2 "$T/broken_syntax.py"
expect_eq "$RC" 1 "SyntaxError exit code"
check syntax syntax_error "SyntaxError: (invalid syntax|.*)" False
expect_eq "$(json_field "$T/syntax.json" '["root_cause"]["location"]')" "$T/broken_syntax.py:3" "SyntaxError location"
ok "syntax_error"

# Issue 29, item 6: two ranks fail on their own at once (each waits for the other, then raises;
# SIGTERM ignored, so that ddprun's stop does not end the second one first): both are listed,
# each with its cause.
cat > "$T/both.py" <<'PY'
import os, signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
rank = os.environ["RANK"]
open(os.path.join(os.environ["T"], "ready." + rank), "w").close()
while not all(os.path.exists(os.path.join(os.environ["T"], "ready." + r)) for r in ("0", "1")):
    time.sleep(0.01)
raise ValueError(f"bad shard {rank}")
PY
T=$T run_kind both --nproc_per_node=2 "$T/both.py"
check both python_exception "ValueError: bad shard [01]" True
expect_in "$T/both.err" "root cause: rank ([01]) .*: exit code 1: python_exception \\(ValueError: bad shard \\1\\) at $T/both.py:7"
expect_in "$T/both.err" "also failed: rank ([01]) .*: exit code 1: python_exception \\(ValueError: bad shard \\1\\) at $T/both.py:7"
expect_eq "$(json_field "$T/both.json" '["failures"].__len__()')" 2 "both ranks in the result file"
ok "two ranks failing on their own: both listed, each with its cause"

printf 'import no_such_module_for_ddprun_test\n' > "$T/import.py"
run_kind import "$T/import.py"
check import import_error "ModuleNotFoundError: No module named 'no_such_module_for_ddprun_test'.*ran under $PY" False
ok "import_error names the interpreter"

printf 'import sys\ndef step(n):\n    return n / 0\nprint("training")\nstep(3)\n' > "$T/zero.py"
run_kind zero "$T/zero.py"
check zero python_exception "ZeroDivisionError: division by zero" True
expect_in "$T/zero.err" "python_exception \(ZeroDivisionError: division by zero\) at $T/zero.py:3"
expect_eq "$(json_field "$T/zero.json" '["root_cause"]["exception"]')" ZeroDivisionError "exception type"
ok "python_exception with its type and location"

cat > "$T/nccl.py" <<'PY'
raise RuntimeError("NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1191, unhandled system error, NCCL version 2.14.3")
PY
run_kind nccl "$T/nccl.py"
check nccl nccl_error "RuntimeError: NCCL error in: " True
ok "nccl_error"

if "$TORCH_PY" -c "import torch.cuda; torch.cuda.OutOfMemoryError" 2>/dev/null; then
  # The real torch's exception with PyTorch's message (there is no GPU to run out of here).
  cat > "$T/cuda_oom.py" <<'PY'
import torch
raise torch.cuda.OutOfMemoryError(
    "CUDA out of memory. Tried to allocate 20.00 GiB (GPU 0; 79.11 GiB total capacity; 61.03 GiB already "
    "allocated; 17.56 GiB free; 61.05 GiB reserved in total by PyTorch)")
PY
  PYTHON_EXEC=$TORCH_PY run_kind cuda_oom "$T/cuda_oom.py"
  check cuda_oom cuda_oom "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB" True
  ok "cuda_oom from torch's own OutOfMemoryError"

  # A real gloo collective timeout: rank 1 never enters the all_reduce rank 0 waits in.
  cat > "$T/gloo_timeout.py" <<'PY'
import datetime, os, time
import torch, torch.distributed as dist
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=2))
if dist.get_rank() == 1:
    time.sleep(60)
dist.all_reduce(torch.ones(1))
PY
  PYTHON_EXEC=$TORCH_PY run_kind gloo --nproc_per_node=2 "$T/gloo_timeout.py"
  check gloo collective_timeout "RuntimeError: .*Timed out waiting 2000ms" True
  ok "collective_timeout from gloo"

  # Rank 1 fails at once; rank 0, in an all_reduce with it, sees its connection close: a
  # consequence, listed after the root cause. Rank 0 ignores SIGTERM so that it ends by the
  # error, not by ddprun's stop.
  cat > "$T/peer.py" <<'PY'
import os, signal, sys
import torch, torch.distributed as dist
signal.signal(signal.SIGTERM, signal.SIG_IGN)
dist.init_process_group("gloo")
if dist.get_rank() == 1:
    os._exit(3)
dist.all_reduce(torch.ones(1))
PY
  PYTHON_EXEC=$TORCH_PY run_kind peer --nproc_per_node=2 "$T/peer.py"
  expect_eq "$RC" 3 "root cause's exit code, not the consequence's"
  expect_in "$T/peer.err" "root cause: rank 1 .*: exit code 3: exit_code$"
  expect_in "$T/peer.err" "also failed \(a consequence\): rank 0 .*: exit code 1: consequence \(.*(Connection closed by peer|Connection reset by peer)"
  expect_eq "$(json_field "$T/peer.json" '["failures"][1]["kind"]')" consequence "consequence in the result file"
  ok "consequence: the rank whose peer died is not the root cause"
else
  echo "note: $TORCH_PY has no torch.cuda.OutOfMemoryError; cuda_oom, gloo and consequence cases not run"
fi

# --- native programs ---------------------------------------------------------------------------
CXX=${CXX:-c++}
cat > "$T/crash.cpp" <<'CPP'
#include <csignal>
#include <cstdlib>
int main(int, char** argv) {
  if (argv[1][0] == 's') { volatile int* p = nullptr; return *p; }
  if (argv[1][0] == 'a') std::abort();
  std::raise(SIGFPE);
}
CPP
"$CXX" -O0 -o "$T/crash" "$T/crash.cpp" || fail "cannot compile a C++ program with $CXX"
run_kind segv "$T/crash" s
expect_eq "$RC" 139 "SIGSEGV"
check segv segfault "SIGSEGV \(Segmentation fault\)" True
run_kind abort "$T/crash" a
expect_eq "$RC" 134 "SIGABRT"
check abort abort "SIGABRT \(Aborted\)" True
run_kind fpe "$T/crash" f
check fpe segfault "SIGFPE" True
ok "segfault and abort from a real C++ program"

# --- shell workers -------------------------------------------------------------------------------
worker term <<'SH'
#!/bin/sh
kill -TERM $$
SH
run_kind term "$T/term"
expect_eq "$RC" 143 "SIGTERM from outside"
check term killed "SIGTERM \(Terminated\) from outside ddprun" True

worker kill9 <<'SH'
#!/bin/sh
kill -KILL $$
SH
run_kind kill9 "$T/kill9"
expect_eq "$RC" 137 "SIGKILL from outside"
# The workers' cgroup's memory.events, or without one the host's count of OOM kills
# (/proc/vmstat), has none: not the OOM killer. Should the host's OOM killer have killed
# something else meanwhile, ddprun without a cgroup cannot tell whose, and says probably.
if grep -Eq "host_oom \(SIGKILL from outside ddprun, probably the out-of-memory killer \(the kernel counted" "$T/kill9.err"; then
  check kill9 host_oom "SIGKILL from outside ddprun, probably the out-of-memory killer" True
else
  check kill9 killed "SIGKILL from outside ddprun \(not the out-of-memory killer" True
fi
ok "killed from outside: $(json_field "$T/kill9.json" '["kind"]')"

worker exit3 <<'SH'
#!/bin/sh
echo "loading data" >&2
echo "no shard for rank $RANK" >&2
exit 3
SH
run_kind exit3 "$T/exit3"
expect_eq "$RC" 3 "exit code"
check exit3 exit_code "no shard for rank 0" True
expect_in "$T/exit3.err" "exit code 3: exit_code \(no shard for rank 0\)$"
ok "exit_code with the last stderr line"

# The step a rank reached (here from --progress_pattern), in the summary and the result file.
worker steps <<'SH'
#!/bin/sh
for s in 10 11 12; do echo "step $s"; done
echo "loss is nan" >&2
exit 4
SH
run_kind steps --progress_pattern='^step (?<step>[0-9]+)' "$T/steps"
expect_eq "$RC" 4 "exit code"
check steps exit_code "loss is nan" True
expect_in "$T/steps.err" "exit code 4: exit_code \\(loss is nan\\) at step 12$"
expect_eq "$(json_field "$T/steps.json" '["root_cause"]["step"]')" 12 "step in the result file"
expect_eq "$(events "$T/steps.jsonl" worker_failed progressed)" True "progress seen"
ok "the step reached, in the summary and the result file"

# A user's rule, in a --config file, comes before ddprun's own.
cat > "$T/rules.json" <<'JSON'
{"failure_rules": [{"pattern": "uncorrectable ECC error", "kind": "gpu_fault", "retryable": true},
                   {"pattern": "^bad config", "kind": "config_error", "retryable": false}]}
JSON
worker ecc <<'SH'
#!/bin/sh
echo "NCCL WARN Cuda failure 'uncorrectable ECC error encountered'" >&2
exit 1
SH
run_kind ecc --config="$T/rules.json" "$T/ecc"
check ecc gpu_fault "NCCL WARN Cuda failure 'uncorrectable ECC error encountered'" True
worker badconf <<'SH'
#!/bin/sh
echo "bad config: lr=-1" >&2
exit 2
SH
run_kind badconf --config="$T/rules.json" --max_restarts=5 "$T/badconf"
check badconf config_error "bad config: lr=-1" False
expect_in "$T/badconf.err" "^ddprun: not restarting: rank 0 on .*: config_error \(bad config: lr=-1\): running the same code again cannot fix a config_error"
expect_eq "$(grep -c '"event":"worker_started"' "$T/badconf.jsonl")" 1 "a non-retryable user kind is not restarted"
ok "--failure_rules: the user's kinds, retryable or not"

# The result file on success, and the exit event's fields.
run_kind success --nproc_per_node=2 true
expect_eq "$RC" 0 "success"
expect_eq "$(json_field "$T/success.json" '["exit_code"]') $(json_field "$T/success.json" '["kind"]') $(json_field "$T/success.json" '["retryable"]')" "0 None False" "result on success"
ok "result file on success"

no_leftovers || fail "processes left behind: $(leftovers)"
