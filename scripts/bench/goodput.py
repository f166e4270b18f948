#!/usr/bin/python3
"""Goodput under faults: a 2-worker gloo DDP training script as users write it
(goodput_python_worker.py: it resumes from the latest checkpoint, saves one every --save_every
steps) runs for --seconds of wall time while the driver SIGKILLs a random worker (--kill worker)
or a whole node (--kill node) at Poisson times (mean --mean_kill_interval), the same seeded
schedule (--seed) for every launcher; torch 2.x (the venv of scripts/torch2-env.sh), CPU.

  python3 scripts/bench/goodput.py [--seconds 120] [--mean_kill_interval 15] [--seed 1]
      [--save_every 10] [--fault_free_seconds 30] [--ddprun build/launcher/ddprun]
      [--kill worker|node] [--only torchrun,ddprun-defaults,...]

The launchers (--only picks some, comma-separated), each with --max_restarts=1000:
  torchrun               the venv's torchrun, checkpoints on disk
  ddprun-defaults        ddprun and no other option that changes what it does, checkpoints on disk
  ddprun-cold            ddprun --warm_start=off, checkpoints on disk
  ddprun-warm            ddprun --warm_start=on --preload=torch._dynamo, checkpoints on disk
  ddprun-snapshots       ddprun's defaults, checkpoints in DDPRUN_SNAPSHOT_DIR (memory; with
                         --kill node replicated to the other nodes: docs/guides/snapshots.md)
  ddprun-snapshots-gasp  the same and --snapshot_signal=SIGUSR1: on a failure the survivors save the
                         step they hold (the worker's --gasp handler) and exit, then the restart
--injector ddprun (one node, --kill worker, the ddprun launchers only): the driver kills nothing;
ddprun's own --chaos=mtbf=MEAN,kinds=kill,seed=SEED injects the faults (docs/guides/failures.md,
"Rehearse failures"), and after each launcher's run the benchmark's own measure of the share of
the wall time that trained (final step x step time / the launch to the end) is printed next to
the goodput ledger's ETT% (the event log's last goodput record), with --agree POINTS: exit 1 when
they differ by more. With --fault_free_seconds 0 the fault-free run is skipped and the step time
is that of the run with the faults (a quick check: no second run, and no load change between two).
--python PATH: the workers' interpreter (default: the torch 2.x venv's).
"On disk": the driver's temporary folder (TMPDIR, else /tmp). Every launcher saves every
--save_every steps (a temporary name, then os.replace), rank 0 only, and keeps the last two.
ddprun also gets --event_log, which changes nothing but what it writes.

--kill worker (the default): one launcher with --nproc_per_node=2; a kill goes to one of its
workers. --kill node (root only): two nodes of one worker each on loopback (127.0.0.2, which
hosts the rendezvous, and 127.0.0.3), each in a mount namespace of its own with a private
/dev/shm and /var/tmp (tests/elastic/nodes.sh's nsnode: its snapshot folder is its own, and only
ddprun's replication carries a file to the other node; the disk folder is shared, as a shared
file system would be), the TCP rendezvous (c10d) with the job's secret (DDPRUN_RDZV_SECRET, which
the replication needs). A kill SIGKILLs every process of the node that is not the rendezvous'
host (its launcher and its workers at once: the node is gone). ddprun runs with
--rdzv_conf spares=1 and a third node started as a hot spare; after each kill a new node is
started (ddprun: the next spare; torchrun, which has no spares: the replacement its survivors wait
for, the best a scheduler can do), so that there is always one.

Each launcher first runs the script without a fault for --fault_free_seconds: its fault-free step
time is the time from its first step to its last over the steps between (checkpoint saves
included), then with the kills. Effective training time = the final step (the last one before the
end of the wall time) x the fault-free step time / the wall time, counted from the first step and
from the launch; "to the first step" is the launch to the first step of the run with the kills.
The step time of the run with the kills (the same measure over its rounds' stretches of steps) is
printed beside the fault-free one: where they differ, the machine's load changed between the two
runs (other work on it), and the effective times are off by as much.

The save stall, from the worker's DIR/saves: the median time rank 0's training stood still for a
regular save, and the share of the wall time of the run with the kills spent so; and the gasps'
saves (each made by a survivor: how many, and the median time).

A kill goes to a round not yet hit: when a kill is due, the driver waits until the workers of a
round that no kill has hit yet (none of the processes of an earlier kill) are all there, and
kills one worker (the seeded choice of the two, by pid order) or the non-host node. So no round
is killed twice, and a kill due during a restart waits for its end; kills due after the wall time
are not made.
The kill -> next step delay is from the kill to the first step of a later round than the one
killed (rank 0 writes its round with each step: how many rank-0 processes started before it): a
kill whose next round is killed again before its first step waits for the step of the round
after. A kill with no step after it before the end has no delay ("kills": made of due (with a
step after)). The rounds are the round of the last step: more than the kills where rounds failed
by themselves (torchrun 2.11's restarted workers can fail gloo's connectFullMesh, "Connection
refused", and be restarted again).

From ddprun's event log (with --kill node, the host node's): the failure kind of each killed
worker (SIGKILL from outside: 'killed'; 'host_oom' would be wrong where the kernel killed nothing),
any other worker failure, the restarts that waited a backoff and those counted toward a crash loop
(failures.md: a kill from outside counts nothing and waits nothing); with --kill node, the
snapshot_restore records of every node (files fetched from the other nodes before a round).
A launcher that exits before the end (with --kill node: any node not killed), or leaves a process
of the run behind (the driver kills it), is named in the result column and its figures are not
given. GOODPUT_KEEP=DIR keeps a copy of each run's folder (logs, steps; not the checkpoints) in DIR.
The snapshot folders the workers name are removed after each run (ddprun keeps one after
a stop by a signal).
"""
import argparse
import collections
import itertools
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import BENCH_DIR, ROOT, free_port, stop_launcher, torch2_python, torchrun
from goodput_jobs import NSNODE, Nodes, Single, processes, remove_snapshot_dirs, sweep, wait, workers

