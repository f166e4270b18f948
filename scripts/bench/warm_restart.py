#!/usr/bin/python3
"""Failure to training again: kill -9 of one worker of a 2-worker gloo DDP script on the CPU,
to every worker past init_process_group again (and past its first DDP step), with ddprun's
ddprun's defaults (--warm_start=auto), --warm_start=off and =on, torchrun and NVIDIA's
ft_launcher, taking turns in each round.

  python3 scripts/bench/warm_restart.py [--runs 10] [--torch 2|1.13] [--ddprun build/launcher/ddprun] [--only TEXT]
                                        [--kill_after SECONDS] [--compile kept|per-round]

The script is warm_restart_python_worker.py: it stamps the time at its first line, past
init_process_group and past its first step; in the first attempt rank 1 is then SIGKILLed by this
driver, and the launcher restarts the job once (--max_restarts=1). The figure is the last of the
restarted ranks' stamps minus the time of the kill. --torch picks the workers' PyTorch: 2
(default) is the venv's (scripts/torch2-env.sh) and its torchrun, 1.13 Debian's python3-torch and
its torchrun (run with --redirects 9:1 --tee 9:1 --monitor_interval 0.1, see benchlib.py). ddprun
runs with --restart_backoff_max=0, as launcher.py does (these workers made progress, so no
backoff applies anyway). With torch 2, a row preloads torch._dynamo, which DDP's constructor
imports (with sympy and more) the first time a process builds a DDP model: the time from init to
the first step. --compile puts the model through torch.compile, with its inductor cache kept for
the restart (kept) or one new for each attempt (per-round): what keeping compiled kernels is worth.
--kill_after lets the job run that long past its first step before the kill (with ddprun's
default --warm_start=auto, the warm interpreter is made meanwhile).

ft_launcher (nvidia-resiliency-ext, a torchrun with fault tolerance) runs with torch 2 when it is
installed, without touching the venv (its pynvml makes every `import torch` warn), by:

  "$TORCH2_PYTHON" -m pip install --no-deps --target ~/.cache/ddprun/ft-launcher \\
      nvidia-resiliency-ext==0.4.1 nvidia-ml-py==13.615.71 defusedxml==0.7.1

Prints, for each launcher, the median and the slowest of the runs, to init and to the first step,
and the median of the first start (the launch to every rank's first step);
then the medians of the phases between the kill and init: for ddprun, from its --event_log, the
detection (the kill to ddprun's record of the worker's exit), the stop (to the round's end: the
other worker stopped), the fork (to the last worker of the restart forked or exec'd: the restart's
rendezvous and the start), the script's start (to its first line: an interpreter's start, or the
warm interpreter's set-up of the forked one), the import and init (to past init_process_group);
for the others, the kill to the script's first line, and the import and init.
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import BENCH_DIR, ROOT, free_port, read_stamp, stop_launcher, torch2_python, torchrun, PYTHON_113

WORKER = os.path.join(BENCH_DIR, "warm_restart_python_worker.py")
FT_LAUNCHER = os.path.expanduser("~/.cache/ddprun/ft-launcher")
PHASES = ("detect", "stop", "fork", "script start", "import + init")


class RunFailed(Exception):
    pass


def wait_files(d, names, proc, limit=120):
    """Until every file of `names` exists in `d`: the stamps are renamed into place whole."""
    deadline = time.monotonic() + limit
    while not all(os.path.exists(os.path.join(d, n)) for n in names):
        if proc.poll() is not None:
            raise RunFailed(f"the launcher exited ({proc.returncode}) before {names} were there")
        if time.monotonic() > deadline:
            raise RunFailed(f"no {names} after {limit} s")
        time.sleep(0.005)


def phases(d, killed_at, victim):
    """The phases from the kill to every rank past init (PHASES), seconds; those ddprun's event log
    tells (the first three) only where there is one."""
    start = max(read_stamp(os.path.join(d, f"start.1.{r}")) for r in (0, 1))
    init = max(read_stamp(os.path.join(d, f"init.1.{r}")) for r in (0, 1))
    events = os.path.join(d, "events")
    if not os.path.exists(events):
        return {"script start": start - killed_at, "import + init": init - start}
    records = [json.loads(line) for line in open(events)]
    exited = next(r["time"] for r in records if r["event"] == "worker_exited" and r.get("pid") == victim)
    ended = next(r["time"] for r in records if r["event"] == "round_ended" and r["time"] >= exited)
    forked = max(r.get("forked", r["time"]) for r in records if r["event"] == "worker_started" and r["time"] >= ended)
    return {"detect": exited - killed_at, "stop": ended - exited, "fork": forked - ended,
            "script start": start - forked, "import + init": init - start}


def one_run(command, env, kill_after):
    """Starts `command(d)` (it runs WORKER with a folder d as its last argument), kills rank 1
    `kill_after` seconds after both ranks took their first step, and returns (kill to every rank past init, to every first
    step, the phases, the launch to every rank's first step of the first start). Raises RunFailed with the launcher's
    last lines."""
    with tempfile.TemporaryDirectory(prefix="warm-restart-") as d:
        log = os.path.join(d, "launcher.err")
        with open(log, "wb") as err:
            # Its own session: a launcher that failed is stopped with its whole process group
            # (torchrun leaves its workers running when it is SIGKILLed).
            launched_at = time.time()
            proc = subprocess.Popen(command(d) + [d], env=env, stdout=subprocess.DEVNULL, stderr=err,
                                    start_new_session=True)
        try:
            wait_files(d, ["pid.0", "pid.1"], proc)
            victim = int(open(os.path.join(d, "pid.1")).read())
            time.sleep(kill_after)  # the time the job trained before its failure: the scenario's, not a wait
            killed_at = time.time()
            os.kill(victim, signal.SIGKILL)
            wait_files(d, ["step.1.0", "step.1.1"], proc)
            init = max(read_stamp(os.path.join(d, f"init.1.{r}")) for r in (0, 1)) - killed_at
            step = max(read_stamp(os.path.join(d, f"step.1.{r}")) for r in (0, 1)) - killed_at
            if proc.wait(timeout=120) != 0:
                raise RunFailed(f"exit code {proc.returncode}")
            first = max(read_stamp(os.path.join(d, f"step.0.{r}")) for r in (0, 1)) - launched_at
            return init, step, phases(d, killed_at, victim), first
        except (RunFailed, subprocess.TimeoutExpired) as error:
            with open(log, errors="replace") as f:
                raise RunFailed(f"{error}; its last lines:\n" + "".join(line for line in f if "Traceback" in line or "Error" in line or "error" in line)) from None
        finally:
            stop_launcher(proc)


def launchers(args, python, env):
    """{row name: (command(d), environment)}."""
    ddprun = lambda d, *extra: [args.ddprun, "--nproc_per_node=2", "--max_restarts=1", "--restart_backoff_max=0",
                                f"--event_log={d}/events", *extra, WORKER]
    rows = {
        # What a user gets without options (--event_log only gives the phases).
        "ddprun (defaults)": (lambda d: [args.ddprun, "--nproc_per_node=2", "--max_restarts=1",
                                         f"--event_log={d}/events", WORKER], env),
        "ddprun --warm_start=off": (lambda d: ddprun(d, "--warm_start=off"), env),
        "ddprun --warm_start=on": (lambda d: ddprun(d, "--warm_start=on"), env),
    }
    if args.torch == "2":
        # DDP's constructor imports torch._dynamo (and sympy, ...) in torch 2.x: 1.4 s and more here.
        rows["ddprun --warm_start=on --preload=torch._dynamo"] = (
            lambda d: ddprun(d, "--warm_start=on", "--preload=torch._dynamo"), env)
    tr, fixes = torchrun(args.torch)
    rows[f"torchrun {args.torch}"] = (
        lambda d: tr + fixes + ["--nproc_per_node=2", "--max_restarts=1", f"--master_port={free_port()}", WORKER], env)
    if args.torch == "2" and os.path.isdir(os.path.join(FT_LAUNCHER, "nvidia_resiliency_ext")):
        ft = [python, "-c", "import sys; from nvidia_resiliency_ext.fault_tolerance.launcher import main; "
                            "sys.argv[0] = 'ft_launcher'; sys.exit(main())"]
        rows["ft_launcher 0.4.1"] = (
            lambda d: ft + ["--nproc-per-node=2", "--max-restarts=1", f"--master-port={free_port()}", WORKER],
            dict(env, PYTHONPATH=FT_LAUNCHER))
    elif args.torch == "2":
        print(f"warm_restart.py: no ft_launcher in {FT_LAUNCHER} (see --help): its row is left out", file=sys.stderr)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--torch", choices=("2", "1.13"), default="2")
    parser.add_argument("--ddprun", default=os.path.join(ROOT, "build", "launcher", "ddprun"))
    parser.add_argument("--only", help="run only the launchers whose row names this text (e.g. torchrun)")
    parser.add_argument("--compile", choices=("kept", "per-round"),
                        help="the model through torch.compile (torch 2), its inductor cache kept across the "
                             "restart or one per attempt")
    parser.add_argument("--kill_after", type=float, default=0,
                        help="seconds the job runs past its first step before the kill (default 0: at once; "
                             "--warm_start=auto makes its warm interpreter meanwhile)")
    args = parser.parse_args()
    python = torch2_python() if args.torch == "2" else PYTHON_113
    env = dict(os.environ, PYTHON_EXEC=python)
    if args.compile:
        env["WARM_BENCH_COMPILE"] = args.compile
    env.pop("PYTHONPATH", None)
    rows = launchers(args, python, env)
    if args.only:
        rows = {name: row for name, row in rows.items() if args.only in name}
    results = {name: [] for name in rows}
    failures = {name: 0 for name in rows}
    for r in range(args.runs):
        this_round = []
        for name, (command, run_env) in rows.items():
            try:
                results[name].append(one_run(command, run_env, args.kill_after))
                this_round.append(f"{name} {results[name][-1][0]:.2f} s")
            except RunFailed as error:
                failures[name] += 1
                this_round.append(f"{name} failed")
                print(f"warm_restart.py: a run of {name} failed: {error}", file=sys.stderr)
        print(f"round {r + 1}/{args.runs}: " + ", ".join(this_round), file=sys.stderr)
    version = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                             text=True).stdout.strip()
    load = os.getloadavg()
    compiled = f", torch.compile'd, inductor cache {args.compile}" if args.compile else ""
    print(f"\nkill -9 of rank 1 of 2 (gloo DDP{compiled}, CPU, torch {version}), {args.kill_after:g} s after the first step "
          f"-> every rank past init_process_group again / past its first step again; {args.runs} runs, seconds; "
          f"load average at the end "
          f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f}\n")
    print("| launcher | to init: median | slowest | to first step: median | slowest | runs failed | "
          "first start, launch to first step: median |")
    print("|---|---|---|---|---|---|---|")
    for name, values in results.items():
        if not values:
            print(f"| {name} | | | | | {failures[name]} | |")
            continue
        init = [v[0] for v in values]
        step = [v[1] for v in values]
        first = [v[3] for v in values]
        print(f"| {name} | {statistics.median(init):.2f} | {max(init):.2f} | {statistics.median(step):.2f} | "
              f"{max(step):.2f} | {failures[name]} | {statistics.median(first):.2f} |")
    print("\nthe kill -> every rank past init, by phase (medians, seconds; '' where the launcher does not tell)\n")
    print("| launcher | " + " | ".join(PHASES) + " | init -> first step |")
    print("|---|" + "---|" * (len(PHASES) + 1))
    for name, values in results.items():
        if not values:
            continue
        cells = []
        for phase in PHASES:
            seen = [v[2][phase] for v in values if phase in v[2]]
            cells.append(f"{statistics.median(seen):.3f}" if seen else "")
        to_step = statistics.median(v[1] - v[0] for v in values)
        print(f"| {name} | " + " | ".join(cells) + f" | {to_step:.3f} |")


if __name__ == "__main__":
    main()
