#!/usr/bin/python3
"""Goodput under faults: a 2-worker gloo DDP training script as users write it
(goodput_python_worker.py: it resumes from the latest checkpoint, saves one every --save_every
steps) runs for --seconds of wall time while the driver SIGKILLs a random worker at Poisson times
(mean --mean_kill_interval), the same seeded schedule (--seed) for every launcher; torch 2.x (the
venv of scripts/torch2-env.sh), CPU, checkpoints on the disk of the temporary folder.

  python3 scripts/bench/goodput.py [--seconds 120] [--mean_kill_interval 15] [--seed 1]
      [--save_every 50] [--fault_free_seconds 30] [--ddprun build/launcher/ddprun]
      [--only torchrun,ddprun-defaults,ddprun-cold,ddprun-warm]

The launchers (--only picks some, comma-separated), each with --nproc_per_node=2:
  torchrun         the venv's torchrun, --max_restarts=1000
  ddprun-defaults  ddprun --max_restarts=1000 and no other option that changes what it does
  ddprun-cold      ddprun --max_restarts=1000 --warm_start=off
  ddprun-warm      ddprun --max_restarts=1000 --warm_start=on --preload=torch._dynamo
ddprun also gets --event_log, which changes nothing but what it writes. Each launcher first runs
the script without a fault for --fault_free_seconds: its fault-free step time is the time from
its first step to its last over the steps between (checkpoint saves included), then with the
kills. Effective training time = the final step (the last one before the end of the wall time) x
the fault-free step time / the wall time, counted from the first step and from the launch. The
step time of the run with the kills (the same measure over its rounds' stretches of steps) is
printed beside the fault-free one: where they differ, the machine's load changed between the two
runs (other work on it), and the effective times are off by as much.

A kill goes to one of the workers (the launcher's descendants whose arguments name this run's
folder) of a round not yet hit: when a kill is due, the driver waits until the workers of a round
that no kill has hit yet (none of the processes of an earlier kill) are all there, and kills one
(the seeded choice of the two, by pid order). So no round is killed twice, and a kill due during a
restart waits for its end; kills due after the wall time are not made.
The kill -> next step delay is from the kill to the first step of a later round than the one
killed (rank 0 writes the round, TORCHELASTIC_RESTART_COUNT, with each step): a kill whose next
round is killed again before its first step waits for the step of the round after. A kill with
no step after it before the end has no delay ("kills": made of due (with a step after)). The
restarts are the round of the last step (its restart count): more than the kills where rounds
failed by themselves (torchrun 2.11's restarted workers can fail gloo's connectFullMesh,
"Connection refused", and be restarted again).

From ddprun's event log: the failure kind of each killed worker (SIGKILL from outside: 'killed';
'host_oom' would be wrong where the kernel killed nothing), any other worker failure, the restarts
that waited a backoff and those counted toward a crash loop (failures.md: a kill from outside
counts nothing and waits nothing). A launcher that exits before the end, or leaves a process of
the run behind (the driver kills it), is named in the result column and its figures are not given.
"""
import argparse
import collections
import itertools
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import BENCH_DIR, ROOT, free_port, stop_launcher, torch2_python, torchrun

WORKER = os.path.join(BENCH_DIR, "goodput_python_worker.py")
NPROC = 2
MAX_RESTARTS = "--max_restarts=1000"
VARIANTS = ("torchrun", "ddprun-defaults", "ddprun-cold", "ddprun-warm")


def kill_schedule(seed, mean, seconds):
    """[(seconds after the launch, a number in [0, 1) that picks the worker)]: a Poisson process of
    rate 1/mean within `seconds`, the same for every launcher."""
    rng = random.Random(seed)
    schedule, at = [], rng.expovariate(1 / mean)
    while at < seconds:
        schedule.append((at, rng.random()))
        at += rng.expovariate(1 / mean)
    return schedule


