#!/usr/bin/env bash
# torchrun habits that must work unchanged (issue 59): --rdzv_conf as torchrun 2.11 splits it
# (quotes no shell removed, keys ddprun does not use), --tee winning over --redirects, the console
# prefix's template (TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE, --log_line_prefix), an unused
# rendezvous endpoint said aloud, and a node whose workers are done saying that it waits.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"

worker toucher <<'SH'
#!/bin/sh
echo "out $RANK"
echo "err $RANK" >&2
touch "$T/touched.$RANK"
SH

# 1. PyTorch's test_run.py test_launch_elastic, as it passes the option: the quotes stay in the
#    first key and the last value (torchrun reads them so): both are named, neither refused.
port=$(free_tcp_port)
run_ddprun elastic --nnodes=1:2 --nproc-per-node=2 --rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:$port \
  "--rdzv-conf='join_timeout=5,last_call_timeout=1,timeout=5'" --rdzv-id=job59 --monitor-interval=1 \
  --start-method=spawn "$T/toucher"
expect_eq "$RC" 0 "test_launch_elastic's command line"
[[ -f $T/touched.0 && -f $T/touched.1 ]] || fail "the two workers did not both run"
expect_in "$T/elastic.err" "^ddprun: --rdzv_conf ''join_timeout' is not a key ddprun reads \(a quote is part of it, as torchrun reads it: no shell removed it\); accepted, not used \(ddprun's keys: join_timeout, .*password_file\)$"
expect_in "$T/elastic.err" "^ddprun: --rdzv_conf timeout=5' is not a number of seconds .*; the c10d backend does not read it in torchrun, so ddprun does not either \(join_timeout stays 600 s\)$"
ok "--rdzv-conf='join_timeout=5,last_call_timeout=1,timeout=5' runs, each quoted item named"

# 2. torchrun's etcd key, and an etcd endpoint a one-node job does not use: one line each, at the start.
rm -f "$T"/touched.*
run_ddprun etcd --rdzv-backend=etcd --rdzv-endpoint=localhost:1 --nnodes=1 \
  --rdzv-conf=etcd_prefix=/torchelastic/p2p,use_libuv=1,read_timeout=60,colour=red "$T/toucher"
expect_eq "$RC" 0 "one node with an etcd endpoint"
expect_in "$T/etcd.err" "^ddprun: --rdzv_endpoint=localhost:1 is not used: --nnodes=1 is one node, which needs no etcd rendezvous \(torchrun would contact it\)$"
expect_in "$T/etcd.err" "^ddprun: --rdzv_conf etcd_prefix is where torchrun's etcd backend keeps its keys; .*accepted, not used$"
expect_in "$T/etcd.err" "^ddprun: --rdzv_conf use_libuv configures torchrun's own store"
expect_in "$T/etcd.err" "^ddprun: --rdzv_conf 'colour' is not a key ddprun reads; accepted, not used"
expect_eq "$(head -c 7 "$T/etcd.err")" "ddprun:" "the notes come first"
run_ddprun c10d_one --rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:29999 --nnodes=1 "$T/toucher"
expect_eq "$RC" 0 "one node with a c10d endpoint"
expect_in "$T/c10d_one.err" "^ddprun: --rdzv_endpoint=127.0.0.1:29999 is not used"
run_ddprun standalone --standalone "$T/toucher"
expect_not_in "$T/standalone.err" "is not used"
# A key of ddprun's own with a bad value is still refused, with one line.
run_ddprun spares --rdzv-conf=colour=red,spares=x "$T/toucher"
expect_eq "$RC" 64 "a bad value of a key of ddprun's"
expect_eq "$(wc -l < "$T/spares.err")" 1 "one line ($(cat "$T/spares.err"))"
expect_in "$T/spares.err" "^ddprun: error: --rdzv_conf spares=x: expected a whole number, 0 or more$"
ok "etcd_prefix and other keys named, the unused endpoint said; ddprun's own keys still checked"

# 3. --tee wins over --redirects for the streams it names, as in torchrun (files and console).
run_ddprun tee3 --nproc_per_node=2 --redirects=3 --tee=3 --log_dir "$T/logs3" "$T/toucher"
expect_eq "$RC" 0 "--redirects=3 --tee=3"
expect_in "$T/tee3.out" '^\[rank1\]: out 1$'
expect_in "$T/tee3.err" '^\[rank0\]: err 0$'
dir=$(run_dir "$T/logs3")
expect_in "$dir/attempt_0/rank_1/stdout.log" '^out 1$'
expect_in "$dir/attempt_0/rank_0/stderr.log" '^err 0$'
run_ddprun tee2 --nproc_per_node=2 --redirects=3 --tee=2 --log_dir "$T/logs2" "$T/toucher"
expect_eq "$RC" 0 "--redirects=3 --tee=2"
expect_not_in "$T/tee2.out" 'out'
expect_in "$T/tee2.err" '^\[rank1\]: err 1$'
expect_in "$(run_dir "$T/logs2")/attempt_0/rank_1/stdout.log" '^out 1$'
source "$DDPRUN_SOURCE_DIR/scripts/torch2-env.sh"
if [[ -x "$TORCH2_VENV/bin/torchrun" ]]; then
  # The same with torchrun 2.11: the console has what --tee names.
  set +e
  PATH="$TORCH2_VENV/bin:$PATH" "$TORCH2_VENV/bin/torchrun" --nproc-per-node=2 --redirects=3 --tee=2 \
    --log-dir "$T/tlogs" --no-python "$T/toucher" >"$T/torchrun.out" 2>"$T/torchrun.err"
  trc=$?
  set -e
  expect_eq "$trc" 0 "torchrun --redirects=3 --tee=2"
  expect_not_in "$T/torchrun.out" 'out [01]'
  expect_in "$T/torchrun.err" 'err 1$'
  ok "--tee wins over --redirects for its streams, as torchrun 2.11 (compared with its torchrun)"
