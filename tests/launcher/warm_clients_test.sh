#!/usr/bin/env bash
# --warm_start against real clients (issue 42): each script of tests/launcher/warm_clients/ runs
# under ddprun on the torch 2.x venv, cold and forked from the warm interpreter (and those that
# restart also under the defaults, whose restart is forked), and must
# print the same RESULT lines (losses, checksums, seeds: bit for bit) and end with the same exit
# code and summary: PyTorch's DDP tutorial with a SIGKILL and the resume from its snapshot, the
# same as a module (-m), a Lightning Trainer, a Fabric script, an accelerate script, DataLoader
# workers started by fork, spawn and forkserver, and a script with its own SIGTERM handler that
# ddprun's stop runs.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
source "$DDPRUN_SOURCE_DIR/scripts/torch2-env.sh"
unset PYTHONPATH TORCH_DISABLE_SHARE_RDZV_TCP_STORE
export PYTHON_EXEC=$TORCH2_PYTHON
"$PYTHON_EXEC" -c 'import torch.distributed, lightning, accelerate' 2>/dev/null \
  || skip "no torch 2.x venv with lightning and accelerate (scripts/install-deps.sh --torch2)"
cp -r "$DDPRUN_TESTS_DIR/launcher/warm_clients" "$T/clients"
cd "$T/clients"
v=$("$PYTHON_EXEC" -c 'import torch; print(torch.__version__)')

# results NAME: the RESULT lines of a run, without ddprun's rank prefix, sorted (the ranks'
# lines interleave differently from run to run; each rank's own come in order).
results() { sed -n 's/^\[rank[0-9]*\]: RESULT /RESULT /p' "$T/$1.out" | sort; }
# summary NAME: ddprun's own lines, but for what names a process, a time or a machine.
summary() {
  grep '^ddprun: \|^  ' "$T/$1.err" | grep -v '^ddprun: warm start' \
    | sed -E 's/[0-9]+\.[0-9]+ ?s\b/N s/g; s/[0-9]+(\.[0-9]+)?%/N%/g; s/pid [0-9]+/pid N/g; s/(at|on) [^ ]+ [0-9:.-]+//g' || true
}

# client NAME EXPECTED_RC ARGS...: runs ARGS under ddprun cold (--warm_start=off), then warm
# (on: every start forked), and with CLIENT_AUTO=1 also under the defaults (auto: the first start
# cold, the restart forked), and compares.
client() {
  local name=$1 expected=$2; shift 2
  local how hows=(cold warm) flag
  [[ -z ${CLIENT_AUTO:-} ]] || hows+=(auto)
  for how in "${hows[@]}"; do
    rm -f "$T/snapshot"
    flag=$([[ $how == warm ]] && echo --warm_start=on || echo --warm_start=off)
    [[ $how != auto ]] || flag=--event_log=$T/$name-auto.events
    run_ddprun "$name-$how" "$flag" --nproc_per_node=2 "$@"
    [[ $RC == "$expected" ]] || { tail -20 "$T/$name-$how.err"; fail "torch $v, $name ($how): exit code $RC, expected $expected"; }
  done
  [[ -n $(results "$name-cold") ]] || fail "$name: no RESULT line"
  for how in "${hows[@]:1}"; do
    expect_not_in "$T/$name-$how.err" "warm start"  # forked, not cold with a line saying why
    diff <(results "$name-cold") <(results "$name-$how") >"$T/$name.diff" \
      || { cat "$T/$name.diff"; fail "torch $v, $name ($how): the forked workers' results differ from the cold ones'"; }
    diff <(summary "$name-cold") <(summary "$name-$how") || fail "torch $v, $name ($how): ddprun's summary differs"
  done
  if [[ -n ${CLIENT_AUTO:-} ]]; then
    # The first start's two workers cold, the restart's two forked.
    expect_eq "$(grep -c '"event":"worker_started"' "$T/$name-auto.events") $(grep -c '"warm":true' "$T/$name-auto.events")" \
      "4 2" "torch $v, $name (auto): workers started, of which forked from the warm interpreter"
  fi
  ok "torch $v, $name: $(results "$name-cold" | wc -l) result lines and exit code $expected, the same ${hows[*]}"
}

CLIENT_AUTO=1 client tutorial 0 --max_restarts=1 tutorial.py "$T/snapshot" 4
expect_in "$T/tutorial-warm.out" "RESULT rank=1 resumed_at=2"
CLIENT_AUTO=1 client module 0 --max_restarts=1 -m pkg.train "$T/snapshot" 4
expect_in "$T/module-warm.out" "RESULT rank=0 resumed_at=2"
client lightning_trainer 0 lightning_trainer.py
expect_in "$T/lightning_trainer-warm.out" "RESULT rank=1 world=2 global_rank=1"
client fabric 0 fabric_script.py
client accelerate 0 accelerate_script.py
expect_in "$T/accelerate-warm.out" "RESULT rank=1 world=2 type='DistributedType.MULTI_CPU'"
client dataloader_workers 0 dataloader_workers.py
for context in fork spawn forkserver; do
  expect_in "$T/dataloader_workers-warm.out" "RESULT rank=0 context='$context' batches=\[\(\[[^]]*\], \[[0-9]+\], True\)"
done
client signals 5 signals.py
expect_in "$T/signals-warm.out" "RESULT rank=1 signal='SIGTERM' handler='saving'"