def processes():
    """{pid: (parent pid, start time in clock ticks, state)} of every process, from /proc."""
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()  # after the command, which may hold spaces
            except OSError:
                continue  # gone meanwhile
            table[int(name)] = (int(fields[1]), int(fields[19]), fields[0])
    return table


def arguments(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode(errors="replace").split("\0")
    except OSError:
        return []


def descendants(root):
    """{pid: start time} of the living processes below `root`."""
    table = processes()
    children = collections.defaultdict(list)
    for pid, (parent, _, _) in table.items():
        children[parent].append(pid)
    found, todo = {}, list(children[root])
    while todo:
        pid = todo.pop()
        if table[pid][2] != "Z":
            found[pid] = table[pid][1]
        todo += children[pid]
    return found


def workers(tree, d):
    """The pids of `tree` that are workers of the run in folder `d`: the folder is their argument
    (ddprun's warm interpreter, also a descendant, names the script but not the folder)."""
    return sorted(pid for pid in tree if d in arguments(pid))


def wait(proc, deadline, ready=lambda: None):
    """Polls `ready` every 10 ms until it returns something (returned), `deadline` (monotonic)
    passes or the launcher exits (then None)."""
    while proc.poll() is None:
        found = ready()
        if found:
            return found
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.01)
    return None


def sweep(seen, d, grace=5):
    """SIGKILLs what is left of a run `grace` seconds after its launcher exited (ddprun's orphan
    guard, for one, exits just after it): the processes seen below it (the same pid and start
    time) and any process naming its folder; returns their arguments."""
    deadline = time.monotonic() + grace
    while True:
        left = [pid for pid, (_, start, state) in processes().items()
                if state != "Z" and (seen.get(pid) == start or d in arguments(pid))]
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    named = []
    for pid in left:
        named.append(" ".join(arguments(pid)).strip())
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return named


def run_job(command, env, d, seconds, schedule):
    """Runs `command` (a launcher of WORKER on folder `d`) for `seconds`, SIGKILLing a worker at each
    time of `schedule` as the docstring says, then stops it. Returns the launch and end (monotonic),
    the kills [(monotonic time, pid)], the launcher's exit code and time where it exited before the
    end, and what was left behind."""
    log = open(os.path.join(d, "launcher.log"), "wb")
    launch = time.monotonic()
    proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    end = launch + seconds
    kills, hit, seen = [], set(), {}

    def fresh_round():
        """The workers of a round no kill has hit, once they are all there."""
        tree = descendants(proc.pid)
        seen.update(tree)
        fresh = [pid for pid in workers(tree, d) if pid not in hit]
        return fresh if len(fresh) >= NPROC else None
    try:
        for at, pick in schedule:
            wait(proc, launch + at)
            while round_workers := wait(proc, end, fresh_round):  # none: the end, or the launcher exited
                hit.update(round_workers)
                victim = round_workers[int(pick * len(round_workers))]
                killed_at = time.monotonic()
                try:
                    os.kill(victim, signal.SIGKILL)  # a zombie at worst: the launcher reaps it
                except ProcessLookupError:
                    continue  # it exited by itself: its round is over, the kill goes to the next
                kills.append((killed_at, victim))
                break
        wait(proc, end)
        end = min(end, time.monotonic())
        exited = None if proc.poll() is None else (proc.returncode, end - launch)
        seen.update(descendants(proc.pid))
    finally:
        stop_launcher(proc)
        log.close()
        left = sweep(seen, d)
    return {"launch": launch, "end": end, "kills": kills, "exited": exited, "left": left}


