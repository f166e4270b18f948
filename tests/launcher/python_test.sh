#!/usr/bin/env bash
# A PyTorch script written for torchrun runs unchanged under ddprun, and sees the same
# environment as under torchrun (Debian's python3-torch).
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
/usr/bin/python3 -c 'import torch.distributed.run' 2>/dev/null || skip "python3-torch is not installed"
export PYTHON_EXEC=/usr/bin/python3
unset TORCH_DISABLE_SHARE_RDZV_TCP_STORE

cat > "$T/train.py" <<'PY'
import json, os, sys
import torch
import torch.distributed as dist
keys = ["RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "ROLE_WORLD_SIZE",
        "LOCAL_WORLD_SIZE", "WORLD_SIZE", "GROUP_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
        "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
        "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_ERROR_FILE", "TORCH_NCCL_ASYNC_ERROR_HANDLING",
        "NCCL_ASYNC_ERROR_HANDLING", "OMP_NUM_THREADS"]
env = {k: os.environ.get(k) for k in keys}
env["unbuffered"] = not sys.stdout.line_buffering and os.environ.get("PYTHONUNBUFFERED") is None
dist.init_process_group("gloo")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
env["allreduce"] = t.item()
json.dump(env, open(os.path.join(sys.argv[1], "env." + os.environ["RANK"]), "w"))
print("trained", os.environ["RANK"])
PY
mkdir "$T/ddprun" "$T/torchrun"
"$DDPRUN" --nproc_per_node=2 --max_restarts=1 --rdzv_id=same "$T/train.py" "$T/ddprun" >"$T/d.out" 2>"$T/d.err" \
  || { cat "$T/d.err"; fail "the script failed under ddprun"; }
expect_in "$T/d.out" '^\[rank1\]: trained 1$'
# Debian's torchrun 1.13 needs --redirects/--tee under Python 3.11 (see the notes); they
# redirect nothing here.
# torchrun's default port 29500 collides with any other torchrun on the host: give it a free one.
# It binds it seconds later (its start-up, on a loaded machine), and meanwhile another process
# may take it: then torchrun exits, and runs again with another.
for attempt in 1 2 3; do
  port=$(free_tcp_port)
  (cd "$T" && /usr/bin/python3 -m torch.distributed.run --nproc_per_node=2 --max_restarts=1 --master_port="$port" \
    --rdzv_id=same --redirects 9:1 --tee 9:1 --log_dir "$T/tlogs" "$T/train.py" "$T/torchrun") \
    >"$T/t.out" 2>"$T/t.err" && break
  grep -qi "address already in use" "$T/t.err" && (( attempt < 3 )) || { cat "$T/t.err"; fail "the script failed under torchrun"; }
  echo "torchrun's port $port was taken before it bound it; again with another"
done

