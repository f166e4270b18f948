#!/usr/bin/python3
"""Hot spares: a node's launcher SIGKILLed -> every worker of the job running again.

  scripts/bench/spares.py [--ddprun build/launcher/ddprun] [--runs 5]

A job of 3 nodes (launchers on 127.0.0.2, .3, .4, one worker each: the C program of benchlib that
stamps the time its main() runs) loses node .4 (SIGKILL of its ddprun, not the TCP host, not the
etcd leader). Printed, for the TCP rendezvous (c10d, hosted by node .2) and for etcd (one member
started here on loopback), the median seconds from the kill to the last of the 3 workers of the
next round started:
  spare        --nnodes=3 --rdzv_conf spares=1, a 4th node (.5) joined beforehand and waiting as
               a spare (its event log's "spare" event): the next round takes it;
  replacement  --nnodes=3, no spare: a new node (.5) is started the moment the node is killed,
               the best a scheduler can do (torchrun's answer to a lost node: wait for one);
  shrink       --nnodes=2:3, no spare: the survivors go on as 2 nodes (world size 2, not 3).
In etcd a lost node is noticed when its lease expires (heartbeat_timeout, 5 s by default): the
rows with heartbeat_timeout=2 show how much of the time that is.

The last row is torchrun 2.11 (the venv's, c10d, --no-python) in the same scenarios: it has no
spares; a new node makes the survivors restart their workers (they see a node waiting), and a
lost node alone makes them do nothing until one of their workers fails (these workers run no
collective that could fail), so "shrink" is given up after --torchrun-wait seconds. The worker
of torchrun's killed agent outlives it (torchrun gives its workers no parent-death signal); the
benchmark kills it.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time

from benchlib import ROOT, compile_worker, free_port, terminate_all, torchrun, written_stamps
from rendezvous import local_etcd


def node_command(launcher, rdzv, i, nnodes, run_id, conf, d):
    """A node's command line for `launcher`: a ddprun binary, or a torchrun command (a list)."""
    if isinstance(launcher, list):  # torchrun: no event log, no spares
        return [*launcher, f"--nnodes={nnodes}", "--nproc_per_node=1", *rdzv, f"--rdzv_id={run_id}",
                f"--local_addr=127.0.0.{i + 2}", "--max_restarts=0", "--no_python"]
    extra = [f"--rdzv_conf={conf}"] if conf else []
    return [launcher, f"--nnodes={nnodes}", "--nproc_per_node=1", *rdzv, f"--rdzv_id={run_id}",
            f"--local_addr=127.0.0.{i + 2}", "--max_restarts=0", f"--event_log={d}/events.{i}", *extra]


def wait_until(check, deadline, what):
    while not check():
        if time.time() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.005)


def one_run(launcher, worker, rdzv, mode, conf, run_id, wait=60):
    """Seconds from the SIGKILL of node 2 to the last worker of the next round started; None if
    that round did not start within `wait` seconds."""
    nnodes = {"spare": "3", "replacement": "3", "shrink": "2:3"}[mode]
    conf = ",".join(c for c in (conf, "spares=1" if mode == "spare" else "") if c)
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, OMP_NUM_THREADS="1", CRASH_RANK="none")  # every worker waits
        start = lambda i: subprocess.Popen(  # noqa: E731
            node_command(launcher, rdzv, i, nnodes, run_id, conf, d) + [worker, d], env=env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs = []
        try:
            deadline = time.time() + 120
            procs = [start(i) for i in range(3)]
            wait_until(lambda: len(written_stamps(d)) == 3, deadline, "the 3 workers")
            if mode == "spare":
                procs.append(start(3))
                is_spare = lambda: os.path.exists(f"{d}/events.3") and '"spare"' in open(f"{d}/events.3").read()  # noqa: E731
                wait_until(is_spare, deadline, "the spare")
            killed = time.time()
            procs[2].kill()
            if mode == "replacement":
                procs.append(start(3))
            world = 2 if mode == "shrink" else 3
            try:
                wait_until(lambda: len([t for t in written_stamps(d) if t > killed]) >= world, killed + wait,
                           "the next round's workers")
            except RuntimeError:
                return None
            return max(t for t in written_stamps(d) if t > killed) - killed
        finally:
            if isinstance(launcher, list):  # torchrun's agents may be stuck in a rendezvous that never ends
                for p in procs:
                    p.kill()
            terminate_all(procs)
            subprocess.run(["pkill", "-KILL", "-f", f"{worker} {d}"], check=False)  # torchrun's workers


def median_ms(times):
    """The median in ms of the runs that re-formed, with how many did not; "-" for no runs."""
    if not times:
        return "-"
    done = [t for t in times if t is not None]
    figure = f"{statistics.median(done) * 1e3:.0f}" if done else "none"
    return figure if len(done) == len(times) else f"{figure} ({len(times) - len(done)} never)"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ddprun", default=os.path.join(ROOT, "build", "launcher", "ddprun"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--torchrun-wait", type=float, default=30,
                    help="seconds torchrun is given to re-form after a lost node (default 30)")
    ap.add_argument("--no-torchrun", action="store_true", help="leave out torchrun 2.11's row")
    args = ap.parse_args()
    if not shutil.which("etcd"):
        raise SystemExit("bench/spares.py: needs etcd (apt-get install etcd-server)")
    with tempfile.TemporaryDirectory() as tmp:
        worker = compile_worker(tmp)
        with local_etcd(tmp) as endpoint:
            print(f"machine: {os.cpu_count()} cores; nodes are launchers on 127.0.0.2..5; etcd {endpoint}")
            print("a node's launcher SIGKILLed -> every worker of the next round running (median of "
                  f"{args.runs}), 3 nodes")
            print(f"{'backend':<32} {'spare ms':>9} {'replacement ms':>15} {'shrink to 2 ms':>15}")
            rows = [("tcp (c10d)", args.ddprun, "c10d", ""), ("etcd", args.ddprun, "etcd", ""),
                    ("etcd, heartbeat_timeout=2", args.ddprun, "etcd", "heartbeat_timeout=2")]
            if not args.no_torchrun:
                rows.append(("torchrun 2.11, c10d", torchrun("2")[0], "c10d", ""))
            for label, launcher, backend, conf in rows:
                ours = not isinstance(launcher, list)
                modes = ("spare", "replacement", "shrink") if ours else ("replacement", "shrink")
                figures = {}
                # The modes alternate within each run so that a drifting machine weighs on all alike.
                for k in range(args.runs):
                    for mode in modes:
                        port = free_port()
                        rdzv = (["--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.2:{port}"] if backend == "c10d"
                                else ["--rdzv_backend=etcd", f"--rdzv_endpoint={endpoint}"])
                        t = one_run(launcher, worker, rdzv, mode, conf, f"spares-{mode}-{port}",
                                    wait=60 if ours else args.torchrun_wait)
                        figures.setdefault(mode, []).append(t)
                print(f"{label:<32} {median_ms(figures.get('spare')):>9} {median_ms(figures['replacement']):>15} "
                      f"{median_ms(figures['shrink']):>15}")


if __name__ == "__main__":
    main()
