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

torchrun 2.x (the PyTorch 2.x venv; --torchrun-runs, 0 to leave it out) has no spares: its rows
are replacement and shrink with its c10d rendezvous (hosted by node .2's agent), --max_restarts=3
and its defaults otherwise. Its workers are spares_python_worker.py (gloo, an all-reduce every
50 ms, so that the survivors' workers fail when a peer is lost, as a training's would), and the
lost node is its agent and its worker together, both SIGKILLed (a torchrun agent's SIGKILL alone
leaves its worker running). "job ended": every agent exited before a next round started.
"""
import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import tempfile
import time

from benchlib import BENCH_DIR, ROOT, compile_worker, free_port, terminate_all, torchrun, written_stamps
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


# How long torchrun's next round is waited for.
TORCHRUN_WAIT = 300


def listening(host, port):
    try:
        socket.create_connection((host, port), timeout=1).close()
        return True
    except OSError:
        return False


def process_tree(pid):
    """`pid` and its descendants, from /proc's children lists."""
    tree = [pid]
    for p in tree:
        for task in os.listdir(f"/proc/{p}/task"):
            try:
                with open(f"/proc/{p}/task/{task}/children") as f:
                    tree += [int(c) for c in f.read().split()]
            except OSError:
                pass
    return tree


def torchrun_run(mode, run_id):
    """torchrun 2.x: seconds from the SIGKILL of node 2 (agent and worker) to the last worker of
    the next round started; None when its agents all exited first (the job ended); "again" when
    node .2's agent did not bind the rendezvous port within 60 s (nothing was measured); a
    RuntimeError when nothing happened within TORCHRUN_WAIT."""
    command, fixes = torchrun("2")
    port = free_port()
    nnodes = {"replacement": "3", "shrink": "2:3"}[mode]
    with tempfile.TemporaryDirectory() as d:
        def start(i):
            return subprocess.Popen(
                command + [f"--nnodes={nnodes}", "--nproc_per_node=1", "--rdzv_backend=c10d",
                           f"--rdzv_endpoint=127.0.0.2:{port}", f"--rdzv_id={run_id}", f"--local_addr=127.0.0.{i + 2}",
                           "--max_restarts=3", *fixes, os.path.join(BENCH_DIR, "spares_python_worker.py"), d],
                env=dict(os.environ, OMP_NUM_THREADS="1"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs = []
        try:
            deadline = time.time() + 120
            # On loopback every agent's address matches the endpoint's, so each would host the
            # rendezvous' store if it could: node .2 starts first and binds it, as it alone would
            # on separate hosts.
            procs = [start(0)]
            try:
                wait_until(lambda: listening("127.0.0.2", port), time.time() + 60, "torchrun's rendezvous store")
            except RuntimeError:
                return "again"  # seen once in a run of 6: the agent never listened; another port is tried
            procs += [start(i) for i in (1, 2)]
            wait_until(lambda: len(written_stamps(d, "ready.0.")) == 3, deadline, "torchrun's 3 workers in their all-reduces")
            victims = process_tree(procs[2].pid)
            killed = time.time()
            for pid in victims:
                os.kill(pid, signal.SIGKILL)
            if mode == "replacement":
                procs.append(start(3))
            world = 2 if mode == "shrink" else 3
            agents = [p for i, p in enumerate(procs) if i != 2]
            started = lambda: [t for t in written_stamps(d, "start.") if t > killed]  # noqa: E731
            wait_until(lambda: len(started()) >= world or all(p.poll() is not None for p in agents),
                       killed + TORCHRUN_WAIT, "torchrun's next round")
            return max(started()) - killed if len(started()) >= world else None
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
            for p in procs:
                p.wait(timeout=60)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ddprun", default=os.path.join(ROOT, "build", "launcher", "ddprun"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--torchrun-runs", type=int, default=3)
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
            if args.torchrun_runs > 0:
                figures = {}
                for k in range(args.torchrun_runs):
                    for mode in ("replacement", "shrink"):
                        t = "again"
                        for attempt in range(3):
                            t = torchrun_run(mode, f"torchrun-{mode}-{k}-{attempt}")
                            if t != "again":
                                break
                        if t == "again":
                            raise RuntimeError("torchrun's first agent never bound the rendezvous port, 3 times")
                        figures.setdefault(mode, []).append(t)
                shown = {m: "job ended" if None in v else f"{statistics.median(v) * 1e3:.0f}"
                         for m, v in figures.items()}
                print(f"{'torchrun 2.x (c10d), no spares':<32} {'-':>9} {shown['replacement']:>15} {shown['shrink']:>15}")


if __name__ == "__main__":
    main()
