#!/usr/bin/env bash
# A checkpoint holds a whole run: a run resumed from one (model, momentum, learning-rate
# scheduler, sampler position mid-epoch, every rank's dropout generator, extra entries) ends
# bit-identical to a run that never stopped, on every rank. Loaded after DistributedDataParallel
# is constructed, the order PyTorch users use.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"

"$DDPRUN" --nproc_per_node=2 "$RANK_DRIVER" resume "$T" 20 8 >"$T/full.out" 2>&1 \
  || { cat "$T/full.out"; fail "uninterrupted run"; }
[[ -f "$T/checkpoint-000000008.pt" ]] || fail "no checkpoint after step 8: $(ls "$T")"
# Temp files of writers killed during a save: this host's dead writer's (the new name and the
# old one without a host) go at the next start; a live writer's and another host's stay.
host=$(cat /proc/sys/kernel/hostname)
dead=$(bash -c 'echo $$')
touch "$T/.checkpoint-000000004.pt.tmp.$host.$dead" "$T/.checkpoint-000000005.pt.tmp.$dead" \
      "$T/.checkpoint-000000006.pt.tmp.$host.$$" "$T/.checkpoint-000000007.pt.tmp.other-host.$dead"
"$DDPRUN" --nproc_per_node=2 "$RANK_DRIVER" resume "$T" 20 8 LOAD >"$T/resumed.out" 2>&1 \
  || { cat "$T/resumed.out"; fail "resumed run"; }
for r in 0 1; do
  cmp -s "$T/params.$r" "$T/params.$r.resumed" || fail "rank $r: the resumed run ends with other parameters"
  expect_in "$T/restored.$r" "^step 8$"
  expect_in "$T/restored.$r" "^config lr=0.05$"
  expect_in "$T/restored.$r" "^best_loss 0\.[0-9]+$"
  expect_in "$T/restored.$r" "^lr 0\.0125$"
done
[[ ! -e "$T/.checkpoint-000000004.pt.tmp.$host.$dead" && ! -e "$T/.checkpoint-000000005.pt.tmp.$dead" ]] \
  || fail "stale checkpoint temp files of a dead writer were kept: $(ls -a "$T" | grep tmp)"
[[ -e "$T/.checkpoint-000000006.pt.tmp.$host.$$" && -e "$T/.checkpoint-000000007.pt.tmp.other-host.$dead" ]] \
  || fail "a live writer's or another host's temp file was removed"
ok "stale checkpoint temp files of dead writers removed at start-up; a live writer's and another host's kept"
ok "resumed at step 8 of 20: bit-identical to the uninterrupted run on both ranks; extra entries and learning rate restored"
