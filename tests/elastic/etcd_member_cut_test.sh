#!/usr/bin/env bash
# A node cut off from one etcd member of three, not from etcd (issue 43), on hosts in network
# namespaces (root, nft and etcd; skipped without): a on h1 and b on h2 run a 2-node job whose
# rendezvous is in etcd, members on h3, h4, h5; b is cut off from h3 both ways for longer than its
# lease (heartbeat_timeout 3 s), then healed. b's lease is kept alive through the two members it
# still reaches, so b must not fence, the job must not re-form, and it ends 0 once released; the
# split-brain checker over both nodes' histories. Each member takes its turn as the one cut off.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
source "$DDPRUN_TESTS_DIR/elastic/netfault.sh"
source "$DDPRUN_TESTS_DIR/elastic/nodes.sh"  # finish_within, show
command -v etcd >/dev/null || skip "needs etcd (scripts/install-deps.sh installs it)"
netfault_up 5
nf_etcd 3 4 5

worker life <<'SH'
#!/bin/sh
printf '{"what":"start","rank":%s,"pid":%s,"restart":%s,"real":%s,"mono":0}\n' "$RANK" $$ "$TORCHELASTIC_RESTART_COUNT" "$(date +%s.%N)" >> "$RUN/rec.$NF_NODE"
while [ ! -e "$RUN/release" ]; do sleep 0.1; done
printf '{"what":"done","rank":%s,"pid":%s,"restart":%s,"real":%s,"mono":0}\n' "$RANK" $$ "$TORCHELASTIC_RESTART_COUNT" "$(date +%s.%N)" >> "$RUN/rec.$NF_NODE"
SH
started() { [[ $(cat "$RUN"/rec.* 2>/dev/null | grep -c '"start"') -ge 4 ]]; }

for member in 3 4 5; do
  export RUN=$T/run.$member
  mkdir -p "$RUN"
  job=(--nnodes=2 --nproc_per_node=2 --rdzv_backend=etcd --rdzv_endpoint="$NF_ETCD" --rdzv_id="cut$member"
       --rdzv_conf=heartbeat_timeout=3,join_timeout=60)
  NF_NODE=a nf_on 1 a "${job[@]}" --event_log="$RUN/a.events" "$T/life"
  NF_NODE=b nf_on 2 b "${job[@]}" --event_log="$RUN/b.events" "$T/life"
  wait_for 60 started
  nf_cut 2 "$member"
  ! nf_reaches 2 "$member" || fail "h2 still reaches h$member through the cut"
  nf_reaches 2 $(( member == 3 ? 4 : 3 )) || fail "h2 lost another member too"
  # Past b's lease and its fence (2.4 s after its last renewal), with room for a renewal's tries.
  sleep 8
  nf_uncut 2 "$member"
  touch "$RUN/release"
  finish_within 60 a; finish_within 60 b
  expect_eq "$RC_a $RC_b" "0 0" "a and b, b cut off from etcd member h$member only ($(show a b))"
  expect_not_in "$T/b.err" "fenc"
  expect_not_in "$T/a.err" "stopping workers"
  python3 "$DDPRUN_TESTS_DIR/elastic/split_brain_check.py" --expect-success \
    --node a "$RUN/a.events" "$RUN/rec.a" --node b "$RUN/b.events" "$RUN/rec.b"
  ok "b cut off from etcd member h$member of 3 for 8 s: no fence, no new round, the job ended 0"
done
