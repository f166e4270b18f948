#!/usr/bin/python3
"""A first start of 2 nodes where the second comes 3 s late: from the second node's start to
every worker past init_process_group (and past its first DDP step), with ddprun's --warm_start=off
and =on and torchrun, taking turns in each round.

  python3 scripts/bench/warm_first_start.py [--runs 10] [--late 3] [--ddprun build/launcher/ddprun]

Both nodes on this machine (127.0.0.2 and .3, one worker each, the TCP rendezvous, c10d for
torchrun, hosted by the first node), running warm_restart_python_worker.py with WARM_BENCH_ONCE=1
on the venv's torch 2.x. With --warm_start=on, each node's warm interpreter starts with ddprun,
before the rendezvous: the first node's import is done while it waits for the second; the second
node's import is still on the way (it starts late), so what a late node costs is one import, not
two in a row. Prints the median and the slowest, and the medians of the second node's launch to
its script's first line and of that line to past init.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import BENCH_DIR, ROOT, free_port, read_stamp, stop_launcher, torch2_python, torchrun

WORKER = os.path.join(BENCH_DIR, "warm_restart_python_worker.py")


def one_run(launcher, extra, late, env):
    """(second node's launch -> every rank past init, -> every first step, -> its script's first
    line, that line -> past init), seconds."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="warm-first-") as d:
        def start(i):
            return subprocess.Popen(
                launcher + ["--nnodes=2", "--nproc_per_node=1", "--max_restarts=0", "--rdzv_backend=c10d",
                            f"--rdzv_endpoint=127.0.0.2:{port}", "--rdzv_id=late", f"--local_addr=127.0.0.{i + 2}",
                            *extra, WORKER, d],
                env=env, stdout=subprocess.DEVNULL, stderr=open(os.path.join(d, f"err.{i}"), "wb"),
                start_new_session=True)
        procs = [start(0)]
        try:
            time.sleep(late)  # the late node: the figure is timed from its launch, not from this sleep
            launched = time.time()
            procs.append(start(1))
            for p in procs:
                if p.wait(timeout=180) != 0:
                    errors = "".join(open(os.path.join(d, f"err.{i}"), errors="replace").read()[-600:] for i in (0, 1))
                    raise RuntimeError(f"a node exited {p.returncode}: {errors}")
            stamp = lambda what, r: read_stamp(os.path.join(d, f"{what}.0.{r}"))  # noqa: E731
            init = max(stamp("init", r) for r in (0, 1))
            return (init - launched, max(stamp("step", r) for r in (0, 1)) - launched,
                    stamp("start", 1) - launched, stamp("init", 1) - stamp("start", 1))
        finally:
            for p in procs:
                stop_launcher(p)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--late", type=float, default=3.0)
    parser.add_argument("--ddprun", default=os.path.join(ROOT, "build", "launcher", "ddprun"))
    args = parser.parse_args()
    python = torch2_python()
    env = dict(os.environ, PYTHON_EXEC=python, WARM_BENCH_ONCE="1")
    env.pop("PYTHONPATH", None)
    rows = {
        "ddprun --warm_start=off": ([args.ddprun], ["--warm_start=off"]),
        "ddprun --warm_start=on": ([args.ddprun], ["--warm_start=on"]),
        "torchrun 2": (torchrun("2")[0], []),
    }
    results = {name: [] for name in rows}
    failures = {name: 0 for name in rows}
    for r in range(args.runs):
        for name, (launcher, extra) in rows.items():
            try:
                results[name].append(one_run(launcher, extra, args.late, env))
            except (RuntimeError, subprocess.TimeoutExpired) as error:
                failures[name] += 1
                print(f"warm_first_start.py: a run of {name} failed: {error}", file=sys.stderr)
        print(f"round {r + 1}/{args.runs}: " + ", ".join(
            f"{n} {v[-1][0]:.2f} s" for n, v in results.items() if v), file=sys.stderr)
    load = os.getloadavg()
    print(f"\n2 nodes of 1 worker (gloo DDP, CPU), the second launched {args.late:g} s after the first: from its "
          f"launch, seconds; {args.runs} runs; load average at the end {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}\n")
    print("| launcher | every rank past init: median | slowest | past the first step: median | "
          "late node's script starts | its import + init | runs failed |")
    print("|---|---|---|---|---|---|---|")
    for name, values in results.items():
        if not values:
            print(f"| {name} | | | | | | {failures[name]} |")
            continue
        col = lambda i: [v[i] for v in values]  # noqa: E731
        print(f"| {name} | {statistics.median(col(0)):.2f} | {max(col(0)):.2f} | {statistics.median(col(1)):.2f} | "
              f"{statistics.median(col(2)):.2f} | {statistics.median(col(3)):.2f} | {failures[name]} |")


if __name__ == "__main__":
    main()
