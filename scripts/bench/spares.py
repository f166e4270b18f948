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
"""
import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time

from benchlib import ROOT, compile_worker, free_port, terminate_all, written_stamps
from rendezvous import local_etcd


def node_command(ddprun, rdzv, i, nnodes, run_id, conf, d):
    extra = [f"--rdzv_conf={conf}"] if conf else []
    return [ddprun, f"--nnodes={nnodes}", "--nproc_per_node=1", *rdzv, f"--rdzv_id={run_id}",
            f"--local_addr=127.0.0.{i + 2}", "--max_restarts=0", f"--event_log={d}/events.{i}", *extra]


def wait_until(check, deadline, what):
    while not check():
        if time.time() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.005)


def one_run(ddprun, worker, rdzv, mode, conf, run_id):
    """Seconds from the SIGKILL of node 2 to the last worker of the next round started."""
    nnodes = {"spare": "3", "replacement": "3", "shrink": "2:3"}[mode]
    conf = ",".join(c for c in (conf, "spares=1" if mode == "spare" else "") if c)
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, OMP_NUM_THREADS="1", CRASH_RANK="none")  # every worker waits
        start = lambda i: subprocess.Popen(  # noqa: E731
            node_command(ddprun, rdzv, i, nnodes, run_id, conf, d) + [worker, d], env=env,
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
            wait_until(lambda: len([t for t in written_stamps(d) if t > killed]) >= world, deadline + 60,
                       "the next round's workers")
            return max(t for t in written_stamps(d) if t > killed) - killed
        finally:
            terminate_all(procs)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ddprun", default=os.path.join(ROOT, "build", "launcher", "ddprun"))
    ap.add_argument("--runs", type=int, default=5)
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
            rows = (("tcp (c10d)", "c10d", ""), ("etcd", "etcd", ""),
                    ("etcd, heartbeat_timeout=2", "etcd", "heartbeat_timeout=2"))
            for label, backend, conf in rows:
                figures = {}
                # The modes alternate within each run so that a drifting machine weighs on all alike.
                for k in range(args.runs):
                    for mode in ("spare", "replacement", "shrink"):
                        port = free_port()
                        rdzv = (["--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.2:{port}"] if backend == "c10d"
                                else ["--rdzv_backend=etcd", f"--rdzv_endpoint={endpoint}"])
                        t = one_run(args.ddprun, worker, rdzv, mode, conf, f"spares-{mode}-{port}")
                        figures.setdefault(mode, []).append(t)
                med = {m: statistics.median(v) * 1e3 for m, v in figures.items()}
                print(f"{label:<32} {med['spare']:>9.0f} {med['replacement']:>15.0f} {med['shrink']:>15.0f}")


if __name__ == "__main__":
    main()