/usr/bin/python3 - "$T" <<'PY'
import json, sys
t = sys.argv[1]
for rank in (0, 1):
    d = json.load(open(f"{t}/ddprun/env.{rank}"))
    r = json.load(open(f"{t}/torchrun/env.{rank}"))
    assert d["allreduce"] == r["allreduce"] == 3.0, (d, r)
    # Values that are the same by contract (the port and the error file path are per run). Both
    # launchers serve the workers' store themselves (TORCHELASTIC_USE_AGENT_STORE=True).
    for k in ["RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "ROLE_WORLD_SIZE",
              "LOCAL_WORLD_SIZE", "WORLD_SIZE", "GROUP_WORLD_SIZE", "MASTER_ADDR",
              "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
              "TORCHELASTIC_USE_AGENT_STORE", "NCCL_ASYNC_ERROR_HANDLING", "OMP_NUM_THREADS",
              "unbuffered"]:
        assert d[k] == r[k], f"rank {rank} {k}: ddprun {d[k]!r} torchrun {r[k]!r}"
    assert d["TORCHELASTIC_USE_AGENT_STORE"] == "True", d
    for k in ["MASTER_PORT", "TORCHELASTIC_ERROR_FILE"]:
        assert d[k] and r[k], f"rank {rank} {k}: ddprun {d[k]!r} torchrun {r[k]!r}"
    # torchrun sets it from 2.x on; 1.13 predates it.
    assert d["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1", d
print("same environment as torchrun for both ranks")
PY
ok "python script under ddprun: torchrun's environment, gloo all_reduce works"

# A @record-decorated script's exception becomes the root cause in the summary, with its
# traceback (as torchrun's summary shows it). Without --log_dir the error file is in ddprun's
# private folder, gone when ddprun exits: no path is shown. With --log_dir it stays, and is named.
cat > "$T/fails.py" <<'PY'
import os
from torch.distributed.elastic.multiprocessing.errors import record
def load_shard(n):
    raise ValueError(f"bad shard {n}")
@record
def main():
    if os.environ["RANK"] == "1":
        load_shard(17)
main()
PY
run_ddprun fails --nproc_per_node=2 "$T/fails.py"
expect_eq "$RC" 1 "exit code of a python exception"
expect_in "$T/fails.err" "root cause: rank 1 .*exit code 1"
expect_in "$T/fails.err" "^    error: ValueError: bad shard 17$"
expect_in "$T/fails.err" "^    traceback:$"
expect_in "$T/fails.err" "^      Traceback \(most recent call last\):$"
expect_in "$T/fails.err" "^        File \"$T/fails.py\", line 4, in load_shard$"
expect_in "$T/fails.err" "^          raise ValueError\(f\"bad shard \{n\}\"\)$"
expect_in "$T/fails.err" "^      ValueError: bad shard 17$"
expect_not_in "$T/fails.err" "error file"
run_ddprun fails_logs --nproc_per_node=2 --log_dir "$T/logs" "$T/fails.py"
expect_eq "$RC" 1 "exit code of a python exception, --log_dir"
run=$(run_dir "$T/logs")
expect_in "$T/fails_logs.err" "^    error file: $run/attempt_0/rank_1/error.json$"
expect_in "$run/attempt_0/rank_1/error.json" "bad shard 17"
expect_in "$T/fails_logs.err" "^          raise ValueError"
ok "@record error file shown as the root cause: message, traceback, the path only when kept"

# -m runs a module.
mkdir -p "$T/pkg" && echo 'import os; print("module", os.environ["RANK"])' > "$T/pkg/hello.py"
(cd "$T" && "$DDPRUN" --nproc_per_node=2 -m pkg.hello > "$T/m.out")
expect_in "$T/m.out" '^\[rank1\]: module 1$'
ok "-m module"

# The interpreter: PYTHON_EXEC, else DDPRUN_DEFAULT_PYTHON (set by the pip package's `ddprun`
# command to its own Python), which the workers do not inherit. A worker that cannot import a
# module gets a summary line naming the interpreter that ran it.
printf 'import os, sys\nprint(sys.executable, os.environ.get("DDPRUN_DEFAULT_PYTHON"))\n' > "$T/which.py"
env -u PYTHON_EXEC DDPRUN_DEFAULT_PYTHON=/usr/bin/python3 "$DDPRUN" "$T/which.py" > "$T/which.out"
expect_in "$T/which.out" '^\[rank0\]: /usr/bin/python3 None$'
echo 'import ddprun_test_no_such_module' > "$T/imports.py"
run_ddprun imports --nproc_per_node=2 "$T/imports.py"
expect_eq "$RC" 1 "exit code of a failed import"
expect_in "$T/imports.err" "^    error: ModuleNotFoundError: No module named 'ddprun_test_no_such_module' \(ran under /usr/bin/python3, set by PYTHON_EXEC; set PYTHON_EXEC to choose another\)$"
ok "the interpreter: PYTHON_EXEC, else DDPRUN_DEFAULT_PYTHON; named when an import fails"
