#!/usr/bin/env bash
# The listen queues that thousands of ranks and nodes connect to at once, the workers' store
# (MASTER_PORT) and the TCP rendezvous host, are as long as net.core.somaxconn allows: asio's
# default, glibc's SOMAXCONN, is 4096, and a cluster that raises somaxconn for a large job must
# get its longer queue (issue 44). In a network namespace of the test's own, with somaxconn 16384.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
[[ $(id -u) == 0 ]] && command -v unshare >/dev/null && command -v ss >/dev/null || skip "needs root, unshare and ss"
cat >"$T/inside.sh" <<'SH'
#!/bin/bash
set -euo pipefail
ip link set lo up
sysctl -qw net.core.somaxconn=16384
printf '#!/bin/sh\necho "$MASTER_PORT" > "$T/port.tmp" && mv "$T/port.tmp" "$T/port"\nexec sleep 600\n' >"$T/worker"
chmod +x "$T/worker"
"$DDPRUN" --nnodes=1:2 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:29555 --rdzv_id=backlog \
  --rdzv_conf=last_call_timeout=0.1 \
  "$T/worker" >"$T/ddprun.out" 2>"$T/ddprun.err" &
for _ in $(seq 600); do [[ -s $T/port ]] && break; sleep 0.1; done
[[ -s $T/port ]] || { cat "$T/ddprun.err"; echo "FAIL: the worker did not start" >&2; exit 1; }
# The Send-Q column of a listening socket is its backlog.
echo "rendezvous $(ss -Hltn "sport = :29555" | awk '{print $3}')"
echo "store $(ss -Hltn "sport = :$(cat "$T/port")" | awk '{print $3}')"
kill %1
wait %1 || true
SH
chmod +x "$T/inside.sh"
unshare -n "$T/inside.sh" >"$T/backlogs" || fail "the run in its network namespace failed"
expect_eq "$(grep '^rendezvous' "$T/backlogs")" "rendezvous 16384" "the rendezvous host's listen backlog"
expect_eq "$(grep '^store' "$T/backlogs")" "store 16384" "the workers' store's listen backlog"
ok "the rendezvous host's and the store's listen queues are somaxconn's 16384, not SOMAXCONN's 4096"