def read_steps(d, end):
    """[(step, monotonic time, restart count)] that rank 0 wrote up to `end`, in order."""
    path = os.path.join(d, "steps")
    if not os.path.exists(path):
        return []
    steps = []
    with open(path) as f:
        for line in f:
            fields = line.split()
            if len(fields) == 3 and float(fields[1]) <= end:  # a line cut by a kill has fewer
                steps.append((int(fields[0]), float(fields[1]), int(fields[2])))
    return steps


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
        before = [restart for _, t, restart in steps if t <= killed_at]
        killed_round = max([i] + before[-1:])
        after = [t for _, t, restart in steps if t > killed_at and restart > killed_round]
        if after:
            delays.append(after[0] - killed_at)
    return delays


def event_summary(d, victims):
    """From ddprun's event log: Counters of the killed workers' failure kinds and of the other
    failures' kinds, the backoffs waited (seconds), the restarts counted toward a crash loop and a
    'stop' decision's reason."""
    with open(os.path.join(d, "events")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    exited = {r["pid"]: (r["attempt"], r["rank"]) for r in records if r["event"] == "worker_exited"}
    failed = {(r["attempt"], r["rank"]): r["kind"] for r in records if r["event"] == "worker_failed"}
    victim_keys = [exited.get(pid) for pid in victims]
    kinds = collections.Counter(failed.get(key, "no record") for key in victim_keys)
    others = collections.Counter(kind for key, kind in failed.items() if key not in victim_keys)
    restarts = [r for r in records if r["event"] == "restart"]
    # failures.md: a restart counted toward a crash loop says "no progress since the start".
    return {"kinds": kinds, "others": others,
            "backoffs": [r["backoff"] for r in restarts if r.get("backoff", 0) > 0],
            "crash_loop": sum("no progress since the start" in r.get("reason", "") for r in restarts),
            "stop": [r["reason"] for r in restarts if r["decision"] == "stop"]}


def launcher_tail(d, lines=15):
    with open(os.path.join(d, "launcher.log"), errors="replace") as f:
        return "".join(f.readlines()[-lines:])


def commands(args):
    """{variant: command(d)}: the launcher, the worker on folder d and its options."""
    worker = lambda d: [WORKER, d, "--save_every", str(args.save_every)]  # noqa: E731
    ddprun = lambda *extra: lambda d: [args.ddprun, f"--nproc_per_node={NPROC}", MAX_RESTARTS,  # noqa: E731
                                       f"--event_log={d}/events", *extra] + worker(d)
    tr, fixes = torchrun("2")
    return {
        "torchrun": lambda d: tr + fixes + [f"--nproc_per_node={NPROC}", MAX_RESTARTS,
                                            f"--master_port={free_port()}"] + worker(d),
        "ddprun-defaults": ddprun(),
        "ddprun-cold": ddprun("--warm_start=off"),
        "ddprun-warm": ddprun("--warm_start=on", "--preload=torch._dynamo"),
    }


def measure(name, command, env, args, schedule):
    """The fault-free run, then the run with the kills, of one launcher: a row's figures, or
    {"failed": why}."""
    result = {}
    for what, seconds, kills in (("fault-free", args.fault_free_seconds, []), ("with kills", args.seconds, schedule)):
        with tempfile.TemporaryDirectory(prefix=f"goodput-{name}-") as d:
            job = run_job(command(d), env, d, seconds, kills)
            steps = read_steps(d, job["end"])
            problems = []
            if job["exited"]:
                code, after = job["exited"]
                problems.append(f"the launcher exited {code} after {after:.1f} s")
            if job["left"]:
                problems.append(f"{len(job['left'])} processes left behind (killed)")
            if what == "fault-free" and len(steps) < 2:
                problems.append(f"{len(steps)} steps")
            if problems:
                why = f"{what} run: " + "; ".join(problems)
                print(f"goodput.py: {name}: {why}; left behind: {job['left']}; the launcher's last lines:\n"
                      + launcher_tail(d), file=sys.stderr)
                return {"failed": why}
            if what == "fault-free":
                result["step"] = step_time(steps)
                continue
            final = steps[-1][0] if steps else 0
            trained = final * result["step"]
            result.update(final=final, step_in_run=step_time(steps), effective=trained / (job["end"] - steps[0][1]) if steps else 0.0,
                          from_launch=trained / (job["end"] - job["launch"]),
                          kills=len(job["kills"]), restarts=steps[-1][2] if steps else 0, delays=kill_to_next_step(job["kills"], steps))
            if name.startswith("ddprun"):
                result["events"] = event_summary(d, [pid for _, pid in job["kills"]])
    return result


def counted(counter):
    return ", ".join(f"{kind} {n}" for kind, n in counter.most_common()) or "none"


def row(name, r, due):
    if "failed" in r:
        return f"| {name} |" + " |" * 13 + f" FAILED: {r['failed']} |"
    delays = r["delays"]
    in_run = r["step_in_run"]
    cells = [f"{r['step'] * 1000:.1f}", f"{in_run * 1000:.1f}" if in_run else "", str(r["final"]), f"{r['effective']:.2f}", f"{r['from_launch']:.2f}",
             f"{r['kills']} of {due} ({len(delays)} with a step after)", str(r["restarts"]),
             f"{statistics.median(delays):.2f}" if delays else "", f"{max(delays):.2f}" if delays else ""]
    events = r.get("events")
    if events:
        backoffs = events["backoffs"]
        cells += [counted(events["kinds"]), counted(events["others"]),
                  f"{len(backoffs)} ({sum(backoffs):g} s)" if backoffs else "none",
                  str(events["crash_loop"]) + "".join(f"; stopped: {why}" for why in events["stop"])]
    else:
        cells += ["", "", "", ""]
    return f"| {name} | " + " | ".join(cells) + " | ok |"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--mean_kill_interval", type=float, default=15)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--save_every", type=int, default=50)
    parser.add_argument("--fault_free_seconds", type=float, default=30)
    parser.add_argument("--ddprun", default=os.path.join(ROOT, "build", "launcher", "ddprun"))
    parser.add_argument("--only", default=",".join(VARIANTS), help="comma-separated: " + ", ".join(VARIANTS))
    args = parser.parse_args()
    chosen = args.only.split(",")
    unknown = [name for name in chosen if name not in VARIANTS]
    if unknown:
        parser.error(f"--only: no launcher {', '.join(unknown)}; there are {', '.join(VARIANTS)}")
    python = torch2_python()
    env = dict(os.environ, PYTHON_EXEC=python)
    env.pop("PYTHONPATH", None)
    schedule = kill_schedule(args.seed, args.mean_kill_interval, args.seconds)
    print(f"goodput.py: {len(schedule)} kills due, at " + ", ".join(f"{at:.1f}" for at, _ in schedule) + " s",
          file=sys.stderr)
    everything = commands(args)
    results = {}
    for name in chosen:
        results[name] = measure(name, everything[name], env, args, schedule)
        print(f"goodput.py: {name}: " + (results[name].get("failed") or f"effective {results[name]['effective']:.2f}"),
              file=sys.stderr)
    version = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                             text=True).stdout.strip()
    load = os.getloadavg()
    print(f"\n2-worker gloo DDP training (CPU, torch {version}, checkpoint every {args.save_every} steps) for "
          f"{args.seconds:g} s, a worker SIGKILLed every {args.mean_kill_interval:g} s on average (seed {args.seed}); "
          f"fault-free runs {args.fault_free_seconds:g} s; {os.cpu_count()} cores, load average at the end "
          f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f}\n")
    print("| launcher | fault-free step, ms | step with the kills, ms | final step | effective training time, from the first step "
          "| from the launch | kills | restarts to the last step | kill -> next step: median, s | slowest, s | ddprun: the killed workers' kinds "
          "| other failures | restarts with a backoff | restarts counted toward a crash loop | result |")
    print("|---|" + "---|" * 14)
    for name, r in results.items():
        print(row(name, r, len(schedule)))


if __name__ == "__main__":
    main()
