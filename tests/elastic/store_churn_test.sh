#!/usr/bin/env bash
# The workers' store under churn (issue 44): thousands of simulated ranks on ddprun's agent store
# die mid-barrier, reconnect as torch's client does, and are answered; nothing is kept of them
# (ddprun's descriptors come back), and the restarted round's store starts empty
# (store_churn_worker.py says what each step checks). ARGS: the number of ranks.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
ranks=${1:-16384}
# ddprun and the worker each hold a descriptor a rank: both under the hard limit, with room.
limit=$(ulimit -Hn)
if [[ $limit != unlimited ]] && (( ranks > limit - 1000 )); then
  echo "ulimit -Hn is $limit: $((limit - 1000)) ranks rather than $ranks"
  ranks=$((limit - 1000))
fi
PYTHON_EXEC=/usr/bin/python3 run_ddprun churn --max_restarts=1 "$DDPRUN_TESTS_DIR/elastic/store_churn_worker.py" "$ranks"
sed 's/^\[rank0\]: //' "$T/churn.out"
[[ $RC == 0 ]] || { cat "$T/churn.err"; fail "the churn job failed (exit code $RC)"; }
expect_eq "$(grep -c '^\[rank0\]: ok:' "$T/churn.out")" 9 "checks passed"
ok "$ranks ranks churned on the agent store twice; nothing kept; the next round's store empty; a slow reader served"
