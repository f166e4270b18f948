#!/usr/bin/python3
"""Hang detection benchmark (ddprun --hang_timeout): what the heartbeats cost, how fast a hang is found.

  scripts/bench/hangs.py [--build build] [--runs 3]

Prints three tables:
  1. one heartbeat (ddprun::heartbeat(): a utimensat of DDPRUN_HEARTBEAT_FILE) in ns, under
     ddprun (the file watched by its inotify) and with the variable unset (a no-op);
  2. a DDP step of bench_ddp (mlp and many_small, 2 gloo ranks) with the library's beats and
     without them (DDPRUN_HEARTBEAT_FILE removed from the workers' environment);
  3. detection latency for --hang_timeout of 1, 5 and 30 s: from a worker's last beat to
     ddprun's "hang" event and to its exit (the failure summary), from --event_log. Two workers
     beat every 0.1 s; rank 1 stops after 5 beats.
  4. a beat storm (--storm-only: this table alone): bench_heartbeat's 200000 unthrottled beats
     (as the worker library beats at every collective) under ddprun --hang_timeout=60, alone and
     with --status_port=0: ddprun's own CPU time (its rusage, less the worker's, which
     /usr/bin/time reports) with the beats, less the same without them (DDPRUN_HEARTBEAT_FILE
     removed from the worker's environment), per beat; and the worker's time per beat. Each
     --ddprun binary given (default: the build's), to compare before and after a change.
"""
import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile

from benchlib import ROOT


def run(cmd, env=None):
    return subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout


def heartbeat_cost(build, runs):
    bench = os.path.join(build, "worker", "bench_heartbeat")
    ddprun = os.path.join(build, "launcher", "ddprun")
    env = dict(os.environ)
    env.pop("DDPRUN_HEARTBEAT_FILE", None)
    rows = []
    for label, cmd in (("under ddprun (file watched)", [ddprun, bench, "200000"]),
                       ("DDPRUN_HEARTBEAT_FILE unset", [bench, "200000"])):
        ns = [float(re.search(r"ns_per_call=([0-9.]+)", run(cmd, env)).group(1)) for _ in range(runs)]
        rows.append((label, statistics.median(ns)))
    print("\n1. one heartbeat (median of %d runs of 200000 calls)" % runs)
    print(f"{'':30} {'ns/call':>8}")
    for label, ns in rows:
        print(f"{label:30} {ns:8.1f}")


def step_cost(build, runs):
    bench = os.path.join(build, "worker", "bench_ddp")
    ddprun = os.path.join(build, "launcher", "ddprun")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    print("\n2. DDP step, 2 gloo ranks, bench_ddp --mode ddp (median of %d runs; ms)" % runs)
    print(f"{'model':12} {'with beats':>11} {'without':>9}")
    for model in ("mlp", "many_small"):
        args = ["--mode", "ddp", "--model", model, "--steps", "100", "--warmup", "10"]
        cells = []
        for wrap in ([], ["env", "-u", "DDPRUN_HEARTBEAT_FILE"]):
            ms = []
            for _ in range(runs):
                out = run([ddprun, "--nproc_per_node=2"] + wrap + [bench] + args, env)
                ms.append(float(re.search(r"median_ms=([0-9.]+)", out).group(1)))
            cells.append(statistics.median(ms))
        print(f"{model:12} {cells[0]:11.3f} {cells[1]:9.3f}")


WORKER = """#!/bin/bash
n=0
while true; do
  touch "$DDPRUN_HEARTBEAT_FILE"; date +%s.%N > "$OUT/lastbeat.$RANK"; n=$((n + 1))
  if [ "$RANK" = 1 ] && [ $n -ge 5 ]; then exec sleep 1000; fi
  sleep 0.1
done
"""


def detection(build, runs):
    ddprun = os.path.join(build, "launcher", "ddprun")
    print("\n3. detection latency: seconds from rank 1's last beat (median of runs)")
    print(f"{'timeout s':>9} {'runs':>5} {'to hang event':>14} {'to summary':>11} {'beyond timeout':>15}")
    for timeout in (1, 5, 30):
        found, summary = [], []
        for _ in range(runs if timeout < 30 else 1):
            with tempfile.TemporaryDirectory() as tmp:
                worker = os.path.join(tmp, "worker")
                with open(worker, "w") as f:
                    f.write(WORKER)
                os.chmod(worker, 0o755)
                events = os.path.join(tmp, "events.jsonl")
                env = dict(os.environ, OUT=tmp)
                rc = subprocess.run([ddprun, "--nproc_per_node=2", f"--hang_timeout={timeout}",
                                     f"--event_log={events}", worker], env=env,
                                    capture_output=True).returncode
                assert rc == 124, rc
                lines = [json.loads(l) for l in open(events)]
                last = float(open(os.path.join(tmp, "lastbeat.1")).read())
                found.append(next(e["time"] for e in lines if e["event"] == "hang") - last)
                summary.append(next(e["time"] for e in lines if e["event"] == "exit") - last)
        f, s = statistics.median(found), statistics.median(summary)
        print(f"{timeout:9} {len(found):5} {f:14.3f} {s:11.3f} {s - timeout:15.3f}")


def storm_run(ddprun, bench, calls, options, beats):
    """One run: ddprun's CPU seconds with its worker's (RUSAGE_CHILDREN: ddprun reaps the
    worker), the worker's alone (/usr/bin/time's), and the worker's ns per heartbeat call."""
    wrap = [] if beats else ["env", "-u", "DDPRUN_HEARTBEAT_FILE"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([ddprun, "--nproc_per_node=1", "--hang_timeout=60"] + options + wrap +
                          ["/usr/bin/time", "-f", "worker_cpu=%U %S", bench, str(calls)],
                          capture_output=True, text=True, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    worker = sum(float(x) for x in re.search(r"worker_cpu=([0-9.]+ [0-9.]+)", done.stderr).group(1).split())
    ns = float(re.search(r"ns_per_call=([0-9.]+)", done.stdout).group(1))
    return total, worker, ns


def storm(build, ddprun_binaries, runs):
    bench = os.path.join(build, "worker", "bench_heartbeat")
    calls = 200000
    print("\n4. a beat storm: %d unthrottled heartbeats of one worker (median of %d runs)" % (calls, runs))
    print(f"{'ddprun':40} {'options':16} {'ddprun us/beat':>15} {'worker ns/beat':>15}")
    for ddprun in ddprun_binaries:
        for options in ([], ["--status_port=0"]):
            per_beat, worker_ns = [], []
            for _ in range(runs):
                cpu = {}
                for beats in (True, False):
                    total, worker, ns = storm_run(ddprun, bench, calls, options, beats)
                    cpu[beats] = total - worker
                    if beats:
                        worker_ns.append(ns)
                per_beat.append((cpu[True] - cpu[False]) / calls * 1e6)
            label = os.path.relpath(ddprun, ROOT) if ddprun.startswith(ROOT) else ddprun
            print(f"{label[-40:]:40} {' '.join(options) or '-':16} {statistics.median(per_beat):15.3f} "
                  f"{statistics.median(worker_ns):15.1f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--ddprun", action="append", help="for table 4: a ddprun binary (repeatable)")
    parser.add_argument("--storm-only", action="store_true", help="table 4 alone")
    args = parser.parse_args()
    if not args.storm_only:
        heartbeat_cost(args.build, args.runs)
        step_cost(args.build, args.runs)
        detection(args.build, args.runs)
    storm(args.build, args.ddprun or [os.path.join(args.build, "launcher", "ddprun")], args.runs)


if __name__ == "__main__":
    sys.exit(main())
