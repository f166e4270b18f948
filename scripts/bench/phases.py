#!/usr/bin/python3
"""Where the milliseconds of a ddprun run go: start to exit of N trivial workers, by phase.

    scripts/bench/phases.py [--ddprun build/launcher/ddprun ...] [--nproc 2] [--runs 30]

Each run is `ddprun --nproc_per_node=N --event_log=FILE /bin/true`, timed from just before its
exec to just after it is reaped (a Python subprocess.run, as scripts/bench/launcher.py does);
the event log's timestamps (wall clock, taken inside ddprun) split that time into phases:

  start        exec of ddprun -> "started": loading, options, configuration, the orphan guard's
               fork, ddprun's cgroup and private folder, the agent's set-up (signals, the
               workers' store and its thread, the watchdog)
  rendezvous   "started" -> "round_started" (one node: the local rendezvous)
  spawn        "round_started" -> the last "worker_started": the workers' folders and heartbeat
               files, the round's cgroup, fork (clone3) and exec of each worker
  run          -> the last "worker_exited": the workers themselves (/bin/true)
  round end    -> "exit": reaping, the end of the round (its cgroup killed, waited for, removed)
  exit         "exit" -> reaped: output flushed, threads joined, the private folder and the
               cgroup removed, the process's own exit

Runs with ddprun's cgroup (where it can make one) and with DDPRUN_CGROUP=0 alternate, and so
does a bare posix_spawn of N (a C program that spawns N /bin/true and waits), for scale.
Medians over --runs of each; the last row is each total over the bare spawn's, the median of
the ratios of runs made one after the other. Give several --ddprun (a build before a change and
one after it) to compare them in one run: each round runs every build in each mode in turn, so
a change of the machine's load falls on all of them alike.
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time

from benchlib import ROOT, compile_bare_spawn

PHASES = ("start", "rendezvous", "spawn", "run", "round end", "exit")


def one_run(ddprun, nproc, log, env):
    if os.path.exists(log):
        os.unlink(log)
    t0 = time.time()
    subprocess.run([ddprun, f"--nproc_per_node={nproc}", f"--event_log={log}", "/bin/true"], env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    t1 = time.time()
    events = [json.loads(line) for line in open(log)]
    first = lambda name: min(e["time"] for e in events if e["event"] == name)
    last = lambda name: max(e["time"] for e in events if e["event"] == name)
    marks = [t0, first("started"), first("round_started"), last("worker_started"), last("worker_exited"),
             first("exit"), t1]
    return [b - a for a, b in zip(marks, marks[1:])] + [t1 - t0]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ddprun", action="append",
                    help="a ddprun to measure (repeatable); default build/launcher/ddprun")
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--runs", type=int, default=30)
    args = ap.parse_args()
    ddpruns = args.ddprun or [os.path.join(ROOT, "build", "launcher", "ddprun")]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cgroup_modes = {"cgroup": dict(env, DDPRUN_CGROUP="1"), "DDPRUN_CGROUP=0": dict(env, DDPRUN_CGROUP="0")}
    # One column per build and mode: (name, ddprun, environment).
    columns = [(name if len(ddpruns) == 1 else f"{name}, {i + 1}", ddprun, mode_env)
               for i, ddprun in enumerate(ddpruns) for name, mode_env in cgroup_modes.items()]
    with tempfile.TemporaryDirectory() as tmp:
        bare = compile_bare_spawn(tmp)
        log = os.path.join(tmp, "events.jsonl")
        rows = {name: [] for name, _, _ in columns}
        bare_times = []
        for _ in range(args.runs):
            for name, ddprun, mode_env in columns:
                rows[name].append(one_run(ddprun, args.nproc, log, mode_env))
            t0 = time.perf_counter()
            subprocess.run([bare, str(args.nproc), "/bin/true"], env=env, check=True)
            bare_times.append(time.perf_counter() - t0)
    print(f"{args.nproc} workers of /bin/true, median of {args.runs} runs of each, interleaved; "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    for i, ddprun in enumerate(ddpruns):
        print(f"ddprun {i + 1}: {ddprun}")
    print(f"| phase | {' | '.join(name for name, _, _ in columns)} |")
    print(f"|---|{'---|' * len(columns)}")
    for i, phase in enumerate(PHASES + ("total",)):
        cells = [f"{statistics.median(r[i] for r in rows[name]) * 1e3:.2f} ms" for name, _, _ in columns]
        print(f"| {phase} | {' | '.join(cells)} |")
    ratios = [f"{statistics.median(r[-1] / b for r, b in zip(rows[name], bare_times)):.2f}x" for name, _, _ in columns]
    print(f"| total / a bare posix_spawn of {args.nproc} ({statistics.median(bare_times) * 1e3:.2f} ms) "
          f"| {' | '.join(ratios)} |")


if __name__ == "__main__":
    main()
