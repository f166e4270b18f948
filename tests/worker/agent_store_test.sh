#!/usr/bin/env bash
# The launcher's store (TORCHELASTIC_USE_AGENT_STORE=True) with PyTorch's own clients: Python
# workers of the torch this build is against (TORCH_PYTHON: Debian's 1.13 in build/, 2.11 in
# build-torch2/) and libtorch's C++ client (rank_driver). Collectives and every store call;
# a restart that fails if the previous attempt's keys survive; rank 0 gone while the others
# still use the store; two ddprun nodes on loopback meeting at the store of rank 0's node; and
# TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, under which rank 0 of the workers hosts the store; a
# flood of idle connections at the store beyond ddprun's descriptor limit, raced against the
# workers.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
"$TORCH_PYTHON" -c 'import torch.distributed' 2>/dev/null || skip "$TORCH_PYTHON has no torch"
export PYTHON_EXEC=$TORCH_PYTHON
torch_version=$("$TORCH_PYTHON" -c 'import torch; print(torch.__version__)' 2>/dev/null)
unset TORCH_DISABLE_SHARE_RDZV_TCP_STORE
# A store that never answers would leave PyTorch's clients waiting forever: give each ddprun
# two minutes (then it stops its workers and the test fails with its exit code).
cat > "$T/ddprun" <<SH
#!/bin/sh
exec timeout -k 10 120 "$DDPRUN" "\$@"
SH
chmod +x "$T/ddprun"
DDPRUN=$T/ddprun

# Who listens on MASTER_PORT: "NAME PID" of every process with the listening socket open (from
# /proc: the socket's inode, then the processes' descriptors), "nobody" if none.
cat > "$T/listener.py" <<'PY'
import os
def listener(port=None):
    port = port or int(os.environ["MASTER_PORT"])
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(f"socket:[{fields[9]}]")
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") in inodes for fd in os.listdir(f"/proc/{pid}/fd")):
                found.append(open(f"/proc/{pid}/comm").read().strip() + " " + pid)
        except OSError:
            continue
    return ", ".join(sorted(found)) or "nobody"
if __name__ == "__main__":
    print(listener())
PY
# Shared by the Python workers: a client of the store at MASTER_ADDR:MASTER_PORT.
cat > "$T/common.py" <<'PY'
import datetime, os
import torch.distributed as dist
from listener import listener
rank = int(os.environ["RANK"])
def client():
    return dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                         timeout=datetime.timedelta(seconds=60), wait_for_workers=False)
PY
export PYTHONPATH=$T

# 1. Python workers: gloo collectives, the default group's store, and every call of a client.
cat > "$T/ops.py" <<'PY'
import datetime, os, sys, torch
import torch.distributed as dist
from common import client, listener, rank
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
assert t.item() == 3.0, t
dist.barrier()
pg_store = dist.distributed_c10d._get_default_store()
me, peer = f"r{rank}/", f"r{1 - rank}/"
pg_store.set(me + "pg", "1")
pg_store.wait([peer + "pg"])
s = client()
s.set(me + "k", "v" + me)
s.wait([peer + "k"])
assert s.get(peer + "k") == ("v" + peer).encode()
assert s.add(me + "n", 5) == 5 and s.add(me + "n", -2) == 3
assert s.compare_set(me + "n", "3", "x") == b"x" and s.compare_set(me + "n", "3", "y") == b"x"
assert s.compare_set(me + "new", "", "z") == b"z"
assert s.delete_key(me + "new") and not s.delete_key(me + "new")
assert s.num_keys() >= 4, s.num_keys()
try:
    s.wait([me + "absent"], datetime.timedelta(milliseconds=200))
    raise SystemExit("a wait for a missing key did not time out")
except RuntimeError:
    pass
if hasattr(s, "queue_push"):  # torch 2.x
    assert s.check([me + "k"]) and not s.check([me + "absent"])
    s.append(me + "log", "a")
    s.append(me + "log", "b")
    s.multi_set([me + "m1", me + "m2"], ["1", "22"])
    assert s.multi_get([me + "log", me + "m1", me + "m2"]) == [b"ab", b"1", b"22"]
    s.queue_push(peer + "q", "for " + peer)
    assert s.queue_pop(me + "q") == ("for " + me).encode()
    assert s.queue_len(me + "q") == 0
    assert me + "log" in s.list_keys()
s.set(me + "done", "1")
s.wait([peer + "done"])
dist.barrier()
who = listener()
dist.destroy_process_group()
open(os.path.join(sys.argv[1], f"ops.{rank}"), "w").write(
    f"{os.environ['TORCHELASTIC_USE_AGENT_STORE']} {who} {os.getppid()}\n")
