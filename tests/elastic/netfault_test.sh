#!/usr/bin/env bash
# The fault injector (netfault.sh) itself, on 3 hosts in network namespaces: each fault does what
# it says, between the hosts it names only, and its heal undoes it. Root only (skipped otherwise).
# The delay and reordering need iptables and the kernel's nfnetlink_queue (nf_delay.py): without
# them they are reported skipped, by name, and the rest still runs.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
source "$DDPRUN_TESTS_DIR/elastic/netfault.sh"
netfault_up 3

# udp FROM TO N: host FROM sends N numbered datagrams to host TO; prints how many distinct ones
# arrived, and leaves in $T/udp.detail how many arrived in all (copies too) and how many came
# after one numbered higher (reordered). The receiver's buffer holds them all (a loaded machine
# must not drop any for want of room), and it counts until the sender has finished and nothing
# more came for 0.5 s: no deadline that a slow start of the sender could miss.
udp() {
  local from=$1 to=$2 n=$3 port
  port=$(free_tcp_port)
  rm -f "$T/udp.ready" "$T/udp.sent"
  ip netns exec "$(nf_ns "$to")" python3 - "$(nf_addr "$to")" "$port" "$T/udp.ready" "$T/udp.sent" "$T/udp.detail" \
    >"$T/udp.count" <<'PY' &
import os, socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, 33, 64 << 20)  # SO_RCVBUFFORCE (root): room for every datagram
s.bind((sys.argv[1], int(sys.argv[2])))
open(sys.argv[3], "w").close()
got, arrivals = set(), []
s.settimeout(0.5)
idle = 0
while idle < 120:  # a sender that never says it finished: given up after 60 s of silence
    try:
        arrivals.append(int(s.recv(64)))
        got.add(arrivals[-1])
        idle = 0
    except socket.timeout:
        idle += 1
        if os.path.exists(sys.argv[4]):  # sent, and nothing more for 0.5 s
            break
print(len(got))
highest, late = -1, 0
for n in arrivals:
    late += n < highest
    highest = max(highest, n)
open(sys.argv[5], "w").write("%d %d\n" % (len(arrivals), late))
PY
  local receiver=$!
  wait_for 10 test -e "$T/udp.ready"
  ip netns exec "$(nf_ns "$from")" python3 - "$(nf_addr "$to")" "$port" "$n" <<'PY'
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range(int(sys.argv[3])):
    try:
        s.sendto(b"%d" % i, (sys.argv[1], int(sys.argv[2])))
    except PermissionError:
        pass  # dropped by this host's own output rules
PY
  touch "$T/udp.sent"
  wait "$receiver"
  cat "$T/udp.count"
}
both_ways() { nf_reaches "$1" "$2" && nf_reaches "$2" "$1"; }
neither_way() { ! nf_reaches "$1" "$2" && ! nf_reaches "$2" "$1"; }

both_ways 1 2 && both_ways 2 3 && both_ways 1 3 || fail "the hosts do not reach each other before any fault"
expect_eq "$(udp 2 1 500)" 500 "UDP from h2 to h1 with no fault"
ok "3 hosts reach each other"

nf_cut 2 1
neither_way 1 2 || fail "nf_cut 2 1: h1 and h2 still reach each other"
both_ways 3 1 && both_ways 3 2 || fail "nf_cut 2 1 cut h3 off too"
nf_uncut 2 1
both_ways 1 2 || fail "nf_uncut 2 1 did not heal"
ok "nf_cut: h1 and h2 apart both ways, h3 reaches both; healed"

nf_cut_oneway 2 1
expect_eq "$(udp 2 1 200)" 0 "UDP from h2 to h1 under a one-way cut from h2 to h1"
expect_eq "$(udp 1 2 200)" 200 "UDP from h1 to h2 under a one-way cut from h2 to h1"
expect_eq "$(udp 2 3 200)" 200 "UDP from h2 to h3 under a one-way cut from h2 to h1"
nf_uncut_oneway 2 1
expect_eq "$(udp 2 1 200)" 200 "UDP from h2 to h1 after the one-way cut healed"
ok "nf_cut_oneway: h2 to h1 dropped, h1 to h2 and h2 to h3 pass; healed"

nf_loss 2 20
out=$(udp 2 1 2000) into=$(udp 1 2 2000) other=$(udp 3 1 2000)
nf_unloss 2
# 20 % of 2000: 400 lost, with a standard deviation of 18; 6 of them either side.
within 1490 1710 "$out" || fail "nf_loss 2 20: $out of 2000 datagrams from h2 arrived, expected about 1600"
within 1490 1710 "$into" || fail "nf_loss 2 20: $into of 2000 datagrams to h2 arrived, expected about 1600"
expect_eq "$other" 2000 "datagrams from h3 to h1 under a loss on h2"
expect_eq "$(udp 2 1 2000)" 2000 "datagrams from h2 to h1 after nf_unloss"
ok "nf_loss 2 20: $out and $into of 2000 datagrams out of and into h2 arrived, all from h3; healed"

