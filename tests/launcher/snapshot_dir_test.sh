#!/usr/bin/env bash
# DDPRUN_SNAPSHOT_DIR (issue 57): a folder in memory that the workers' checkpoints survive in, across
# a worker's SIGKILL and the restart; removed after a success, kept after a failure (path in the
# summary, the result file and the event log) and by --snapshot_keep, found again by a rerun of the
# same run id; --snapshot_dir_size a real cap (ENOSPC) where ddprun may mount a tmpfs; refused in
# one line where the path is not ddprun's; none with --snapshot=off.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"

uid=$(id -u)
if [[ $(stat -f -c %T /dev/shm 2>/dev/null) == tmpfs && -w /dev/shm ]]; then parent=/dev/shm; else parent=${TMPDIR:-/tmp}; fi
id_base="snaptest-$(basename "$T")"
# folder ID: where ddprun puts the snapshot folder of run id ID.
folder() { echo "$parent/ddprun-snapshots.$uid.$1"; }
# The folders this test makes outside $T go with it, mounted or not.
trap 'rc=$?; for d in "$parent"/ddprun-snapshots.{"$uid",65534}."$id_base"*; do
        [[ -e $d ]] || continue; umount -l "$d" 2>/dev/null || true; rm -rf "$d"; done; cleanup $rc' EXIT