PY
"$DDPRUN" --nproc_per_node=2 "$T/ops.py" "$T" >"$T/ops.out" 2>"$T/ops.err" \
  || { cat "$T/ops.err"; fail "python workers against the launcher's store"; }
for r in 0 1; do
  read -r use name pid ppid < "$T/ops.$r"
  expect_eq "$use $name $pid" "True ddprun $ppid" "rank $r: agent store, served by its ddprun"
done
ok "torch $torch_version workers: gloo all_reduce, barrier, every store call, at ddprun's store"

# 2. libtorch's C++ client: every call of c10d::TCPStore (watchKey on 1.x, the extended API on
# 2.x), and the worker library's process group, which is then a client of ddprun's store too.
"$DDPRUN" --nproc_per_node=2 "$RANK_DRIVER" store_ops "$T" >"$T/cxx.out" 2>"$T/cxx.err" \
  || { cat "$T/cxx.err"; fail "rank_driver store_ops against the launcher's store"; }
expect_eq "$(cat "$T/store_ops.0" "$T/store_ops.1")" "okok" "c10d::TCPStore calls on both ranks"
worker collectives <<SH
#!/bin/sh
echo "\$TORCHELASTIC_USE_AGENT_STORE \$("$TORCH_PYTHON" "$T/listener.py") \$PPID" > "$T/use.\$RANK"
exec "$RANK_DRIVER" collectives "$T"
SH
"$DDPRUN" --nproc_per_node=2 "$T/collectives" >"$T/coll.out" 2>"$T/coll.err" \
  || { cat "$T/coll.err"; fail "worker library collectives against the launcher's store"; }
for r in 0 1; do
  read -r use name pid ppid < "$T/use.$r"
  expect_eq "$use $name $pid" "True ddprun $ppid" "rank $r: agent store, ddprun listening"
  expect_eq "$(cat "$T/collectives.$r")" "gloo 2" "rank $r collectives"
done
ok "libtorch C++ clients: every c10d::TCPStore call; the worker library joins at ddprun's store"

# 3. A restart: the attempt before left keys; the next attempt must find the store empty (a
# torch 2.x worker uses no per-attempt prefix: a counter of attempt 0 would go on counting).
cat > "$T/restart.py" <<'PY'
import datetime, os, signal, sys, torch
import torch.distributed as dist
from common import client, rank
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
s = client()
seen = s.add(f"seen/{rank}", 1)  # 1 in a fresh store
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
t = torch.tensor([1.0])
dist.all_reduce(t)
dist.barrier()
if attempt == 0:
    if rank == 1:
        os._exit(3)
    signal.pause()  # until ddprun stops it
assert seen == 1, f"attempt {attempt} found rank {rank}'s key of an earlier attempt ({seen})"
open(os.path.join(sys.argv[1], f"restart.{rank}"), "w").write(f"{attempt} {seen} {t.item()}")
dist.barrier()
dist.destroy_process_group()
PY
run_ddprun restart --nproc_per_node=2 --max_restarts=1 "$T/restart.py" "$T"
[[ $RC == 0 ]] || { cat "$T/restart.err"; fail "the restarted attempt failed (exit $RC)"; }
expect_in "$T/restart.err" "restarting workers \(restart 1 of 1\)"
for r in 0 1; do expect_eq "$(cat "$T/restart.$r")" "1 1 2.0" "rank $r after the restart"; done
ok "a crash in attempt 0, attempt 1 succeeds on an emptied store"

# 4. Rank 0 gone, the others still use the store: rank 0 exits at once, and is killed.
cat > "$T/early.py" <<'PY'
import os, select, sys
from common import client, rank
s = client()
if rank == 0:
    s.set("rank0_pid", str(os.getpid()))
    sys.exit(0)
pid = int(s.get("rank0_pid"))
try:
    select.select([os.pidfd_open(pid)], [], [], 60)  # until rank 0 has exited
except ProcessLookupError:
    pass
s.set("after", "rank 0")
s.wait(["after"])
open(os.path.join(sys.argv[1], "early"), "w").write(f"{s.get('after').decode()} {s.add('n', 2)}")
PY
"$DDPRUN" --nproc_per_node=2 "$T/early.py" "$T" >"$T/early.out" 2>"$T/early.err" \
  || { cat "$T/early.err"; fail "rank 1 could not use the store after rank 0 exited"; }
expect_eq "$(cat "$T/early")" "rank 0 2" "rank 1's store calls after rank 0 exited"
cat > "$T/killed.py" <<'PY'
import os, signal, sys
from common import client, rank
s = client()
if rank == 0:
    s.wait(["ready"])
    os.kill(os.getpid(), signal.SIGKILL)
