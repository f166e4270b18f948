#!/usr/bin/env bash
# Progress without code changes (--progress; launcher/python_bootstrap/), in this build's PyTorch
# (TORCH_PYTHON), with tests/worker/progress_probe.py, which has no heartbeat code:
#  1. the program sees what it sees without ddprun: its argv, __main__, sys.path, PYTHONPATH
#     (unset, or a user's), the sitecustomize it would have run (Debian's, or a user's own first
#     on PYTHONPATH), its exit code and its traceback; DataLoader workers started by spawn load
#     nothing of ddprun's, and those started by fork never beat; a DDP model through torch.compile
#     (2.x) trains alike, and the module counts its optimizer steps and its synchronised
#     backward passes (ddp_backward), and none under no_sync();
#  2. --progress=off: ddprun's module is not even loaded;
#  3. rank 1 blocks before a forward while rank 0 waits in the all-reduce: --hang_timeout finds
#     rank 1 hung from the progress that ddprun's module counted (without it no rank ever beats,
#     and --hang_timeout waits for --hang_startup, 600 s), names it from the records (DDP's
#     backward passes are collectives there: rank 0 waits in ddp_backward #6, which rank 1 has
#     not entered), and names its last optimizer step.
#  4. the same with the interpreter named as the program (--no_python python3 probe.py): the
#     module loads and the stacks are Python's (py-spy, where installed);
#  5. collectives only: rank 1 sleeps before an all_reduce that rank 0 waits in. The progress
#     records say so: rank 1 is named, and is the root cause (not the victim, rank 0).
#  6. a shell wrapper that runs the interpreter as a child (ddprun does not know the program is
#     Python, so its module is not loaded; hang_worker.py beats by itself): the stacks are still
#     Python's, those of the wrapper's python child (py-spy, where installed).
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
torch_workers
probe=$DDPRUN_TESTS_DIR/worker/progress_probe.py

mkdir "$T/user"
echo 'USER_SITECUSTOMIZE = True' > "$T/user/sitecustomize.py"

# probe NAME EXIT PYTHONPATH [DDPRUN OPTIONS...]: the probe under ddprun (in $T/NAME) and alone
# (in $T/NAME.alone), with PYTHONPATH set to the given value ("-": unset); compares what they saw.
probe() {
  local name=$1 code=$2 path=$3 rc_alone; shift 3
  mkdir "$T/$name" "$T/$name.alone"
  if [[ $path == - ]]; then
    run_ddprun "$name" --nproc_per_node=1 "$@" "$probe" probe "$T/$name" "$code"
  else
    PYTHONPATH=$path run_ddprun "$name" --nproc_per_node=1 "$@" "$probe" probe "$T/$name" "$code"
  fi
  set +e
  if [[ $path == - ]]; then
    "$TORCH_PYTHON" -u "$probe" probe "$T/$name.alone" "$code" >"$T/$name.alone.out" 2>"$T/$name.alone.err"
  else
    PYTHONPATH=$path "$TORCH_PYTHON" -u "$probe" probe "$T/$name.alone" "$code" >"$T/$name.alone.out" 2>"$T/$name.alone.err"
  fi
  rc_alone=$?
  set -e
  expect_eq "$RC" "$rc_alone" "[$name] exit code under ddprun and alone ($(cat "$T/$name.err"))"
  local progress=1
  for option in "$@"; do [[ $option == --progress=off ]] && progress=0; done
  python3 - "$T/$name/probe.json" "$T/$name.alone/probe.json" "$progress" <<'PY' || fail "[$name] the probe saw a difference"
import json, sys
d, a, progress = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3] == "1"
problems = []
def same(what, x, y):
    if x != y: problems.append(f"{what}: under ddprun {x!r}, alone {y!r}")
same("argv (without the folder)", d["argv"][:1] + d["argv"][2:], a["argv"][:1] + a["argv"][2:])
for key in ("main", "sys_path", "PYTHONPATH", "sitecustomize", "user_sitecustomize_ran"):
    same(key, d[key], a[key])
same("ddprun's module loaded", d["progress_module"], progress)
same("the losses of a (compiled) DDP model", d["compiled_losses"], a["compiled_losses"])
same("the optimizer steps ddprun's module counted", d["steps_counted"],
     (0 if d["compiled_losses"] is None else 3) if progress else None)
same("the DDP backward passes ddprun's module counted (collectives, the last one's name)", d["backward_counted"],
     ([0, ""] if d["compiled_losses"] is None else [3, "ddp_backward"]) if progress else None)
same("ddprun's module beats for this process", d["progress_owner"], progress)
for method in ("fork", "spawn"):
    for child in d["loader_" + method]:
        same(f"a {method} DataLoader worker's PYTHONPATH", child["PYTHONPATH"], a["PYTHONPATH"])
        same(f"a {method} DataLoader worker's sitecustomize", child["sitecustomize"], a["sitecustomize"])
        same(f"a {method} DataLoader worker beats", child["progress_owner"], False)
        if method == "spawn":
            same("ddprun's module in a spawn DataLoader worker", child["progress_module"], False)
for p in problems: print(p, file=sys.stderr)
sys.exit(bool(problems))
PY
}

probe unset 0 -
probe users 3 "$T/user"
probe off 0 "$T/user" --progress=off
ok "the program sees what it sees without ddprun (argv, __main__, sys.path, PYTHONPATH unset and a user's, Debian's and a user's sitecustomize, exit 0 and 3), DataLoader workers (fork, spawn) never beat, a (compiled) DDP model trains alike and its steps and synchronised backward passes are counted; --progress=off loads nothing"

