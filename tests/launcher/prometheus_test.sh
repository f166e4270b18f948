#!/usr/bin/env bash
# /metrics read by the real thing: Debian's Prometheus server (2.42) scrapes a real ddprun on
# loopback every second, and its HTTP API answers with ddprun's series; promtool's linter passes
# ddprun's output clean. Skipped, with the reason, where prometheus or promtool is not installed
# (scripts/install-deps.sh installs them; CI runs this test).
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"

command -v prometheus >/dev/null || skip "prometheus is not installed (apt-get install prometheus)"
command -v promtool >/dev/null || skip "promtool is not installed (apt-get install prometheus)"

# stepper: each rank prints a step every 0.05 s until $T/stop exists.
worker stepper <<'SH'
#!/bin/bash
n=0
while [ ! -e "$T/stop" ]; do n=$((n + 1)); echo "step $n"; sleep 0.05; done
SH
# A run id with a double quote and a backslash, which the format escapes: Prometheus must read it
# back unchanged.
run_id='job "7"\x'
"$DDPRUN" --nproc_per_node=2 --status_port=0 --progress_pattern='^step (?<step>[0-9]+)' --rdzv_id="$run_id" \
  "$T/stepper" >"$T/job.out" 2>"$T/job.err" &
job=$!
stop_job() { touch "$T/stop"; wait "$job" || true; }
url=$(status_url "$T/job.err")
target=${url#http://}

# 1. promtool's linter on ddprun's output, once ranks have steps (every family present).
python3 - "$url" "$T/metrics.txt" <<'PY' || { stop_job; fail "reading /metrics"; }
import sys, time, urllib.request
url, out = sys.argv[1], sys.argv[2]
deadline = time.monotonic() + 60
while True:
    text = urllib.request.urlopen(url + "/metrics").read()
    if b'ddprun_rank_steps_total{rank="1"' in text:
        break
    assert time.monotonic() < deadline, text
    time.sleep(0.1)
open(out, "wb").write(text)
PY
promtool check metrics <"$T/metrics.txt" >"$T/promtool.out" 2>&1 || { cat "$T/promtool.out" >&2; stop_job; fail "promtool check metrics"; }
[[ ! -s "$T/promtool.out" ]] || { cat "$T/promtool.out" >&2; stop_job; fail "promtool check metrics is not clean"; }
ok "promtool check metrics: clean"

# 2. Prometheus scrapes ddprun every second (a free port, a storage folder of the test's own).
# A port found free may be taken before Prometheus binds it: then it says so and exits; another try.
cat >"$T/prometheus.yml" <<YAML
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: ddprun
    static_configs:
      - targets: ['$target']
YAML
for try in 1 2 3; do
  port=$(free_tcp_port)
  prometheus --config.file="$T/prometheus.yml" --storage.tsdb.path="$T/data.$try" \
    --web.listen-address="127.0.0.1:$port" >"$T/prometheus.log" 2>&1 &
  prom=$!
  # Ready, or gone (the port was taken).
  wait_for 60 bash -c "grep -q 'Server is ready to receive web requests' '$T/prometheus.log' || ! kill -0 $prom 2>/dev/null"
  kill -0 "$prom" 2>/dev/null && break
  wait "$prom" || true
  (( try < 3 )) || { cat "$T/prometheus.log" >&2; stop_job; fail "prometheus did not start"; }
done
python3 - "http://127.0.0.1:$port" "$run_id" <<'PY' || { cat "$T/prometheus.log" >&2; stop_job; fail "Prometheus' API"; }
import json, sys, time, urllib.parse, urllib.request
api, run_id = sys.argv[1], sys.argv[2]
def query(q):
    answer = json.load(urllib.request.urlopen(api + "/api/v1/query?" + urllib.parse.urlencode({"query": q})))
    assert answer["status"] == "success", answer
    return answer["data"]["result"]
deadline = time.monotonic() + 90
while not query("ddprun_rank_steps_total"):
    assert time.monotonic() < deadline, "no ddprun_rank_steps_total in Prometheus after 90 s"
    time.sleep(0.2)
steps = query("ddprun_rank_steps_total")
assert sorted(s["metric"]["rank"] for s in steps) == ["0", "1"], steps
assert all(s["metric"]["job"] == "ddprun" and float(s["value"][1]) > 0 for s in steps), steps
info = query("ddprun_info")
assert len(info) == 1 and info[0]["metric"]["run_id"] == run_id, info
targets = json.load(urllib.request.urlopen(api + "/api/v1/targets"))["data"]["activeTargets"]
assert [(t["health"], t["lastError"]) for t in targets] == [("up", "")], targets
print("Prometheus has", ", ".join("rank %s at step %s" % (s["metric"]["rank"], s["value"][1]) for s in steps))
PY
kill "$prom"; wait "$prom" || true
stop_job
ok "Prometheus scraped ddprun: ddprun_rank_steps_total of both ranks, the run id unharmed by its escapes"