WORKER = os.path.join(BENCH_DIR, "goodput_python_worker.py")
NPROC = 2  # workers of the job: 2 on one node (--kill worker), 1 on each of 2 nodes (--kill node)
MAX_RESTARTS = "--max_restarts=1000"
VARIANTS = ("torchrun", "ddprun-defaults", "ddprun-cold", "ddprun-warm", "ddprun-snapshots", "ddprun-snapshots-gasp")
SECRET = "goodput-bench-secret"


def kill_schedule(seed, mean, seconds):
    """[(seconds after the launch, a number in [0, 1) that picks the worker)]: a Poisson process of
    rate 1/mean within `seconds`, the same for every launcher."""
    rng = random.Random(seed)
    schedule, at = [], rng.expovariate(1 / mean)
    while at < seconds:
        schedule.append((at, rng.random()))
        at += rng.expovariate(1 / mean)
    return schedule


def run_job(job, d, seconds, schedule):
    """Runs `job` (Single or Nodes, started) for `seconds`, SIGKILLing at each time of `schedule`
    as the docstring says, then stops it. Returns the end (monotonic), the kills [(monotonic time,
    pid)], why it ended before the end (None where it did not) and what was left behind."""
    launch = job.launch
    end = launch + seconds
    kills, hit, seen = [], set(), {}

    def fresh_round():
        """The workers of a round no kill has hit, once they are all there."""
        fresh = []
        for tree in job.trees():
            seen.update(tree)
            fresh += [pid for pid in workers(tree, d) if pid not in hit]
        return sorted(fresh) if len(fresh) >= NPROC else None
    try:
        for at, pick in schedule:
            wait(job.alive, launch + at)
            while round_workers := wait(job.alive, end, fresh_round):  # none: the end, or the launcher exited
                hit.update(round_workers)
                killed_at = time.monotonic()
                victim = job.kill(round_workers, pick)
                if victim is None:
                    continue
                kills.append((killed_at, victim))
                break
        wait(job.alive, end)
        end = min(end, time.monotonic())
        exited = job.exited()
        for tree in job.trees():
            seen.update(tree)
    finally:
        for p in job.procs:
            if p.poll() is None:
                p.terminate()
        for p in job.procs:
            stop_launcher(p)
        left = sweep(seen, d)
    return {"end": end, "kills": kills, "exited": exited, "left": left}