else
  ok "--tee wins over --redirects for its streams (torchrun 2.11 not installed: not compared)"
fi

# 4. The console prefix: torchrun's variable, ddprun's option (command line, PET_, --config);
#    the failure summary names the rank whatever the console shows.
TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE='[${role_name}-${local_rank}] ' run_ddprun tmpl --nproc_per_node=2 \
  --role=trainer "$T/toucher"
expect_eq "$RC" 0 "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"
expect_in "$T/tmpl.out" '^\[trainer-1\] out 1$'
expect_in "$T/tmpl.err" '^\[trainer-0\] err 0$'
TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE='[x] ' run_ddprun none --nproc_per_node=2 --log_line_prefix= "$T/toucher"
expect_eq "$RC" 0 "--log_line_prefix="
expect_eq "$(sort "$T/none.out" | tr '\n' ' ')" "out 0 out 1 " "lines without a prefix"
PET_LOG_LINE_PREFIX='<$rank> ' run_ddprun pet --nproc_per_node=2 "$T/toucher"
expect_in "$T/pet.out" '^<1> out 1$'
echo '{"log_line_prefix": "r${rank}/${local_rank}|"}' >"$T/prefix.json"
run_ddprun file --nproc_per_node=2 --config "$T/prefix.json" "$T/toucher"
expect_in "$T/file.out" '^r1/1\|out 1$'
run_ddprun badprefix --log_line_prefix=$'a\tb' "$T/toucher"
expect_eq "$RC" 64 "a control character in the template"
expect_in "$T/badprefix.err" '^ddprun: error: --log_line_prefix=a\?b: a control character; expected a template'
worker failing <<'SH'
#!/bin/sh
echo "last words of $RANK" >&2
[ "$RANK" = 1 ] && exit 7
sleep 30
SH
run_ddprun failing --nproc_per_node=2 --log_line_prefix= "$T/failing"
expect_eq "$RC" 7 "a failing rank"
expect_in "$T/failing.err" '^last words of 1$'
expect_in "$T/failing.err" 'rank 1'
ok "the prefix from TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE, --log_line_prefix, PET_ and --config; none; the summary names the rank"

# 5. A node whose workers are done says that it waits, once, and /status shows it.
worker waiter <<'SH'
#!/bin/sh
[ "$GROUP_RANK" = 0 ] || exit 0
while [ ! -f "$T/release" ]; do sleep 0.05; done
SH
master=$(free_tcp_port)
common=(--nnodes=2 --nproc_per_node=1 --master_addr=127.0.0.2 --master_port=$master --status_port=0)
"$DDPRUN" --local_addr=127.0.0.3 "${common[@]}" --node_rank=1 "$T/waiter" >"$T/n1.out" 2>"$T/n1.err" &
pid_1=$!
"$DDPRUN" --local_addr=127.0.0.2 "${common[@]}" --node_rank=0 "$T/waiter" >"$T/n0.out" 2>"$T/n0.err" &
pid_0=$!
url_1=$(status_url "$T/n1.err")
wait_for 60 grep -q "workers are done" "$T/n1.err"
expect_in "$T/n1.err" "^ddprun: this node's workers are done \(round [0-9]+\); waiting for the other 1 node of the round \(group rank 0\) to finish theirs$"
python3 - "$url_1" <<'PY' || { touch "$T/release"; fail "node 1's /status while it waits"; }
import json, sys, urllib.request
s = json.load(urllib.request.urlopen(sys.argv[1] + "/status"))
assert s["waiting_for_nodes"] == [0] and s["phase"] == "waiting", s
PY
"$DDPRUN" status "$url_1" >"$T/status1.out" 2>&1 || { touch "$T/release"; fail "ddprun status"; }
expect_in "$T/status1.out" '^done: [^ ]+ \(1 of 2\): its workers finished; waiting for 1 node \(0\)$'
touch "$T/release"
rc_0=0; wait $pid_0 || rc_0=$?
rc_1=0; wait $pid_1 || rc_1=$?
expect_eq "$rc_0/$rc_1" 0/0 "exit codes of the two nodes"
expect_eq "$(grep -c "workers are done" "$T/n1.err")" 1 "said once"
ok "a node whose workers are done says it waits for node 0, and /status and ddprun status show it"