def stopped(*_):
    s.set("last_words", "rank 1")
    open(os.path.join(sys.argv[1], "killed"), "w").write(f"{s.get('last_words').decode()} {s.add('n', 1)}")
    os._exit(0)
signal.signal(signal.SIGTERM, stopped)
s.set("ready", "1")
while True:
    signal.pause()
PY
run_ddprun killed --nproc_per_node=2 "$T/killed.py" "$T"
expect_eq "$RC" 137 "exit code after rank 0 was killed"
expect_in "$T/killed.err" "root cause: rank 0 .*SIGKILL"
expect_eq "$(cat "$T/killed")" "rank 1 1" "rank 1's store calls while being stopped, rank 0 dead"
ok "the store outlives rank 0: after it exits, and after it is killed"

# 5. Two ddprun nodes on loopback: every worker, C++ and Python, is a client of the store that
# the node of rank 0 serves.
port=$(free_tcp_port)
two_nodes() {  # NAME PROGRAM ARGS...: both nodes, static backend, one worker each
  local name=$1; shift
  port=$(free_tcp_port "$port")
  local common=(--nnodes=2 --nproc_per_node=1 --master_addr=127.0.0.2 --master_port=$port)
  "$DDPRUN" --local_addr=127.0.0.3 "${common[@]}" --node_rank=1 "$@" >"$T/$name.b.out" 2>"$T/$name.b.err" &
  local b=$!
  "$DDPRUN" --local_addr=127.0.0.2 "${common[@]}" --node_rank=0 "$@" >"$T/$name.a.out" 2>"$T/$name.a.err" &
  local a=$!
  local rc_a=0 rc_b=0
  wait "$a" || rc_a=$?
  wait "$b" || rc_b=$?
  [[ "$rc_a $rc_b" == "0 0" ]] || { cat "$T/$name".?.err; fail "$name on two nodes: exit codes $rc_a $rc_b"; }
}
rm -f "$T"/ops.[01] "$T"/store_ops.[01]
two_nodes py "$T/ops.py" "$T"
read -r _ _ _ node0 < "$T/ops.0"  # rank 0's parent: node 0's ddprun
for r in 0 1; do
  read -r use name pid ppid < "$T/ops.$r"
  expect_eq "$use $name $pid" "True ddprun $node0" "rank $r: a client of node 0's ddprun"
done
two_nodes cxx "$RANK_DRIVER" store_ops "$T"
expect_eq "$(cat "$T/store_ops.0" "$T/store_ops.1")" "okok" "c10d::TCPStore calls across two nodes"
# Node 0's only worker, rank 0, is done and reaped before rank 1 on node 1 first connects.
mkfifo "$T/late.fifo"
cat > "$T/late.py" <<'PY'
import os, select, sys, time
from common import client, rank
fifo = os.path.join(sys.argv[1], "late.fifo")
if rank == 0:
    client().set("from rank 0", "1")
    with open(fifo, "w") as f:  # until rank 1 reads
        f.write(str(os.getpid()))
    sys.exit(0)
pid = int(open(fifo).read())
try:
    select.select([os.pidfd_open(pid)], [], [], 60)  # until rank 0 has exited
except ProcessLookupError:
    pass
deadline = time.monotonic() + 30
while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:  # until its ddprun reaped it
    time.sleep(0.01)
s = client()
open(os.path.join(sys.argv[1], "late"), "w").write(s.get("from rank 0").decode())
PY
two_nodes late "$T/late.py" "$T"
expect_eq "$(cat "$T/late")" "1" "rank 1's first store call after node 0's workers all ended"
ok "two nodes: Python and C++ workers of both meet at node 0's ddprun, also after its workers ended"

# 6. TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, as with torchrun: rank 0 of the workers hosts the store.
cat > "$T/optout.py" <<'PY'
import datetime, os, sys, torch
import torch.distributed as dist
from common import listener, rank
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
t = torch.tensor([1.0])
dist.all_reduce(t)
who = listener()
dist.barrier()
dist.destroy_process_group()
open(os.path.join(sys.argv[1], f"optout.{rank}"), "w").write(f"{os.environ['TORCHELASTIC_USE_AGENT_STORE']} {who} {os.getpid()}\n")
PY
TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 "$DDPRUN" --nproc_per_node=2 "$T/optout.py" "$T" >"$T/optout.out" 2>"$T/optout.err" \
  || { cat "$T/optout.err"; fail "python workers with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1"; }