def read_steps(d, end):
    """[(step, monotonic time, round, restart count)] that rank 0 wrote up to `end`, in order."""
    path = os.path.join(d, "steps")
    if not os.path.exists(path):
        return []
    steps = []
    with open(path) as f:
        for line in f:
            fields = line.split()
            if len(fields) == 4 and float(fields[1]) <= end:  # a line cut by a kill has fewer
                steps.append((int(fields[0]), float(fields[1]), int(fields[2]), int(fields[3])))
    return steps


def read_saves(d):
    """{"every": [seconds], "gasp": [seconds]} from the worker's saves."""
    saves = {"every": [], "gasp": []}
    path = os.path.join(d, "saves")
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                fields = line.split()
                if len(fields) == 3 and fields[0] in saves:
                    saves[fields[0]].append(float(fields[2]))
    return saves


def step_time(steps):
    """Seconds a step over the rounds' stretches of steps (each from its round's first step to its
    last: checkpoint saves in, restarts out); None without two steps in a round."""
    spent = stepped = 0
    for _, stretch in itertools.groupby(steps, key=lambda step: step[2]):
        stretch = list(stretch)
        spent += stretch[-1][1] - stretch[0][1]
        stepped += stretch[-1][0] - stretch[0][0]
    return spent / stepped if stepped else None


def kill_to_next_step(kills, steps):
    """For each kill, the seconds to the first step of a later round. The round killed is the one
    of the last step before the kill, or later where restarts came without a step: the i-th kill
    (from 0) hits round i at the earliest, as no round is killed twice."""
    delays = []
    for i, (killed_at, _) in enumerate(kills):
        before = [round_ for _, t, round_, _ in steps if t <= killed_at]
        killed_round = max([i] + before[-1:])
        after = [t for _, t, round_, _ in steps if t > killed_at and round_ > killed_round]
        if after:
            delays.append(after[0] - killed_at)
    return delays


def event_summary(d, logs, victims):
    """From ddprun's event logs (`logs`: the first is the one whose failures and restarts count):
    Counters of the killed workers' failure kinds and of the other failures' kinds, the backoffs
    waited (seconds), the restarts counted toward a crash loop, a 'stop' decision's reason, and
    every log's snapshot_restore records that fetched something."""
    def records(log):
        if not os.path.exists(log):
            return []
        with open(log) as f:
            return [json.loads(line) for line in f if line.strip()]
    main = records(logs[0])
    exited = {r["pid"]: (r["attempt"], r["rank"]) for r in main if r["event"] == "worker_exited"}
    failed = {(r["attempt"], r["rank"]): r["kind"] for r in main if r["event"] == "worker_failed"}
    victim_keys = [exited.get(pid) for pid in victims]
    kinds = collections.Counter(failed.get(key, "no record") for key in victim_keys)
    others = collections.Counter(kind for key, kind in failed.items() if key not in victim_keys)
    restarts = [r for r in main if r["event"] == "restart"]
    restores = [r for log in logs for r in records(log) if r["event"] == "snapshot_restore" and r.get("fetched")]
    # failures.md: a restart counted toward a crash loop says "no progress since the start".
    return {"kinds": kinds, "others": others,
            "backoffs": [r["backoff"] for r in restarts if r.get("backoff", 0) > 0],
            "crash_loop": sum("no progress since the start" in r.get("reason", "") for r in restarts),
            "stop": [r["reason"] for r in restarts if r["decision"] == "stop"],
            "restores": [r["seconds"] for r in restores]}


def launcher_tail(d, lines=15):
    """The last lines of the launcher's output (of each node's)."""
    tails = []
    for name in sorted(os.listdir(d)):
        if name.startswith("launcher.log"):
            with open(os.path.join(d, name), errors="replace") as f:
                text = "".join(f.readlines()[-lines:])
            if text:
                tails.append(f"--- {name}\n{text}")
    return "".join(tails)


def worker_args(args, name, d):
    extra = ["--save_to", "snapshots"] if name.startswith("ddprun-snapshots") else []
    extra += ["--gasp"] if name == "ddprun-snapshots-gasp" else []
    return [WORKER, d, "--save_every", str(args.save_every), *extra]


DDPRUN_OPTIONS = {"ddprun-defaults": [], "ddprun-cold": ["--warm_start=off"],
                  "ddprun-warm": ["--warm_start=on", "--preload=torch._dynamo"], "ddprun-snapshots": [],
                  "ddprun-snapshots-gasp": ["--snapshot_signal=SIGUSR1"]}