probe raise raise "$T/user"
# The traceback, line for line, with the rank's prefix.
# (The traceback itself, from its first line to the exception's: what else a run writes to
# stderr, a resource tracker's warning at exit, comes and goes from run to run.)
sed -n '/^Traceback (most recent call last):$/,/^ValueError: /p' "$T/raise.alone.err" >"$T/raise.alone.traceback"
expect_in "$T/raise.alone.traceback" "^Traceback"
while IFS= read -r line; do
  grep -qxF "[rank0]: $line" "$T/raise.err" || { cat "$T/raise.err"; fail "traceback line missing under ddprun: $line"; }
done < "$T/raise.alone.traceback"
expect_in "$T/raise.alone.err" "^ValueError: the probe's own error$"
ok "an uncaught exception: the same traceback and exit code 1 as without ddprun"

# 3. An unmodified DDP script whose rank 1 blocks: found hung from its forward passes and steps.
mkdir "$T/train"
run_ddprun train --nproc_per_node=2 --hang_timeout=5 --log_dir="$T/logs" --event_log="$T/train.jsonl" \
  "$probe" train "$T/train"
expect_eq "$RC" 124 "exit code of the hung DDP script ($(cat "$T/train.err"))"
# DDP's backward passes are collectives in the module's records: rank 0 waits in the 6th, which
# rank 1 never entered. Its optimizer steps: steps 0-4 done, blocked in the 6th.
expect_in "$T/train.err" "^ddprun: rank 1 hung: rank 0 waits in ddp_backward #6; rank 1 has not entered it: last in ddp_backward #5; no progress for [0-9.]+ s \(hang timeout 5\.0 s; last step 5\); collecting the stacks of 2 workers$"
expect_in "$T/train.err" "root cause: rank 1 \(local rank 1\) on .*: hung \(exit code 124\): hang \(.*\) at step 5$"
delay=$(hang_delay "$T/train.jsonl" 1 "$T/train/step.1")
within 4.5 12 "$delay" || fail "rank 1 found hung ${delay} s after its last step (timeout 5 s)"
expect_stacks "its stack in stuck_before_forward" "$T/train.err" "stuck_before_forward"
wait_for 20 no_leftovers
ok "an unmodified DDP script's rank 1 blocks before its 6th backward: named (rank 0 waits in ddp_backward #6) ${delay} s after its last step (timeout 5 s)$STACKS, exit 124"

# 4. The same with the interpreter named as the program (--no_python python3 x.py): ddprun's
# module loads, and the stacks are Python's.
mkdir "$T/train2"
run_ddprun train2 --nproc_per_node=2 --hang_timeout=5 --no_python "$TORCH_PYTHON" "$probe" train "$T/train2"
expect_eq "$RC" 124 "exit code of the hung DDP script, --no_python ($(cat "$T/train2.err"))"
expect_in "$T/train2.err" "root cause: rank 1 \(local rank 1\) on .*: hung \(exit code 124\)"
expect_stacks "its stack in stuck_before_forward" "$T/train2.err" "stuck_before_forward"
wait_for 20 no_leftovers
ok "--no_python $(basename "$TORCH_PYTHON") probe.py: found hung$STACKS"

# 5. Collectives only (the issue's own case): rank 1 never comes to the all_reduce rank 0 waits in.
mkdir "$T/coll"
run_ddprun coll --nproc_per_node=2 --hang_timeout=5 "$probe" collective "$T/coll"
expect_eq "$RC" 124 "exit code of the hung all_reduce loop ($(cat "$T/coll.err"))"
# Named from the progress records (tests/worker/culprit_test.sh has more).
expect_in "$T/coll.err" "^ddprun: rank 1 hung: rank 0 waits in all_reduce #[0-9]+; rank 1 has not entered it: last in all_reduce #[0-9]+"
expect_in "$T/coll.err" "root cause: rank 1 \(local rank 1\) on .*: hung \(exit code 124\)"
expect_stacks "its stack in stuck_before_all_reduce" "$T/coll.err" "stuck_before_all_reduce"
wait_for 20 no_leftovers
ok "collectives only: rank 1, which never entered the all_reduce, is the root cause$STACKS"

# 6. A shell wrapper that starts Python as a child: the stacks of that child, Python's. Without
# ddprun's module (ddprun does not know the program is Python) the worker beats by itself:
# hang_worker.py touches its heartbeat file at each step.
mkdir "$T/wrapped"
worker wrapper <<SH
#!/bin/bash
"$TORCH_PYTHON" -u "$DDPRUN_TESTS_DIR/worker/hang_worker.py" collective "$T/wrapped"
exit \$?
SH
run_ddprun wrapped --nproc_per_node=2 --hang_timeout=5 --log_dir="$T/wrapped_logs" "$T/wrapper"
expect_eq "$RC" 124 "exit code of the hung script under a shell wrapper ($(cat "$T/wrapped.err"))"
expect_in "$T/wrapped.err" "root cause: rank 1 \(local rank 1\) on .*: hung \(exit code 124\)"
for r in 0 1; do
  expect_in "$(run_dir "$T/wrapped_logs")/attempt_0/rank_$r/stacks.txt" "^== worker [0-9]+ runs Python in its descendant [0-9]+"
done
expect_stacks "rank 1's Python stack in stuck_in_data_loader, rank 0's in all_reduce" \
  "$T/wrapped.err" "^        stuck_in_data_loader \(.*hang_worker.py:[0-9]+\)" \
  "$(run_dir "$T/wrapped_logs")/attempt_0/rank_0/stacks.txt" "all_reduce"
wait_for 20 no_leftovers
ok "a bash wrapper that runs Python as a child: found hung$STACKS"
