#!/usr/bin/env bash
# torchrun 2.11 and ddprun in one job (issue 29, item 5): not supported, but each side says what
# happened within seconds. (a) A torchrun node pointed at a ddprun rendezvous host gets the
# answer to its TCPStore ping and fails on its first query, without retrying until its timeout;
# the host says so once, and its job then runs with a real ddprun node. (b) A ddprun node
# pointed at torchrun's rendezvous (its TCPStore, silent to a ddprun node) asks it two pings,
# says "the endpoint is a torchrun rendezvous, not ddprun's" and exits 69.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
source "$DDPRUN_SOURCE_DIR/scripts/torch2-env.sh"
torchrun=$TORCH2_VENV/bin/torchrun
[[ -x $torchrun ]] || skip "no torchrun at $torchrun (the PyTorch 2.x environment of scripts/install-deps.sh --torch2)"
source "$DDPRUN_TESTS_DIR/elastic/nodes.sh"

worker dump <<'SH'
#!/bin/sh
echo "$RANK $WORLD_SIZE" > "$T/env.$RANK"
SH
listening() { [[ -n $(ss -Hltn "sport = :$port") ]]; }

# (a) torchrun -> ddprun's host.
next_port
job=(--nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.2:$port --rdzv_id=mixed)
node 127.0.0.2 a "${job[@]}" "$T/dump"
wait_for 20 listening
rc=0
timeout 120 "$torchrun" "${job[@]}" /bin/true > "$T/torchrun.out" 2>&1 || rc=$?
(( rc != 0 && rc != 124 )) || fail "torchrun against ddprun's host: exit $rc ($(tail -5 "$T/torchrun.out"))"
expect_in "$T/torchrun.out" "RendezvousConnectionError: The connection to the C10d store has failed"
# The slow path answered nothing (or the wrong nonce): torchrun retried for its whole timeout.
expect_not_in "$T/torchrun.out" "retrying|Ping failed"
node 127.0.0.3 b "${job[@]}" "$T/dump"
finish_within 60 a; finish_within 60 b
expect_eq "$RC_a $RC_b" "0 0" "the ddprun job after the torchrun node ($(show a b))"
expect_eq "$(cat "$T"/env.* | sort | tr '\n' ' ')" "0 2 1 2 " "ranks of the ddprun job"
expect_eq "$(grep -c "a torchrun node (a PyTorch TCPStore client) at 127.0.0.[0-9]*:[0-9]* reached this ddprun rendezvous and was turned away" "$T/a.err")" 1 \
  "the host's lines about the torchrun node ($(show a))"
ok "torchrun 2.11 against a ddprun host fails on its first query ($(grep -m1 -o 'RendezvousConnectionError: [^.]*' "$T/torchrun.out")); the host says so once; the job runs"

# (b) ddprun -> torchrun's rendezvous.
next_port
"$torchrun" --nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.2:$port --rdzv_id=mixed2 \
  /bin/true > "$T/torchrun-host.out" 2>&1 &
torchrun_host=$!
wait_for 120 listening
node 127.0.0.3 c --nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.2:$port --rdzv_id=mixed2 \
  "$T/dump"
finish_within 60 c
kill "$torchrun_host"; wait "$torchrun_host" || true
expect_eq "$RC_c" 69 "ddprun against torchrun's rendezvous ($(show c))"
expect_in "$T/c.err" "the endpoint is a torchrun rendezvous, not ddprun's: 127.0.0.2:$port answers as PyTorch's TCPStore"
ok "a ddprun node against torchrun's rendezvous exits 69: $(grep -m1 -o 'the endpoint is a torchrun rendezvous[^:]*' "$T/c.err")"

wait_for 10 no_leftovers