def chaos_options(args):
    """ddprun's --chaos for --injector ddprun (none for the driver's kills)."""
    if args.injector != "ddprun":
        return []
    return [f"--chaos=mtbf={args.mean_kill_interval:g},kinds=kill,seed={args.seed}"]


def ledger(log):
    """(ETT% of the goodput ledger's last record, faults --chaos injected, failures it counts as
    injected) from ddprun's event log; ETT% None without a goodput record."""
    ett, faults, injected = None, 0, 0
    if os.path.exists(log):
        with open(log) as f:
            for line in f:
                if not line.strip():
                    continue
                r = json.loads(line)
                if r["event"] == "goodput":
                    ett, injected = r["ett_percent"], r.get("failures_injected", 0)
                elif r["event"] == "chaos_fault":
                    faults += 1
    return ett, faults, injected


def start_job(name, args, env, d, log):
    """Starts the job of launcher `name` on folder `d` (Single or Nodes), its launch time set."""
    tr, fixes = torchrun("2")
    launch = time.monotonic()
    if args.kill == "worker":
        if name == "torchrun":
            command = lambda d: tr + fixes + [f"--nproc_per_node={NPROC}", MAX_RESTARTS,  # noqa: E731
                                              f"--master_port={free_port()}"] + worker_args(args, name, d)
        else:
            command = lambda d: [args.ddprun, f"--nproc_per_node={NPROC}", MAX_RESTARTS,  # noqa: E731
                                 f"--event_log={d}/events", *DDPRUN_OPTIONS[name], *chaos_options(args)] \
                + worker_args(args, name, d)
        job = Single(command, env, d, log)
    else:
        port = free_port()
        run_id = f"goodput-{os.getpid()}-{port}"
        common = ["--nnodes=2", "--nproc_per_node=1", "--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.2:{port}",
                  f"--rdzv_id={run_id}", MAX_RESTARTS]
        if name == "torchrun":
            node = lambda i, d: tr + fixes + common + [f"--local_addr=127.0.0.{i + 2}"] + worker_args(args, name, d)  # noqa: E731
        else:
            node = lambda i, d: [args.ddprun, *common, f"--local_addr=127.0.0.{i + 2}", "--rdzv_conf=spares=1",  # noqa: E731
                                 f"--event_log={d}/events.{i}", *DDPRUN_OPTIONS[name]] + worker_args(args, name, d)
        # One worker a node: the launchers would leave it all the cores (OMP_NUM_THREADS is theirs to
        # set only with several); 1 thread, as each of the 2 workers on one node gets.
        job = Nodes(node, name != "torchrun", dict(env, DDPRUN_RDZV_SECRET=SECRET, OMP_NUM_THREADS="1"), d, port)
    job.launch = launch
    return job


