#!/usr/bin/env bash
# torchrun 2.11's options on ddprun, compared with torchrun 2.11 itself (from the venv of
# scripts/torch2-env.sh; skipped, saying so, without it): every option of its --help is accepted;
# --virtual_local_rank, --signals_to_handle, --duplicate_std*_filters, --logs_specs and
# --event_log_handler give the workers the same environment and the same filtered lines;
# --numa_binding without a GPU says once why it is skipped; a traceback PyTorch 2.x prefixes
# itself is not prefixed twice; NCCL_ASYNC_ERROR_HANDLING only for a torch that reads it.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
source "$DDPRUN_SOURCE_DIR/scripts/torch2-env.sh"
TORCHRUN=$TORCH2_VENV/bin/torchrun
[[ -x "$TORCHRUN" ]] || skip "torchrun 2.x is not installed in $TORCH2_VENV (scripts/install-deps.sh makes it)"
HERE=$DDPRUN_TESTS_DIR/launcher/torchrun
cp "$HERE"/*.py "$T/"
cd "$T"

# 1. Every option of torchrun's --help, both spellings, is accepted (--print_config: nothing runs).
"$TORCH2_PYTHON" "$HERE/options.py" >"$T/options"
[[ $(wc -l <"$T/options") -gt 40 ]] || fail "torchrun's parser gave too few options: $(cat "$T/options")"
while read -r -a option; do
  run_ddprun print "${option[@]}" --print_config x.py
  [[ $RC == 0 ]] || fail "ddprun refused torchrun's ${option[*]} (exit $RC): $(cat "$T/print.err")"
done <"$T/options"
"$DDPRUN" --help >"$T/help"
for option in --virtual-local-rank --signals-to-handle --numa-binding --duplicate-stdout-filters \
  --duplicate-stderr-filters --logs-specs --event-log-handler; do
  grep -q -- "$option" "$T/help" || fail "ddprun --help does not list $option"
done
ok "every option of torchrun 2.11's --help is accepted ($(wc -l <"$T/options") spellings)"

# 2. The same options on both launchers, some as PET_ variables: the workers' environment and
# the filtered logs. torchrun's filters read its --tee'd streams, hence --tee 3 on both.
launch() {  # launch NAME LAUNCHER [ARGS...]: the workers' env.RANK files in $T/NAME/
  local name=$1 launcher=$2; shift 2
  mkdir -p "$T/$name"
  set +e
  OUT_DIR=$T/$name PYTHON_EXEC=$TORCH2_PYTHON "$launcher" "$@" env_worker.py >"$T/$name.out" 2>"$T/$name.err"
  RC=$?
  set -e
  [[ $RC == 0 ]] || { cat "$T/$name.err" >&2; fail "$name: exit $RC"; }
}
same_env() {  # same_env A B: both runs' workers saw the same variables
  for rank in 0 1; do
    expect_eq "$(cat "$T/$2/env.$rank")" "$(cat "$T/$1/env.$rank")" "rank $rank's environment under $2 (vs $1)"
  done
}
options=(--nproc-per-node=2 --virtual-local-rank --tee 3 --duplicate-stdout-filters 'apple,orange,, pear'
         --duplicate_stderr_filters apple --logs-specs default --event-log-handler null)
export PET_SIGNALS_TO_HANDLE=SIGTERM,SIGUSR1 CUDA_VISIBLE_DEVICES=4,6
launch torchrun "$TORCHRUN" --standalone --log-dir "$T/torchrun-logs" "${options[@]}"
launch ddprun "$DDPRUN" --log-dir "$T/ddprun-logs" "${options[@]}"
unset PET_SIGNALS_TO_HANDLE CUDA_VISIBLE_DEVICES
expect_in "$T/torchrun/env.1" '"LOCAL_RANK": "0"'
expect_in "$T/torchrun/env.1" '"CUDA_VISIBLE_DEVICES": "6"'
expect_in "$T/torchrun/env.1" '"TORCHELASTIC_SIGNALS_TO_HANDLE": "SIGTERM,SIGUSR1"'
same_env torchrun ddprun
# Each line with its own launcher's prefix ([default0]: and [rank0]: ), so compared without it.
filtered() {  # filtered FOLDER NAME: the lines of NAME under FOLDER, prefix removed, sorted
  local file
  file=$(find "$1" -name "$2")
  [[ -n "$file" ]] || fail "no $2 under $1"
  sed -E 's/^\[[a-z]+[0-9]+\]: ?//' "$file" | sort
}
for name in filtered_stdout.log filtered_stderr.log; do
  expect_eq "$(filtered "$T/ddprun-logs" $name)" "$(filtered "$T/torchrun-logs" $name)" "$name"
done
expect_eq "$(filtered "$T/ddprun-logs" filtered_stdout.log | tr '\n' '|')" "an apple|an apple|orange, pear|orange, pear|" \
  "ddprun's filtered_stdout.log"
ok "--virtual_local_rank, PET_SIGNALS_TO_HANDLE and --duplicate_std*_filters as torchrun 2.11"

# 3. Defaults: TORCHELASTIC_SIGNALS_TO_HANDLE, LOCAL_RANK, and the NCCL variables a torch 2.11
# worker sees: TORCH_NCCL_ASYNC_ERROR_HANDLING only, as with torchrun (no deprecation warning).
launch torchrun-defaults "$TORCHRUN" --standalone --nproc-per-node=2
launch ddprun-defaults "$DDPRUN" --nproc-per-node=2
same_env torchrun-defaults ddprun-defaults
expect_in "$T/ddprun-defaults/env.0" '"NCCL_ASYNC_ERROR_HANDLING": null'
expect_in "$T/ddprun-defaults/env.0" '"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"'
expect_in "$T/ddprun-defaults/env.1" '"TORCHELASTIC_SIGNALS_TO_HANDLE": "SIGTERM,SIGINT,SIGHUP,SIGQUIT"'
ok "the defaults' environment as torchrun 2.11's, with no NCCL_ASYNC_ERROR_HANDLING for torch 2.11"

# 4. PyTorch 1.13 reads only NCCL_ASYNC_ERROR_HANDLING: ddprun's bootstrap sets it there.
if [[ -n "${TORCH_PYTHON:-}" ]] && "$TORCH_PYTHON" -c 'import torch, sys; sys.exit(torch.__version__ >= "2")' 2>/dev/null; then
  mkdir -p "$T/old"
  OUT_DIR=$T/old PYTHON_EXEC=$TORCH_PYTHON run_ddprun old --nproc-per-node=1 env_worker.py
  expect_eq "$RC" 0 "exit code with torch 1.13"
  expect_in "$T/old/env.0" '"NCCL_ASYNC_ERROR_HANDLING": "1"'
  expect_in "$T/old/env.0" '"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"'
  ok "a torch 1.13 worker still gets NCCL_ASYNC_ERROR_HANDLING=1"
else
  echo "note: no PyTorch 1.13 (TORCH_PYTHON=${TORCH_PYTHON:-unset}); its NCCL_ASYNC_ERROR_HANDLING is not checked"
fi

# 5. Python plug-ins other than torchrun's defaults: one line each, exit 64, nothing started.
run_ddprun logs-specs --logs-specs=mine env_worker.py
expect_eq "$RC" 64 "--logs-specs=mine's exit code"
expect_eq "$(wc -l <"$T/logs-specs.err")" 1 "lines for --logs-specs=mine"
expect_in "$T/logs-specs.err" "^ddprun: error: --logs_specs=mine: .*only 'default' is accepted"
run_ddprun handler --event-log-handler=console env_worker.py
expect_eq "$RC" 64 "--event-log-handler=console's exit code"
expect_in "$T/handler.err" "^ddprun: error: --event_log_handler=console: .*--event_log FILE"
ok "--logs_specs and --event_log_handler other than torchrun's defaults are refused in one line"

# 6. --numa_binding: without a GPU (torchrun 2.11 then fails in torch.cuda), one line says why
# binding is skipped and the job runs; with one, each worker runs on its GPU's node's CPUs.
mkdir -p "$T/numa"
OUT_DIR=$T/numa PYTHON_EXEC=$TORCH2_PYTHON run_ddprun numa --nproc-per-node=1 --numa-binding=node env_worker.py
expect_eq "$RC" 0 "--numa-binding=node's exit code"
if nvidia-smi -L >/dev/null 2>&1; then
  expect_not_in "$T/numa.err" "numa_binding"
  ok "--numa_binding=node with a GPU"
else
  expect_eq "$(grep -c 'numa_binding' "$T/numa.err")" 1 "lines about --numa_binding"
  expect_in "$T/numa.err" "^ddprun: --numa_binding=node skipped: no GPU visible"
  ok "--numa_binding without a GPU: one line says why it is skipped"
fi

# 7. A traceback PyTorch 2.x prefixes with [rank1]: itself is shown once prefixed.
PYTHON_EXEC=$TORCH2_PYTHON run_ddprun raise --nproc-per-node=2 --log-dir "$T/raise-logs" raise_in_distributed.py
expect_eq "$RC" 1 "exit code of a raising rank"
# PyTorch's own prefix, as the worker wrote it (the log file has no prefix of ddprun's)
expect_in "$(find "$T/raise-logs" -path '*rank_1/stderr.log')" '^\[rank1\]: RuntimeError: boom in distributed code$' 
expect_in "$T/raise.err" '^\[rank1\]: RuntimeError: boom in distributed code$'
expect_not_in "$T/raise.err" '\[rank1\]: \[rank1\]:'
ok "no doubled [rank1]: prefix"

# 8. --signals_to_handle=SIGUSR1 makes SIGUSR1 stop the job after forwarding it, as torchrun;
# unlisted, it is forwarded only and the job goes on.
worker usr1.sh <<'SH'
#!/usr/bin/env bash
trap 'touch "$T/usr1.$RANK.$1"' USR1
touch "$T/ready.$RANK.$1"
while [[ ! -e "$T/finish.$1" ]]; do sleep 0.05; done
SH
for listed in yes no; do
  signals=SIGTERM
  [[ $listed == yes ]] && signals=SIGTERM,SIGUSR1
  "$DDPRUN" --nproc-per-node=2 --signals-to-handle=$signals "$T/usr1.sh" $listed >"$T/usr1.$listed.out" 2>&1 &
  pid=$!
  wait_for 60 test -e "$T/ready.0.$listed" -a -e "$T/ready.1.$listed"
  kill -USR1 $pid
  wait_for 60 test -e "$T/usr1.0.$listed" -a -e "$T/usr1.1.$listed"
  if [[ $listed == no ]]; then touch "$T/finish.no"; fi
  set +e; wait $pid; RC=$?; set -e
  if [[ $listed == yes ]]; then
    expect_eq "$RC" 138 "exit code after a listed SIGUSR1 (128+10)"
  else
    expect_eq "$RC" 0 "exit code after an unlisted SIGUSR1 (forwarded only)"
  fi
done
ok "--signals_to_handle decides whether SIGUSR1 stops the job"
wait_for 30 no_leftovers
