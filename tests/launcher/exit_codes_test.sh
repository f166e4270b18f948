#!/usr/bin/env bash
# ddprun exits with the root cause's code and says which rank failed and why.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"

run_ddprun ok --nproc_per_node=2 true
expect_eq "$RC" 0 "all workers succeed"

worker exit3 <<'SH'
#!/bin/sh
[ "$RANK" = 1 ] && exit 3
sleep 30
SH
run_ddprun exit3 --nproc_per_node=3 "$T/exit3"
expect_eq "$RC" 3 "exit code passthrough"
expect_in "$T/exit3.err" "root cause: rank 1 \(local rank 1\) on $(hostname), pid [0-9]+: exit code 3"
expect_in "$T/exit3.err" "exit3 failed \(exit code 3\) after 0 restarts"
ok "exit code passthrough and root cause"

worker segv <<'SH'
#!/bin/sh
[ "$RANK" = 0 ] && kill -SEGV $$
sleep 30
SH
run_ddprun segv --nproc_per_node=2 "$T/segv"
expect_eq "$RC" 139 "signal death is 128+signal"
expect_in "$T/segv.err" "root cause: rank 0 .*killed by SIGSEGV \(exit code 139\)"
ok "signal death"

worker oom <<'SH'
#!/bin/sh
kill -KILL $$
SH
run_ddprun oom "$T/oom"
expect_eq "$RC" 137 "SIGKILL"
# The kind says whose it was (killed, or host_oom where the kernel counted an OOM kill meanwhile).
expect_in "$T/oom.err" "root cause: rank 0 .*killed by SIGKILL \(exit code 137\), not sent by ddprun: (killed|host_oom) \(SIGKILL from outside ddprun"
ok "outside SIGKILL: not ddprun's, and whose"

worker record <<'SH'
#!/bin/sh
if [ "$RANK" = 1 ]; then
  printf '{"message": {"message": "ValueError: boom at step 7", "extraInfo": {"py_callstack": "tb", "timestamp": "%s"}}}' "$(date +%s)" > "$TORCHELASTIC_ERROR_FILE"
  exit 1
fi
sleep 30
SH
run_ddprun record --nproc_per_node=2 "$T/record"
expect_eq "$RC" 1 "error-file worker"
expect_in "$T/record.err" "root cause: rank 1 .*exit code 1"
expect_in "$T/record.err" "error: ValueError: boom at step 7"
ok "error file message in the summary"

run_ddprun missing --nproc_per_node=2 "$T/no-such-program"
expect_eq "$RC" 127 "missing program"
expect_in "$T/missing.err" "^ddprun: could not start $T/no-such-program: No such file or directory$"
run_ddprun missing_path no-such-program-$RANDOM
expect_eq "$RC" 127 "program not in PATH"
expect_in "$T/missing_path.err" "not found in PATH"
touch "$T/not_exec"
run_ddprun noexec "$T/not_exec"
expect_eq "$RC" 126 "not executable"
expect_in "$T/noexec.err" "could not start $T/not_exec: Permission denied"
run_ddprun nopy "$T/absent.py"
expect_eq "$RC" 127 "missing python script"
expect_in "$T/nopy.err" "could not start $T/absent.py: No such file or directory"
ok "could not start: 127 and 126"