read -r use name pid0 own0 < "$T/optout.0"
expect_eq "$use $pid0" "False $own0" "rank 0 hosts the store"
read -r use name pid1 own1 < "$T/optout.1"
expect_eq "$use $pid1" "False $own0" "rank 1 uses rank 0's store"
rm -f "$T"/collectives.* "$T"/use.*
TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 "$DDPRUN" --nproc_per_node=2 "$T/collectives" >"$T/coll2.out" 2>"$T/coll2.err" \
  || { cat "$T/coll2.err"; fail "worker library collectives with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1"; }
for r in 0 1; do expect_eq "$(cut -d' ' -f1,2 "$T/use.$r")" "False nobody" "rank $r: no agent store, ddprun not listening"; done
ok "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: TORCHELASTIC_USE_AGENT_STORE=False, rank 0 hosts the store"

# 7. A flood of idle connections at MASTER_PORT raced against the workers, six times. ddprun
# runs at ulimit -n 128, so the store keeps 64 connections; the flood (another process) opens
# 100 and holds them. The store never closes a connection that has been silent less than 5 s,
# so a worker whose client connected a moment before the flood, and had not yet written (torch
# 1.13's clients write nothing until their first call), is not the one closed; a worker that
# connects behind the flood waits in the listen backlog until the flood's connections have
# aged. (Before, the store closed the oldest silent connection at once: on a loaded machine
# that was a worker's, which got "Connection reset by peer".) Orders: "before": rank 1's client
# connects, then the flood, then rank 1 speaks; "after": the flood, then the workers connect;
# "race": both at once.
cat > "$T/flood_peer.py" <<'PY'
import os, socket, sys, time
port, count, folder = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
def over():  # ddprun has exited: whatever this was waiting for will not come
    return os.path.exists(os.path.join(folder, "fl.done"))
def wait(name):
    while not os.path.exists(os.path.join(folder, name)) and not over():
        time.sleep(0.01)
if os.environ.get("FLOOD_AFTER"):
    wait(os.environ["FLOOD_AFTER"])
flood = []
while len(flood) < count and not over():
    try:
        flood.append(socket.create_connection(("127.0.0.1", port)))
    except ConnectionRefusedError:  # ddprun is not listening yet
        time.sleep(0.01)
open(os.path.join(folder, "fl.connected"), "w").close()
wait("fl.done")
closed = 0
for s in flood:
    s.setblocking(False)
    try:
        closed += s.recv(1) == b""
    except (BlockingIOError, ConnectionResetError) as e:
        closed += isinstance(e, ConnectionResetError)
print(closed)
PY
cat > "$T/flood.py" <<'PY'
import datetime, os, sys, time, torch
import torch.distributed as dist
from common import client, rank
folder, order = sys.argv[1], sys.argv[2]
def wait(name):
    while not os.path.exists(os.path.join(folder, name)):
        time.sleep(0.01)
if order == "before" and rank == 1:
    s = client()  # connected, silent
    open(os.path.join(folder, "rank1.connected"), "w").close()
    wait("fl.connected")
    s.set("rank 1", "spoke after the flood")
if order != "race":
    wait("fl.connected")
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
assert t.item() == 3.0, t
dist.barrier()
dist.destroy_process_group()
open(os.path.join(folder, f"fl.{rank}"), "w").write(f"{t.item()}\n")
PY
flood_port=$(free_tcp_port)
for order in before after race before after race; do
  rm -f "$T"/fl.* "$T"/rank1.connected
  flood_port=$(free_tcp_port "$flood_port")
  FLOOD_AFTER=$([[ $order == before ]] && echo rank1.connected || true) \
    "$TORCH_PYTHON" "$T/flood_peer.py" $flood_port 100 "$T" > "$T/flood_peer.out" &
  flood=$!
  rc=0
  ( ulimit -n 128; exec "$DDPRUN" --nproc_per_node=2 --master_port=$flood_port "$T/flood.py" "$T" $order \
      >"$T/flood.out" 2>"$T/flood.err" ) || rc=$?
  touch "$T/fl.done"
  wait $flood
  [[ $rc == 0 ]] || { cat "$T/flood.err"; fail "workers behind a flood of idle store connections ($order): exit $rc"; }
  expect_eq "$(cat "$T/fl.0" "$T/fl.1" | tr '\n' ' ')" "3.0 3.0 " "all_reduce behind the flood ($order)"
  notices=$(grep -c "the workers' store has 64 connections, its limit" "$T/flood.err" || true)
  if [[ $order == race ]]; then
    (( notices <= 1 )) || fail "$notices limit notices ($order)"
  else  # the workers' first call came after the flood had connected: the limit was reached
    expect_eq "$notices" 1 "limit notices ($order)"
  fi
  expect_not_in "$T/flood.err" "Connection reset|closed the connection"
done
ok "100 idle connections at the store (64 kept) raced six times against the workers: the workers served every time"
wait_for 10 no_leftovers
