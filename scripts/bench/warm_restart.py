#!/usr/bin/python3
"""Failure to training again: kill -9 of one worker of a 2-worker gloo DDP script on the CPU,
to every worker past init_process_group again (and past its first DDP step), with ddprun's
--warm_start=off and =on and torchrun, alternating in each round.

  python3 scripts/bench/warm_restart.py [--runs 10] [--torch 2|1.13] [--ddprun build/launcher/ddprun]

The script is warm_restart_python_worker.py: it stamps the time past init_process_group and past
its first step; in the first attempt rank 1 is then SIGKILLed by this driver, and the launcher
restarts the job once (--max_restarts=1). The figure is the last of the restarted ranks' stamps
minus the time of the kill. --torch picks the workers' PyTorch: 2 (default) is the venv's
(scripts/torch2-env.sh) and its torchrun, 1.13 Debian's python3-torch and its torchrun (run with
--redirects 9:1 --tee 9:1 --monitor_interval 0.1, see benchlib.py). ddprun runs with
--restart_backoff_max=0, as launcher.py does (these workers made progress, so no backoff
applies anyway). With torch 2, a fourth row preloads torch._dynamo, which DDP's constructor
imports (with sympy and more) the first time a process builds a DDP model: the time from init to
the first step. Prints, for each launcher: the median and the slowest of the runs, to init and to
the first step.
"""
import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import BENCH_DIR, ROOT, free_port, read_stamp, torch2_python, torchrun, PYTHON_113

WORKER = os.path.join(BENCH_DIR, "warm_restart_python_worker.py")


def wait_files(d, names, proc, limit=120):
    """Until every file of `names` exists in `d`: the stamps are renamed into place whole."""
    deadline = time.monotonic() + limit
    while not all(os.path.exists(os.path.join(d, n)) for n in names):
        if proc.poll() is not None:
            raise SystemExit(f"warm_restart.py: the launcher exited ({proc.returncode}) before {names} were there")
        if time.monotonic() > deadline:
            raise SystemExit(f"warm_restart.py: no {names} after {limit} s")
        time.sleep(0.005)


def one_run(command, env):
    """Starts `command` (it runs WORKER with a folder as its last argument), kills rank 1 once both
    ranks took their first step, and returns (kill to every rank past init, to every first step)."""
    with tempfile.TemporaryDirectory(prefix="warm-restart-") as d:
        proc = subprocess.Popen(command + [d], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            wait_files(d, ["pid.0", "pid.1"], proc)
            victim = int(open(os.path.join(d, "pid.1")).read())
            killed_at = time.time()
            os.kill(victim, signal.SIGKILL)
            wait_files(d, ["step.1.0", "step.1.1"], proc)
            init = max(read_stamp(os.path.join(d, f"init.1.{r}")) for r in (0, 1)) - killed_at
            step = max(read_stamp(os.path.join(d, f"step.1.{r}")) for r in (0, 1)) - killed_at
            _, err = proc.communicate(timeout=120)
            if proc.returncode != 0:
                raise SystemExit(f"warm_restart.py: {command[0]} exited {proc.returncode}:\n{err.decode()}")
            return init, step
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--torch", choices=("2", "1.13"), default="2")
    parser.add_argument("--ddprun", default=os.path.join(ROOT, "build", "launcher", "ddprun"))
    args = parser.parse_args()
    python = torch2_python() if args.torch == "2" else PYTHON_113
    env = dict(os.environ, PYTHON_EXEC=python)
    env.pop("PYTHONPATH", None)
    ddprun = [args.ddprun, "--nproc_per_node=2", "--max_restarts=1", "--restart_backoff_max=0"]
    launchers = {
        "ddprun --warm_start=off": lambda: ddprun + ["--warm_start=off", WORKER],
        "ddprun --warm_start=on": lambda: ddprun + ["--warm_start=on", WORKER],
    }
    if args.torch == "2":
        # DDP's constructor imports torch._dynamo (and sympy, ...) in torch 2.x: 1.4 s and more here.
        launchers["ddprun --warm_start=on --preload=torch._dynamo"] = lambda: ddprun + [
            "--warm_start=on", "--preload=torch._dynamo", WORKER]
    tr, fixes = torchrun(args.torch)
    launchers[f"torchrun {args.torch}"] = lambda: tr + fixes + [
        "--nproc_per_node=2", "--max_restarts=1", f"--master_port={free_port()}", WORKER]
    results = {name: [] for name in launchers}
    for r in range(args.runs):
        for name, command in launchers.items():
            results[name].append(one_run(command(), env))
        print(f"round {r + 1}/{args.runs}: " + ", ".join(f"{n} {v[-1][0]:.2f} s" for n, v in results.items()),
              file=sys.stderr)
    version = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                             text=True).stdout.strip()
    print(f"\nkill -9 of rank 1 of 2 (gloo DDP, CPU, torch {version}) -> every rank past init_process_group "
          f"again / past its first step again; {args.runs} runs, seconds\n")
    print("| launcher | to init: median | slowest | to first step: median | slowest |")
    print("|---|---|---|---|---|")
    for name, values in results.items():
        init = [v[0] for v in values]
        step = [v[1] for v in values]
        print(f"| {name} | {statistics.median(init):.2f} | {max(init):.2f} | {statistics.median(step):.2f} | "
              f"{max(step):.2f} |")


if __name__ == "__main__":
    main()