def measure(name, env, args, schedule):
    """The fault-free run, then the run with the kills, of one launcher: a row's figures, or
    {"failed": why}."""
    result = {}
    runs = [("fault-free", args.fault_free_seconds, [])] if args.fault_free_seconds > 0 else []
    # With --injector ddprun, ddprun's --chaos makes the faults: the driver kills nothing.
    runs.append(("with kills", args.seconds, schedule if args.injector == "driver" else []))
    for what, seconds, kills in runs:
        with tempfile.TemporaryDirectory(prefix=f"goodput-{name}-") as d:
            try:
                with open(os.path.join(d, "launcher.log"), "wb") as log:
                    job = start_job(name, args, env, d, log)
                    run = run_job(job, d, seconds, kills)
            finally:
                remove_snapshot_dirs(d)
            steps = read_steps(d, run["end"])
            problems = []
            if run["exited"]:
                problems.append(f"{run['exited']} after {run['end'] - job.launch:.1f} s")
            if run["left"]:
                problems.append(f"{len(run['left'])} processes left behind (killed)")
            if what == "fault-free" and len(steps) < 2:
                problems.append(f"{len(steps)} steps")
            if os.environ.get("GOODPUT_KEEP"):  # to debug a run: a copy of its folder
                shutil.copytree(d, os.path.join(os.environ["GOODPUT_KEEP"], os.path.basename(d)),
                                ignore=shutil.ignore_patterns("ckpt-*"))
            if problems:
                why = f"{what} run: " + "; ".join(problems)
                print(f"goodput.py: {name}: {why}; left behind: {run['left']}; the launcher's last lines:\n"
                      + launcher_tail(d), file=sys.stderr)
                return {"failed": why}
            if what == "fault-free":
                result["step"] = step_time(steps)
                continue
            final = steps[-1][0] if steps else 0
            if "step" not in result:  # no fault-free run: the step time of this one
                result["step"] = step_time(steps) or 0.0
            trained = final * result["step"]
            saves = read_saves(d)
            result.update(final=final, step_in_run=step_time(steps), effective=trained / (run["end"] - steps[0][1]) if steps else 0.0,
                          from_launch=trained / (run["end"] - job.launch), to_first=steps[0][1] - job.launch if steps else None,
                          kills=len(run["kills"]), rounds=(steps[-1][3] if args.kill == "worker" else steps[-1][2]) if steps else 0, delays=kill_to_next_step(run["kills"], steps),
                          saves=saves, wall=run["end"] - job.launch, refused=len(getattr(job, "refused", ())))
            if name.startswith("ddprun"):
                logs = [os.path.join(d, "events")] if args.kill == "worker" else \
                    [os.path.join(d, f"events.{i}") for i in range(len(job.procs))]
                result["events"] = event_summary(d, logs, [pid for _, pid in run["kills"]] if args.kill == "worker" else [])
                if args.injector == "ddprun":
                    result["ledger"] = ledger(logs[0])
    return result


def counted(counter):
    return ", ".join(f"{kind} {n}" for kind, n in counter.most_common()) or "none"


def median_ms(seconds):
    return f"{statistics.median(seconds) * 1000:.1f}" if seconds else ""


COLUMNS = ("launcher", "fault-free step, ms", "step with the kills, ms", "final step",
           "effective training time, from the first step", "from the launch", "launch to the first step, s",
           "kills", "restarts to the last step", "kill -> next step: median, s", "slowest, s",
           "a save: median, ms", "saving, share of the wall time", "gasps' saves: how many, median ms",
           "ddprun: the killed workers' kinds", "other failures", "restarts with a backoff",
           "restarts counted toward a crash loop", "snapshot restores that fetched: how many, median s", "result")