nf_isolate 2
neither_way 1 2 && neither_way 3 2 || fail "nf_isolate 2: h2 still reaches a host"
both_ways 1 3 || fail "nf_isolate 2 cut h1 from h3"
nf_unisolate 2
both_ways 1 2 || fail "nf_unisolate 2 did not heal"
ok "nf_isolate: h2 reaches nobody, h1 and h3 each other; healed"

two_flaps() { [[ $(grep -c '^up ' "$T/flap.2" 2>/dev/null) -ge 2 ]]; }
nf_flap 2 0.2 0.2
wait_for 20 two_flaps
nf_unflap 2
both_ways 1 2 || fail "h2 unreachable after nf_unflap"
expect_eq "$(head -1 "$T/flap.2" | cut -d' ' -f1)" down "the flap's first change"
ok "nf_flap: h2's link went down and up $(grep -c '^down ' "$T/flap.2") times; healed"

nf_cut 2 1; nf_cut_oneway 3 2; nf_loss 2 50; nf_isolate 2
nf_heal 2; nf_heal 3
both_ways 1 2 && both_ways 2 3 || fail "nf_heal left a fault behind"
expect_eq "$(udp 2 1 500)" 500 "UDP from h2 to h1 after nf_heal"
ok "nf_heal: a cut, a one-way cut, a loss and an isolation undone at once"

nf_duplicate 2 50
read -r doubled late < <(udp 2 1 500 > /dev/null; cat "$T/udp.detail")
within 600 900 "$doubled" || fail "nf_duplicate 2 50: $doubled datagrams arrived of 500 sent, expected about 750"
nf_unduplicate 2
read -r total late < <(udp 2 1 500 > /dev/null; cat "$T/udp.detail")
expect_eq "$total" 500 "datagrams that arrived after nf_unduplicate"
ok "nf_duplicate: about half of h2's datagrams arrived twice ($doubled for 500 sent, then 500 once healed)"

if nf_delay_available; then
  connect_time() {
    ip netns exec "$(nf_ns "$1")" python3 -c '
import socket, sys, time
t = time.monotonic()
try:
    socket.create_connection((sys.argv[1], 9), timeout=5)
except ConnectionRefusedError:
    pass
print("%.3f" % (time.monotonic() - t))' "$(nf_addr "$2")"
  }
  nf_delay 2 100 10
  rtt=$(connect_time 2 1)
  within 0.18 1.0 "$rtt" || fail "nf_delay 2 100: a connect from h2 to h1 took ${rtt}s, expected about 0.2 s"
  rtt3=$(connect_time 3 1)
  within 0 0.05 "$rtt3" || fail "nf_delay 2 100: a connect from h3, not delayed, took ${rtt3}s"
  nf_undelay 2
  rtt_after=$(connect_time 2 1)
  within 0 0.05 "$rtt_after" || fail "after nf_undelay a connect took ${rtt_after}s"
  ok "nf_delay: 100 ms each way on h2's link (a connect took ${rtt}s; from h3 ${rtt3}s), healed (${rtt_after}s)"

  nf_delay 2 50 40
  read -r total late < <(udp 2 1 500 > /dev/null; cat "$T/udp.detail")
  nf_undelay 2
  expect_eq "$total" 500 "datagrams that arrived through a 50 +- 40 ms jitter"
  (( late > 0 )) || fail "nf_delay 2 50 40: no datagram of 500 arrived after a later one (a jitter reorders)"
  nf_reorder 2 25 50
  read -r total late_r < <(udp 2 1 500 > /dev/null; cat "$T/udp.detail")
  nf_unreorder 2
  expect_eq "$total" 500 "datagrams that arrived through nf_reorder"
  (( late_r > 0 )) || fail "nf_reorder 2 25 50: no datagram of 500 arrived after a later one"
  read -r total late < <(udp 2 1 500 > /dev/null; cat "$T/udp.detail")
  expect_eq "$total $late" "500 0" "datagrams (all, out of order) after nf_unreorder"
  ok "nf_delay with jitter and nf_reorder: every datagram arrived, some after later ones ($late_r of 500 with reorder 25 %), in order once healed"
else
  echo "SKIP (part): nf_delay, nf_reorder: they need iptables and the kernel's nfnetlink_queue"
fi

nf_down
[[ -z "$(ip netns list | grep "^$NF" || true)" ]] || fail "namespaces left behind"
ok "namespaces removed"