# A checkpoint written to a temporary name and renamed, then the writer SIGKILLed: the restarted
# worker reads it back from the same folder.
worker resume <<'SH'
#!/bin/sh
echo "$DDPRUN_SNAPSHOT_DIR" > "$T/dir.$RANK.$TORCHELASTIC_RESTART_COUNT"
if [ "$RANK" = 0 ] && [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then
  echo "step 42" > "$DDPRUN_SNAPSHOT_DIR/ckpt.tmp"
  mv "$DDPRUN_SNAPSHOT_DIR/ckpt.tmp" "$DDPRUN_SNAPSHOT_DIR/ckpt"
  stat -c %a "$DDPRUN_SNAPSHOT_DIR" > "$T/mode"
  kill -KILL $$
fi
[ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && exec sleep 30  # rank 1, until the stop
cat "$DDPRUN_SNAPSHOT_DIR/ckpt" > "$T/read.$RANK"
SH
id="$id_base-resume"
run_ddprun resume --nproc_per_node=2 --max_restarts=1 --restart_backoff_max=0 --rdzv_id="$id" "$T/resume"
expect_eq "$RC" 0 "SIGKILL, restart, success"
expect_in "$T/resume.err" "rank 0 \(local rank 0\) failed: .*SIGKILL"
expect_eq "$(cat "$T/dir.0.0")" "$(folder "$id")" "the folder's path (rank 0, first start)"
for f in "$T"/dir.*; do expect_eq "$(cat "$f")" "$(folder "$id")" "the folder in $(basename "$f")"; done
expect_eq "$(cat "$T/read.0")" "step 42" "rank 0 read back what it wrote before its SIGKILL"
expect_eq "$(cat "$T/read.1")" "step 42" "rank 1 read it too"
expect_eq "$(cat "$T/mode")" 700 "the folder's mode"
[[ ! -e $(folder "$id") ]] || fail "the folder is still there after the job succeeded"
expect_not_in "$T/resume.err" "snapshot"
ok "a checkpoint survives a worker's SIGKILL into the restart; the folder (0700, $parent) is gone after the success"

# A failure keeps it, and says where; a rerun of the same run id finds it and says so.
worker fails <<'SH'
#!/bin/sh
if [ -f "$DDPRUN_SNAPSHOT_DIR/ckpt" ]; then cat "$DDPRUN_SNAPSHOT_DIR/ckpt" > "$T/found"; exit 0; fi
printf 'step 7' > "$DDPRUN_SNAPSHOT_DIR/ckpt.tmp" && mv "$DDPRUN_SNAPSHOT_DIR/ckpt.tmp" "$DDPRUN_SNAPSHOT_DIR/ckpt"
exit 3
SH
id="$id_base-kept"
dir=$(folder "$id")
run_ddprun kept --rdzv_id="$id" --result_file="$T/kept.json" --event_log="$T/kept.jsonl" "$T/fails"
expect_eq "$RC" 3 "the failure's exit code"
[[ -f $dir/ckpt ]] || fail "the folder was not kept after the failure: $(ls -la "$parent" | grep snaptest || true)"
expect_in "$T/kept.err" "^ddprun: snapshots kept in $dir \(1 file, 6 B\) for a rerun of job $id on this node"
expect_eq "$(json_field "$T/kept.json" '["snapshot_dir"]')" "$dir" "the result file's snapshot_dir"
expect_eq "$(events "$T/kept.jsonl" exit snapshot_dir)" "$dir" "the exit event's snapshot_dir"
run_ddprun rerun --rdzv_id="$id" --result_file="$T/rerun.json" "$T/fails"
expect_eq "$RC" 0 "the rerun"
expect_eq "$(cat "$T/found")" "step 7" "what the rerun's worker found"
expect_in "$T/rerun.err" "^ddprun: DDPRUN_SNAPSHOT_DIR=$dir holds what an earlier run of job $id kept there \(1 file, 6 B\)"
[[ ! -e $dir ]] || fail "the folder is still there after the rerun succeeded"
expect_eq "$(json_field "$T/rerun.json" '["snapshot_dir"]')" "None" "the rerun's result file's snapshot_dir"
ok "a failure keeps the folder (summary, result file, event log); a rerun of the run id resumes from it, then removes it"

# An empty folder is not kept: nothing for a rerun to find.
worker empty_fail <<'SH'
#!/bin/sh
echo "$DDPRUN_SNAPSHOT_DIR" > "$T/empty_dir"
exit 4
SH
id="$id_base-empty"
run_ddprun empty --rdzv_id="$id" --result_file="$T/empty.json" "$T/empty_fail"
expect_eq "$RC" 4 "an empty folder's failure"
expect_eq "$(cat "$T/empty_dir")" "$(folder "$id")" "the empty folder's path"
[[ ! -e $(folder "$id") ]] || fail "an empty folder was kept"
expect_not_in "$T/empty.err" "snapshots kept"
expect_eq "$(json_field "$T/empty.json" '["snapshot_dir"]')" "None" "snapshot_dir of an empty folder"
ok "an empty folder is removed after a failure too, and nothing is said"

# --snapshot_keep: kept after a success too; also from PET_SNAPSHOT_KEEP and --config.
worker writes <<'SH'
#!/bin/sh
echo x > "$DDPRUN_SNAPSHOT_DIR/f.$RANK"
SH
id="$id_base-keep"
run_ddprun keep --snapshot-keep --rdzv_id="$id" "$T/writes"
expect_eq "$RC" 0 "--snapshot-keep"
[[ -f $(folder "$id")/f.0 ]] || fail "--snapshot_keep did not keep the folder"
expect_in "$T/keep.err" "snapshots kept in $(folder "$id") \(1 file, 2 B\)"
rm -rf "$(folder "$id")"
id="$id_base-keepenv"
PET_SNAPSHOT_KEEP=1 run_ddprun keepenv --rdzv_id="$id" "$T/writes"
[[ -f $(folder "$id")/f.0 ]] || fail "PET_SNAPSHOT_KEEP=1 did not keep the folder"
rm -rf "$(folder "$id")"
id="$id_base-keepconf"
echo '{"snapshot_keep": true, "rdzv_id": "'"$id"'"}' > "$T/keep.json"
run_ddprun keepconf --config "$T/keep.json" "$T/writes"
[[ -f $(folder "$id")/f.0 ]] || fail "--config's snapshot_keep did not keep the folder"
rm -rf "$(folder "$id")"
ok "--snapshot_keep (and PET_SNAPSHOT_KEEP, --config) keeps it after a success"

# --snapshot=off: no variable (not even an inherited one), no folder.
worker env_of <<'SH'
#!/bin/sh
echo "${DDPRUN_SNAPSHOT_DIR-unset}" > "$T/off.$RANK"
SH
id="$id_base-off"
DDPRUN_SNAPSHOT_DIR=/dev/shm/outer run_ddprun off --snapshot=off --nproc_per_node=2 --rdzv_id="$id" "$T/env_of"
expect_eq "$RC" 0 "--snapshot=off"
expect_eq "$(cat "$T/off.0") $(cat "$T/off.1")" "unset unset" "DDPRUN_SNAPSHOT_DIR with --snapshot=off"
[[ ! -e $(folder "$id") ]] || fail "--snapshot=off made a folder"
PET_SNAPSHOT=off run_ddprun offenv --rdzv_id="$id" "$T/env_of"
expect_eq "$(cat "$T/off.0")" unset "DDPRUN_SNAPSHOT_DIR with PET_SNAPSHOT=off"
ok "--snapshot=off (and PET_SNAPSHOT=off): no DDPRUN_SNAPSHOT_DIR, no folder"

# Bad sizes: one line naming the flag and what it accepts, exit 64, nothing started.
for bad in 4GB 1.5G 4 lots; do
  run_ddprun badsize --snapshot_dir_size="$bad" --rdzv_id="$id_base-bad" "$T/writes"
  expect_eq "$RC" 64 "--snapshot_dir_size=$bad"
  expect_eq "$(wc -l < "$T/badsize.err")" 1 "lines said for --snapshot_dir_size=$bad"
  expect_in "$T/badsize.err" "^ddprun: error: --snapshot_dir_size=$bad: expected a size such as 512M or 4G"
  [[ ! -e $(folder "$id_base-bad") ]] || fail "a bad size made the folder"
done
ok "a bad --snapshot_dir_size: one line, exit 64, nothing made"

# What is already at the path and not ddprun's to use: refused in one line, nothing started.
refused() {  # refused NAME PATTERN: ddprun refused the path with PATTERN, and no worker ran
  expect_eq "$RC" 64 "$1"
  expect_eq "$(wc -l < "$T/$1.err")" 1 "lines said for $1"
  expect_in "$T/$1.err" "^ddprun: error: snapshot folder $(folder "$id") $2"
  [[ ! -e $T/ran ]] || fail "$1: a worker ran"
}
worker marks <<'SH'
#!/bin/sh
touch "$T/ran"
SH
id="$id_base-link"
mkdir "$T/elsewhere"
ln -s "$T/elsewhere" "$(folder "$id")"
run_ddprun link --rdzv_id="$id" "$T/marks"
refused link "is a symbolic link"
rm "$(folder "$id")"
id="$id_base-open"
mkdir -m 755 "$(folder "$id")"
run_ddprun open --rdzv_id="$id" "$T/marks"
refused open "is open to other users \(mode 0755, not 0700\)"
rmdir "$(folder "$id")"
if [[ $uid == 0 ]]; then
  id="$id_base-other"
  mkdir -m 700 "$(folder "$id")"
  chown 65534 "$(folder "$id")"
  run_ddprun other --rdzv_id="$id" "$T/marks"
  refused other "belongs to user 65534, not to user 0"
  rmdir "$(folder "$id")"
  ok "refused in one line, nothing started: a symbolic link, a folder open to others, another user's folder"
else
  ok "refused in one line, nothing started: a symbolic link, a folder open to others (another user's: needs root to make, not checked)"
fi

# --snapshot_dir_size: a tmpfs of its own where ddprun may mount one (a write past it: ENOSPC, and
# the job goes on), else one line saying it is not enforced.
worker fill <<'SH'
#!/bin/sh
head -c 262144 /dev/zero > "$DDPRUN_SNAPSHOT_DIR/small" && echo small-ok > "$T/small"
head -c 2097152 /dev/zero > "$DDPRUN_SNAPSHOT_DIR/big" 2> "$T/big.err" || echo big-failed > "$T/big"
grep " $DDPRUN_SNAPSHOT_DIR " /proc/self/mounts > "$T/mount" || true
SH
id="$id_base-cap"
run_ddprun cap --snapshot_dir_size=1M --rdzv_id="$id" "$T/fill"
expect_eq "$RC" 0 "the capped job"
expect_eq "$(cat "$T/small")" small-ok "a write within the cap"
if grep -q "is not enforced" "$T/cap.err"; then
  expect_eq "$(wc -l < "$T/cap.err")" 1 "lines said for a cap that is not enforced"
  expect_in "$T/cap.err" "^ddprun: --snapshot_dir_size \(1.0 MiB\) is not enforced: mounting a tmpfs of that size needs root"
  echo "SKIPPED (visibly): the cap's ENOSPC: ddprun may not mount a tmpfs here ($(cat "$T/cap.err"))"
  ok "--snapshot_dir_size where it cannot be enforced: one line says so"
else
  expect_eq "$(cat "$T/big")" big-failed "a write past the cap"
  expect_in "$T/big.err" "No space left on device"
  expect_in "$T/mount" "^tmpfs $(folder "$id") tmpfs .*size=1024k"
  [[ ! -e $(folder "$id") ]] || fail "the capped folder is still there after the success"
  grep -q " $(folder "$id") " /proc/self/mounts && fail "the capped folder's tmpfs is still mounted"
  expect_eq "$(wc -c < "$T/cap.err")" 0 "what a capped job says"
  ok "--snapshot_dir_size=1M: its own tmpfs, a write past it fails with ENOSPC, unmounted and removed after the success"
  # A failure keeps the tmpfs with its files; the rerun finds it, resized to its own --snapshot_dir_size.
  worker capfail <<'SH'
#!/bin/sh
grep " $DDPRUN_SNAPSHOT_DIR " /proc/self/mounts > "$T/capmount.$TORCHELASTIC_RUN_ID.$$" || true
if [ -f "$DDPRUN_SNAPSHOT_DIR/ckpt" ]; then cat "$DDPRUN_SNAPSHOT_DIR/ckpt" > "$T/capfound"; exit 0; fi
echo kept > "$DDPRUN_SNAPSHOT_DIR/ckpt"
exit 5
SH
  id="$id_base-capkept"
  run_ddprun capkept --snapshot_dir_size=1M --rdzv_id="$id" "$T/capfail"
  expect_eq "$RC" 5 "the capped job's failure"
  grep -q "^tmpfs $(folder "$id") tmpfs .*size=1024k" /proc/self/mounts || fail "the kept folder's tmpfs is not mounted"
  run_ddprun caprerun --snapshot_dir_size=2M --rdzv_id="$id" "$T/capfail"
  expect_eq "$RC" 0 "the capped rerun"
  expect_eq "$(cat "$T/capfound")" kept "what the capped rerun found"
  cat "$T"/capmount."$id".* > "$T/capmounts"
  expect_in "$T/capmounts" "size=2048k"
  grep -q " $(folder "$id") " /proc/self/mounts && fail "the rerun left the tmpfs mounted"
  [[ ! -e $(folder "$id") ]] || fail "the rerun left the folder"
  ok "a failure keeps the capped folder's tmpfs; the rerun finds its files in it, resized, then unmounts and removes it"
fi

# Two ddprun of one job on one machine share the folder; the last to end removes it.
worker long <<'SH'
#!/bin/sh
echo "$DDPRUN_SNAPSHOT_DIR" > "$T/long_dir"
while [ ! -f "$T/short_done" ]; do sleep 0.05; done
echo later > "$DDPRUN_SNAPSHOT_DIR/later" && echo wrote > "$T/long_wrote"
SH
id="$id_base-shared"
"$DDPRUN" --rdzv_id="$id" "$T/long" >"$T/long.out" 2>"$T/long.err" &
long_pid=$!
wait_for 30 test -s "$T/long_dir"
run_ddprun short --rdzv_id="$id" "$T/writes"
expect_eq "$RC" 0 "the short ddprun"
[[ -f $(folder "$id")/f.0 ]] || fail "the first ddprun to end removed the folder the other still uses"
touch "$T/short_done"
wait "$long_pid" || fail "the long ddprun failed: $(cat "$T/long.err")"
expect_eq "$(cat "$T/long_wrote")" wrote "the long ddprun's write after the short one ended"
[[ ! -e $(folder "$id") ]] || fail "the last ddprun to end left the folder"
ok "two ddprun of one run id on one machine share the folder; the last to end removes it"

# The folders that ddprun processes killed by SIGKILL left: the next ddprun's guard removes the empty
# ones that have not changed for a minute; one with files stays for a requeue, a new one for its ddprun.
for kind in stale-empty stale-files fresh-empty; do mkdir -m 700 "$(folder "$id_base-$kind")"; done
echo x > "$(folder "$id_base-stale-files")/ckpt"
touch -d '2 minutes ago' "$(folder "$id_base-stale-empty")" "$(folder "$id_base-stale-files")"
run_ddprun stale --rdzv_id="$id_base-stale-run" "$T/writes"
expect_eq "$RC" 0 "the run whose guard removes stale folders"
wait_for 10 test ! -e "$(folder "$id_base-stale-empty")"
[[ -f $(folder "$id_base-stale-files")/ckpt ]] || fail "a stale folder with files was removed"
[[ -d $(folder "$id_base-fresh-empty") ]] || fail "an empty folder younger than a minute was removed"
ok "an empty snapshot folder left by a killed ddprun goes with the next ddprun's start; one with files stays"

# An ordinary user: the cap is not enforced, and one line says so and why.
if [[ $uid == 0 ]] && command -v setpriv >/dev/null && setpriv --reuid=65534 --regid=65534 --clear-groups test -x "$DDPRUN"; then
  id="$id_base-user"
  set +e
  setpriv --reuid=65534 --regid=65534 --clear-groups env -i PATH=/usr/bin:/bin "$DDPRUN" --snapshot_dir_size=1M \
    --rdzv_id="$id" sh -c 'stat -c "%U %a" "$DDPRUN_SNAPSHOT_DIR"' >"$T/user.out" 2>"$T/user.err"
  RC=$?
  set -e
  expect_eq "$RC" 0 "an ordinary user's capped job"
  expect_in "$T/user.out" "$(getent passwd 65534 | cut -d: -f1) 700$"
  expect_eq "$(wc -l < "$T/user.err")" 1 "lines said for an ordinary user's cap"
  expect_in "$T/user.err" "^ddprun: --snapshot_dir_size \(1.0 MiB\) is not enforced: mounting a tmpfs of that size needs root \(CAP_SYS_ADMIN\) here \(Operation not permitted\); DDPRUN_SNAPSHOT_DIR shares $parent \(.*\) with the machine$"
  [[ ! -e $parent/ddprun-snapshots.65534.$id ]] || fail "an ordinary user's empty folder was kept"
  ok "an ordinary user (uid 65534): its own 0700 folder; the cap said not to be enforced, in one line"
else
  echo "SKIPPED (visibly): an ordinary user's run: needs root and setpriv to become uid 65534"
fi
wait_for 10 no_leftovers