def row(name, r, due):
    if "failed" in r:
        return f"| {name} |" + " |" * (len(COLUMNS) - 2) + f" FAILED: {r['failed']} |"
    delays = r["delays"]
    in_run = r["step_in_run"]
    every, gasps = r["saves"]["every"], r["saves"]["gasp"]
    cells = [f"{r['step'] * 1000:.1f}", f"{in_run * 1000:.1f}" if in_run else "", str(r["final"]), f"{r['effective']:.2f}", f"{r['from_launch']:.2f}",
             f"{r['to_first']:.2f}" if r["to_first"] is not None else "",
             f"{r['kills']} of {due} ({len(delays)} with a step after)"
             + (f"; {r['refused']} new nodes refused, started again" if r["refused"] else ""), str(r["rounds"]),
             f"{statistics.median(delays):.2f}" if delays else "", f"{max(delays):.2f}" if delays else "",
             median_ms(every), f"{sum(every) / r['wall']:.3f}", f"{len(gasps)}, {median_ms(gasps)}" if gasps else "none"]
    events = r.get("events")
    if events:
        backoffs, restores = events["backoffs"], events["restores"]
        cells += [counted(events["kinds"]) if events["kinds"] else "", counted(events["others"]),
                  f"{len(backoffs)} ({sum(backoffs):g} s)" if backoffs else "none",
                  str(events["crash_loop"]) + "".join(f"; stopped: {why}" for why in events["stop"]),
                  f"{len(restores)}, {statistics.median(restores):.2f}" if restores else "none"]
    else:
        cells += ["", "", "", "", ""]
    return f"| {name} | " + " | ".join(cells) + " | ok |"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--mean_kill_interval", type=float, default=15)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--save_every", type=int, default=10)
    parser.add_argument("--fault_free_seconds", type=float, default=30)
    parser.add_argument("--kill", choices=("worker", "node"), default="worker")
    parser.add_argument("--ddprun", default=os.path.join(ROOT, "build", "launcher", "ddprun"))
    parser.add_argument("--only", default=",".join(VARIANTS), help="comma-separated: " + ", ".join(VARIANTS))
    parser.add_argument("--injector", choices=("driver", "ddprun"), default="driver")
    parser.add_argument("--agree", type=float, default=None,
                        help="with --injector ddprun: exit 1 when the ledger's ETT%% and the benchmark's own measure "
                             "differ by more than this many percentage points")
    parser.add_argument("--python", default=None, help="the workers' interpreter (default: the torch 2.x venv's)")
    args = parser.parse_args()
    chosen = args.only.split(",")
    unknown = [name for name in chosen if name not in VARIANTS]
    if unknown:
        parser.error(f"--only: no launcher {', '.join(unknown)}; there are {', '.join(VARIANTS)}")
    if args.injector == "ddprun" and (args.kill != "worker" or any(not n.startswith("ddprun") for n in chosen)):
        parser.error("--injector ddprun: ddprun's --chaos injects the faults: --kill worker and ddprun launchers only")
    if args.save_every < 1:
        parser.error(f"--save_every: {args.save_every}; a number of steps, 1 or more")
    if args.kill == "node" and (os.getuid() != 0 or subprocess.run(NSNODE[:4] + ["true"]).returncode != 0):
        parser.error("--kill node: needs root and unshare -m (each node runs in a mount namespace of its own "
                     "with a private /dev/shm)")
    python = args.python or torch2_python()
    env = dict(os.environ, PYTHON_EXEC=python)
    env.pop("PYTHONPATH", None)
    schedule = kill_schedule(args.seed, args.mean_kill_interval, args.seconds)
    if args.injector == "driver":
        print(f"goodput.py: {len(schedule)} kills due, at " + ", ".join(f"{at:.1f}" for at, _ in schedule) + " s",
              file=sys.stderr)
    results = {}
    for name in chosen:
        results[name] = measure(name, env, args, schedule)
        print(f"goodput.py: {name}: " + (results[name].get("failed") or f"effective {results[name]['effective']:.2f}"),
              file=sys.stderr)
    version = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                             text=True).stdout.strip()
    load = os.getloadavg()
    what = "a worker" if args.kill == "worker" else "the non-host node (a spare, or a new node, started after each kill)"
    job = "2 workers on one node" if args.kill == "worker" else "2 nodes of 1 worker in mount namespaces"
    print(f"\n2-worker gloo DDP training ({job}, CPU, torch {version}, checkpoint every {args.save_every} steps) for "
          f"{args.seconds:g} s, {what} SIGKILLed every {args.mean_kill_interval:g} s on average (seed {args.seed}); "
          f"fault-free runs {args.fault_free_seconds:g} s; {os.cpu_count()} cores, load average at the end "
          f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f}\n")
    print("| " + " | ".join(COLUMNS) + " |")
    print("|---|" + "---|" * (len(COLUMNS) - 1))
    for name, r in results.items():
        print(row(name, r, len(schedule)))
    if args.injector == "ddprun":
        return agreement(results, args.agree)


def agreement(results, tolerance):
    """The ledger's ETT% next to the benchmark's own measure, per launcher; 1 when a launcher failed
    or they differ by more than `tolerance` points (None: not checked)."""
    print()
    bad = 0
    for name, r in results.items():
        if "failed" in r:
            bad = 1
            continue
        ett, faults, injected = r["ledger"]
        measured = 100 * r["from_launch"]
        if ett is None:
            print(f"{name}: the benchmark's goodput {measured:.1f}%, the ledger's none (no goodput record)")
            bad = 1
            continue
        differ = abs(ett - measured)
        print(f"{name}: the benchmark's goodput {measured:.1f}% (final step {r['final']} x {r['step'] * 1000:.1f} ms / "
              f"{r['wall']:.1f} s from the launch), the ledger's ETT% {ett:.1f}%: {differ:.1f} points apart; "
              f"{faults} faults injected by --chaos, {injected} failures counted as injected")
        if tolerance is not None and (differ > tolerance or faults < 1 or injected < 1):
            print(f"{name}: DISAGREE (tolerance {tolerance:g} points, at least one fault injected and counted)")
            bad = 1
    return bad


if __name__ == "__main__":
    sys.exit(main())
