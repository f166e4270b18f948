#!/usr/bin/env bash
# Every rank gets torchrun's environment contract; MASTER_PORT is served by ddprun's store (the
# agent store), or with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 held free for rank 0 to bind.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"

worker dump_env <<'SH'
#!/bin/sh
env | grep -E '^(RANK|LOCAL_RANK|GROUP_RANK|ROLE_RANK|ROLE_NAME|ROLE_WORLD_SIZE|LOCAL_WORLD_SIZE|WORLD_SIZE|GROUP_WORLD_SIZE|MASTER_ADDR|MASTER_PORT|TORCHELASTIC_[A-Z_]+|(TORCH_)?NCCL_ASYNC_ERROR_HANDLING|OMP_NUM_THREADS)=' | sort > "$T/env.$RANK"
SH
unset TORCH_DISABLE_SHARE_RDZV_TCP_STORE
env -u OMP_NUM_THREADS -u TORCH_NCCL_ASYNC_ERROR_HANDLING -u NCCL_ASYNC_ERROR_HANDLING "$DDPRUN" --nproc-per-node=3 --max_restarts=2 \
  --role=trainer --rdzv_id=job1 "$T/dump_env" >"$T/out" 2>"$T/err"
expect_in "$T/err" "setting OMP_NUM_THREADS=1 for each of the 3 workers"
port=$(sed -n 's/^MASTER_PORT=//p' "$T/env.0")
[[ "$port" =~ ^[0-9]+$ ]] && (( port >= 1 && port <= 65535 )) || fail "MASTER_PORT '$port'"
for r in 0 1 2; do
  errfile=$(sed -n 's/^TORCHELASTIC_ERROR_FILE=//p' "$T/env.$r")
  # In ddprun's private folder (no --log_dir), flat: a folder per rank costs a block on the disk.
  [[ "$errfile" == */ddprun.*/rank_$r.error.json ]] || fail "rank $r error file '$errfile'"
  grep -v '^TORCHELASTIC_ERROR_FILE=' "$T/env.$r" > "$T/got.$r"
  cat > "$T/want.$r" <<ENV
GROUP_RANK=0
GROUP_WORLD_SIZE=1
LOCAL_RANK=$r
LOCAL_WORLD_SIZE=3
MASTER_ADDR=127.0.0.1
MASTER_PORT=$port
NCCL_ASYNC_ERROR_HANDLING=1
OMP_NUM_THREADS=1
RANK=$r
ROLE_NAME=trainer
ROLE_RANK=$r
ROLE_WORLD_SIZE=3
TORCHELASTIC_MAX_RESTARTS=2
TORCHELASTIC_RESTART_COUNT=0
TORCHELASTIC_RUN_ID=job1
TORCHELASTIC_SIGNALS_TO_HANDLE=SIGTERM,SIGINT,SIGHUP,SIGQUIT
TORCHELASTIC_USE_AGENT_STORE=True
TORCH_NCCL_ASYNC_ERROR_HANDLING=1
WORLD_SIZE=3
ENV
  diff -u "$T/want.$r" "$T/got.$r" || fail "environment of rank $r"
done
ok "environment contract for ranks 0..2"

# The launcher's own values are inherited, a given port is used, and ddprun's store answers
# there (a torch 2.x client's VALIDATE and PING). With TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 the
# port is free for rank 0 to bind and listen on (the way c10d's TCPStore does, with SO_REUSEADDR).
worker ping <<'SH'
#!/bin/sh
echo "$OMP_NUM_THREADS $TORCH_NCCL_ASYNC_ERROR_HANDLING $NCCL_ASYNC_ERROR_HANDLING $MASTER_PORT" > "$T/inherited"
exec /usr/bin/python3 -c '
import os, socket, struct
s = socket.create_connection((os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])))
s.sendall(b"\0" + struct.pack("=I", 0x3C85F7CE) + b"\x0d" + struct.pack("=I", 4242))
assert s.makefile("rb").read(4) == struct.pack("=I", 4242)'
SH
worker listen <<'SH'
#!/bin/sh
echo "$TORCHELASTIC_USE_AGENT_STORE $MASTER_PORT" > "$T/inherited"
exec /usr/bin/python3 -c '
import os, socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))); s.listen()'
SH
OMP_NUM_THREADS=4 TORCH_NCCL_ASYNC_ERROR_HANDLING=0 NCCL_ASYNC_ERROR_HANDLING=2 "$DDPRUN" --master_port=29876 "$T/ping" \
  || fail "ddprun's store did not answer on the given MASTER_PORT"
expect_eq "$(cat "$T/inherited")" "4 0 2 29876" "inherited variables and given port"
"$DDPRUN" "$T/ping" || fail "ddprun's store did not answer on the free MASTER_PORT"
TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 "$DDPRUN" "$T/listen" || fail "the worker could not listen on the reserved MASTER_PORT"
expect_eq "$(cut -d' ' -f1 "$T/inherited")" "False" "TORCHELASTIC_USE_AGENT_STORE with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1"
ok "inherited variables, given port, ddprun's store answers there; or the reserved port is bindable"

# Garbage, and a length beyond the limits, close that connection only: the store answers the
# next client, and ddprun says what it refused.
worker garbage <<'SH'
#!/bin/sh
exec /usr/bin/python3 -c '
import os, socket, struct
at = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
for junk in (b"\x2a" * 20, b"\x00" + struct.pack("=Q", 1 << 40)):
    s = socket.create_connection(at)
    s.sendall(junk)
    assert s.recv(10) == b"", "a malformed query got an answer"
