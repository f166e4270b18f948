#!/usr/bin/env bash
# A hot spare's workers are forked from a warm interpreter (--warm_start=auto, the default): the
# spare starts its zygote when it becomes a spare, so that when it takes a lost node's place its
# workers skip `import torch`, as a restart's do. A job of 2 nodes (c10d, --nnodes=2, no
# --max_restarts: a node's loss is replaced by a spare without using it) and a spare, on loopback;
# node b's ddprun is SIGKILLed; the spare's worker says torch was already imported at its first
# line, its event log says "warm": true, and the survivor's new worker is forked too.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
source "$DDPRUN_TESTS_DIR/elastic/nodes.sh"
unset PYTHONPATH
/usr/bin/python3 -c 'import torch.distributed' 2>/dev/null || skip "Debian's python3 has no torch.distributed"
export PYTHON_EXEC=/usr/bin/python3

cat >"$T/job.py" <<'PY'
import os, sys, time
forked = "torch" in sys.modules  # before any import of the script's: forked from the zygote
out, node = sys.argv[1], sys.argv[2]
import torch.distributed as dist
dist.init_process_group("gloo")
dist.barrier()  # progress: a node's zygote starts now (auto)
with open(f"{out}/started.{node}.{os.getpid()}", "w") as f:
    f.write(f"{forked}")
if os.path.exists(f"{out}/killed"):
    sys.exit(0)
time.sleep(600)
PY

job=(--nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.2:$port --rdzv_id=spare-warm-$$
     --rdzv_conf=join_timeout=60,heartbeat_timeout=5,spares=1)
node 127.0.0.2 a "${job[@]}" "$T/job.py" "$T" a
node 127.0.0.3 b "${job[@]}" "$T/job.py" "$T" b
started() { compgen -G "$T/started.$1.*" >/dev/null; }
wait_for 120 started a
wait_for 120 started b
node 127.0.0.4 c "${job[@]}" --event_log="$T/c.events" "$T/job.py" "$T" c
wait_for 60 grep -q "this node is a hot spare" "$T/c.err"
# The spare's zygote, a child of its ddprun, before b goes (the start would wait for it anyway).
zygote_of() { pgrep -P "$(eval echo "\$PID_$1")" -f _ddprun_zygote.py >/dev/null; }
wait_for 60 zygote_of c
touch "$T/killed"
kill -KILL "$PID_b"
finish b
finish_within 120 a
finish_within 120 c
expect_eq "$RC_a/$RC_c" "0/0" "the exits of a and of the spare ($(show a c))"
expect_eq "$(cat "$T"/started.c.*)" "True" "the spare's worker had torch imported at its first line (forked)"
expect_in "$T/c.events" '"event":"worker_started".*"warm":true'
# a's first worker started cold (the first start), its second was forked from a's zygote.
expect_eq "$(for f in "$T"/started.a.*; do cat "$f"; echo; done | sort | tr '\n' ' ')" "False True " \
  "node a's workers: the first cold, the next forked"
expect_not_in "$T/c.err" "warm start"
ok "the spare started its warm interpreter while it waited; its worker was forked when it took b's place"
wait_for 30 no_leftovers