s = socket.create_connection(at)
s.sendall(b"\0" + struct.pack("=I", 0x3C85F7CE) + b"\x0d" + struct.pack("=I", 7))
assert s.makefile("rb").read(4) == struct.pack("=I", 7)'
SH
run_ddprun garbage "$T/garbage"
expect_eq "$RC" 0 "a client after malformed ones"
expect_in "$T/garbage.err" "^ddprun: the workers' store closed the connection from 127.0.0.1:[0-9]+: it sent query type 42, which no torch 1.x client sends$"
expect_in "$T/garbage.err" "it sent a key of 1099511627776 bytes"
ok "malformed queries close their connection only"

# One node, static backend (the default): --rdzv_endpoint is MASTER_ADDR:MASTER_PORT, as with
# torchrun (PyTorch's run_example.sh: --rdzv_id=100 --rdzv_endpoint=localhost:29400). It
# replaces --master_port, is served like a picked port, or held for rank 0 to listen on.
port=$(free_tcp_port)
"$DDPRUN" --rdzv_id=100 --rdzv_endpoint=127.0.0.1:$port --master_port=29876 "$T/ping" \
  || fail "ddprun's store did not answer on the endpoint's port"
expect_eq "$(cut -d' ' -f4 "$T/inherited")" "$port" "MASTER_PORT from --rdzv_endpoint"
TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 "$DDPRUN" --rdzv_id=100 --rdzv_endpoint=127.0.0.1:$port "$T/listen" \
  || fail "the worker could not listen on the endpoint's port"
rm -f "$T"/env.*
"$DDPRUN" --rdzv_endpoint=localhost:$port "$T/dump_env"
expect_in "$T/env.0" "^MASTER_ADDR=localhost$"
expect_in "$T/env.0" "^MASTER_PORT=$port$"
expect_in "$T/env.0" "^TORCHELASTIC_USE_AGENT_STORE=True$"
# The endpoint's port held by another program: exit 69, naming the flag.
/usr/bin/python3 -c '
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(); time.sleep(60)' "$port" "$T" &
holder=$!
wait_for 10 bash -c "exec 3<>/dev/tcp/127.0.0.1/$port" 2>/dev/null
run_ddprun taken --rdzv_endpoint=127.0.0.1:$port "$T/dump_env"
kill "$holder"; wait "$holder" 2>/dev/null || true
expect_eq "$RC" 69 "endpoint port in use"
expect_in "$T/taken.err" "^ddprun: .*--rdzv_endpoint=127.0.0.1:$port: port $port is in use by another program"
# c10d: the endpoint is the rendezvous's, not the workers' (torchrun gives them a free port too).
rm -f "$T"/env.*
"$DDPRUN" --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:$port "$T/dump_env"
expect_in "$T/env.0" "^MASTER_ADDR=127.0.0.1$"
expect_not_in "$T/env.0" "^MASTER_PORT=$port$"
ok "one node: static --rdzv_endpoint is MASTER_ADDR:MASTER_PORT, held for rank 0; c10d's is not"

# PET_* variables, --config files and --print_config.
PET_NPROC_PER_NODE=2 PET_MAX_RESTARTS=1 "$DDPRUN" --print_config prog a b > "$T/pc.json"
/usr/bin/python3 - "$T/pc.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
assert c["nproc_per_node"] == 2 and c["max_restarts"] == 1, c
assert c["program"] == "prog" and c["args"] == ["a", "b"], c
PY
echo '{"nproc_per_node": 3, "max_restarts": 4}' > "$T/cfg.json"
PET_NPROC_PER_NODE=2 "$DDPRUN" --config "$T/cfg.json" --max_restarts=5 --print_config prog > "$T/pc2.json"
/usr/bin/python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); assert (c["nproc_per_node"], c["max_restarts"]) == (3, 5), c' "$T/pc2.json"
"$DDPRUN" --config "$T/pc.json" "$T/dump_env" && [[ -f "$T/env.1" ]] || fail "a printed config runs as a --config file"
ok "PET_*, --config and --print_config"

# Started with stdin and stdout closed (`0<&- 1>&-`, as some schedulers and daemons start
# programs): ddprun opens them on /dev/null first, so that no file of its own takes their numbers
# (before: the orphan guard, or a worker's stdin, could take descriptor 0: workers SIGKILLed and
# blamed on the out-of-memory killer, or ddprun's private folder gone under it).
worker ran <<'SH'
#!/bin/sh
echo "rank $RANK" > "$T/ran.$RANK"
echo "to the closed stdout"
SH
# (Five times: before, about half such runs failed, depending on which file took descriptor 0.)
for attempt in 1 2 3 4 5; do
  rm -f "$T"/ran.*
  T=$T "$DDPRUN" --nproc_per_node=2 --max_restarts=0 "$T/ran" 0<&- 1>&- 2>"$T/closed.err" \
    || { cat "$T/closed.err"; fail "ddprun started with stdin and stdout closed failed (run $attempt)"; }
  expect_eq "$(cat "$T/ran.0" "$T/ran.1")" "rank 0
rank 1" "ranks that ran with stdin and stdout closed (run $attempt)"
done
ok "started with stdin and stdout closed: the workers run and the job succeeds, 5 runs of 5"
