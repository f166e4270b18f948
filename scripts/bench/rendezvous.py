#!/usr/bin/python3
"""Multi-node benchmark: ddprun next to torchrun's c10d rendezvous, nodes on loopback.

  scripts/bench/rendezvous.py [--ddprun build/launcher/ddprun] [--runs 5]
  scripts/bench/rendezvous.py --etcd [--runs 3]     only 3., against a local etcd it starts

N nodes are N launchers on 127.0.0.2, 127.0.0.3, ..., one worker each (a C program that stamps
the time its main() runs). Prints:
  1. rendezvous: from the start of the last launcher to the last worker's main(), N = 2, 4, 8;
  2. failure to all nodes restarted: from a worker's failure on node 1 to the last restarted
     worker's main(), minus the worker's own start-up.
  3. (--etcd) rendezvous in etcd (--rdzv_backend=etcd, one etcd member started here on
     loopback) next to ddprun's own TCP rendezvous (c10d) and torchrun 2.x's c10d, N = 2, 8, 32;
  4. (--etcd) a node's launcher SIGKILLed -> the survivors' workers running again, N = 4 with
     --nnodes=3:4: in etcd the first node (the one that runs the job) or another, at the default
     heartbeat_timeout (5 s, the lease) and at 2 s; with the TCP rendezvous a node that is not
     the host (whose loss ends the job there).
torchrun's figures include its interpreter start-up (about 1 s per agent here), which is what
its users wait for; ddprun has none to speak of.
"""
import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import tempfile
import time
import urllib.request

from benchlib import (ROOT, TORCHRUN, TORCHRUN_FIXES, compile_worker, free_port, read_stamp, terminate_all, torchrun,
                      written_stamps)


def ddprun_node(ddprun, i, n, port, run_id, extra):
    return [ddprun, f"--nnodes={n}", "--nproc_per_node=1", "--rdzv_backend=c10d",
            f"--rdzv_endpoint=127.0.0.2:{port}", f"--rdzv_id={run_id}", f"--local_addr=127.0.0.{i + 2}",
            *extra]


def etcd_node(ddprun, endpoint, i, n, port, run_id, extra):
    # The port is fresh per run: it keeps each run's keys apart in the one etcd.
    return [ddprun, f"--nnodes={n}", "--nproc_per_node=1", "--rdzv_backend=etcd", f"--rdzv_endpoint={endpoint}",
            f"--rdzv_id={run_id}-{port}", f"--local_addr=127.0.0.{i + 2}", *extra]


@contextlib.contextmanager
def local_etcd(tmp):
    """One etcd member on free loopback ports, its data in `tmp`; yields its HOST:PORT."""
    client, peer = free_port(), free_port()
    proc = subprocess.Popen(
        ["etcd", "--name", "bench", "--data-dir", os.path.join(tmp, "etcd"),
         "--listen-client-urls", f"http://127.0.0.1:{client}", "--advertise-client-urls", f"http://127.0.0.1:{client}",
         "--listen-peer-urls", f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-cluster", f"bench=http://127.0.0.1:{peer}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{client}/health", timeout=1) as r:
                    if b'"true"' in r.read():
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("etcd did not start")
            time.sleep(0.05)
        yield f"127.0.0.1:{client}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def torchrun_node(i, n, port, run_id, extra):
    return TORCHRUN + [f"--nnodes={n}", "--nproc_per_node=1", "--rdzv_backend=c10d",
                       f"--rdzv_endpoint=127.0.0.2:{port}", f"--rdzv_id={run_id}", "--no_python",
                       *TORCHRUN_FIXES, *extra]


def torchrun2_node(i, n, port, run_id, extra):
    command, fixes = torchrun("2")
    return command + [f"--nnodes={n}", "--nproc_per_node=1", "--rdzv_backend=c10d",
                      f"--rdzv_endpoint=127.0.0.2:{port}", f"--rdzv_id={run_id}", "--no_python", *fixes, *extra]


def death_to_restart(make_cmd, worker, n, runs, victim, extra=()):
    """Median seconds from SIGKILL of node `victim`'s launcher to the last of the n-1 survivors'
    workers started again, with --nnodes=(n-1):n."""
    lat = []
    for k in range(runs):
        with tempfile.TemporaryDirectory() as d:
            port = free_port()
            env = dict(os.environ, OMP_NUM_THREADS="1", CRASH_RANK="none")  # all workers wait
            cmds = [[f"--nnodes={n - 1}:{n}" if a.startswith("--nnodes=") else a
                     for a in make_cmd(i, n, port, f"death{k}", ["--max_restarts=0", *extra])] + [worker, d]
                    for i in range(n)]
            procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                     for cmd in cmds]
            try:
                deadline = time.time() + 120
                while len(written_stamps(d)) < n:
                    if time.time() > deadline:
                        raise RuntimeError("workers did not start")
                    time.sleep(0.005)
                killed = time.time()
                procs[victim].kill()
                while len([t for t in written_stamps(d) if t > killed]) < n - 1:
                    if time.time() > deadline + 60:
                        raise RuntimeError("the survivors did not start again")
                    time.sleep(0.005)
                lat.append(max(t for t in written_stamps(d) if t > killed) - killed)
            finally:
                terminate_all(procs)
    return statistics.median(lat)


def run_nodes(commands, env, limit):
    """Runs every node to its end; False if they were still running after `limit` seconds."""
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for cmd in commands]
    deadline = time.time() + limit
    try:
        for p in procs:
            if p.wait(timeout=max(0.1, deadline - time.time())) != 0:
                raise RuntimeError(f"a node failed: {commands[0]}")
        return True
    except subprocess.TimeoutExpired:
        return False
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def rendezvous_time(make_cmd, worker, n, runs):
    times = []
    for k in range(runs):
        with tempfile.TemporaryDirectory() as d:
            port = free_port()
            env = dict(os.environ, OMP_NUM_THREADS="1", CRASH_RANK="none")  # all workers wait
            cmds = [make_cmd(i, n, port, f"bench{k}", ["--max_restarts=0"]) + [worker, d] for i in range(n)]
            started = run_nodes_until_workers(cmds, env, d, n)
            times.append(started)
    return statistics.median(times)


def run_nodes_until_workers(commands, env, d, n):
    """Starts the nodes; once every worker has stamped, stops them; returns last stamp - last start."""
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for cmd in commands]
    last_start = time.time()
    deadline = time.time() + 120
    try:
        while len(stamps := written_stamps(d)) < n:
            if time.time() > deadline:
                raise RuntimeError("workers did not start")
            time.sleep(0.005)
        return max(stamps) - last_start
    finally:
        terminate_all(procs)


def restart_latency(make_cmd, worker, n, runs, startup, limit=60):
    """Median latency in seconds, or None when the nodes did not restart within `limit` s."""
    lat = []
    for k in range(runs):
        with tempfile.TemporaryDirectory() as d:
            port = free_port()
            env = dict(os.environ, OMP_NUM_THREADS="1", CRASH_RANK="1")  # rank 1 is on node 1
            cmds = [make_cmd(i, n, port, f"crash{k}", ["--max_restarts=1"]) + [worker, d] for i in range(n)]
            if not run_nodes(cmds, env, limit):
                return None
            crash = read_stamp(os.path.join(d, "crash.0.x"))
            restarted = max(read_stamp(os.path.join(d, f"start.1.{r}")) for r in range(n))
            lat.append(restarted - crash - startup)
    return statistics.median(lat)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ddprun", default=os.path.join(ROOT, "build", "launcher", "ddprun"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--torch-runs", type=int, default=2)
    ap.add_argument("--etcd", action="store_true", help="only the etcd rendezvous next to ddprun's TCP one")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        worker = compile_worker(tmp)
        if args.etcd:
            if not shutil.which("etcd"):
                raise SystemExit("bench/rendezvous.py: --etcd needs etcd (apt-get install etcd-server)")
            with local_etcd(tmp) as endpoint:
                print(f"machine: {os.cpu_count()} cores; nodes are launchers on 127.0.0.2.. ; etcd {endpoint}")
                print("\n3. rendezvous: last launcher started -> every node's worker running (median)")
                print(f"{'nodes':>6} {'tcp (c10d) ms':>14} {'etcd ms':>10} {'torchrun 2.x c10d ms':>21}")
                for n in (2, 8, 32):
                    tcp = rendezvous_time(lambda *a: ddprun_node(args.ddprun, *a), worker, n, args.runs)
                    etcd = rendezvous_time(lambda *a: etcd_node(args.ddprun, endpoint, *a), worker, n, args.runs)
                    t2 = rendezvous_time(torchrun2_node, worker, n, args.torch_runs)
                    print(f"{n:>6} {tcp * 1e3:>14.1f} {etcd * 1e3:>10.1f} {t2 * 1e3:>21.0f}")
                print("\n4. a node's launcher SIGKILLed -> every survivor's worker running again, 4 nodes, "
                      "--nnodes=3:4 (median)")
                etcd = lambda *a: etcd_node(args.ddprun, endpoint, *a)  # noqa: E731
                for what, make, victim, extra in (
                        ("tcp (c10d), a node that is not the host", lambda *a: ddprun_node(args.ddprun, *a), 3, ()),
                        ("etcd, the first node (runs the job)", etcd, 0, ()),
                        ("etcd, another node", etcd, 3, ()),
                        ("etcd, the first node, heartbeat_timeout=2", etcd, 0, ("--rdzv_conf=heartbeat_timeout=2",)),
                        ("etcd, another node, heartbeat_timeout=2", etcd, 3, ("--rdzv_conf=heartbeat_timeout=2",))):
                    t = death_to_restart(make, worker, 4, args.runs, victim, extra)
                    print(f"  {what:<45} {t * 1e3:>8.0f} ms")
            return
        bare = []
        for _ in range(10):
            with tempfile.TemporaryDirectory() as d:
                t0 = time.time()
                subprocess.run([worker, d], check=True,
                               env={k: v for k, v in os.environ.items() if k != "TORCHELASTIC_RESTART_COUNT"})
                bare.append(read_stamp(f"{d}/bare.x.x") - t0)
        startup = statistics.median(bare)

        def ddp(i, n, port, run_id, extra):
            return ddprun_node(args.ddprun, i, n, port, run_id, extra)

        print(f"machine: {os.cpu_count()} cores; nodes are launchers on 127.0.0.2.. ; worker start-up "
              f"{startup * 1e3:.2f} ms")
        print("\n1. rendezvous: last launcher started -> every node's worker running (median)")
        print(f"{'nodes':>6} {'ddprun ms':>10} {'torchrun ms':>12}")
        for n in (2, 4, 8):
            d = rendezvous_time(ddp, worker, n, args.runs)
            t = rendezvous_time(torchrun_node, worker, n, args.torch_runs)
            print(f"{n:>6} {d * 1e3:>10.1f} {t * 1e3:>12.0f}")
        print("\n2. worker failure on node 1 -> workers restarted on every node (median, beyond worker start-up)")
        print(f"{'nodes':>6} {'ddprun ms':>10} {'torchrun ms':>12}")
        for n in (2, 4):
            d = restart_latency(ddp, worker, n, args.runs, startup)
            t = restart_latency(torchrun_node, worker, n, args.torch_runs, startup)
            shown = f"{t * 1e3:>12.0f}" if t is not None else f"{'> 60000':>12}"
            print(f"{n:>6} {d * 1e3:>10.1f} {shown}" + ("  (torchrun: not restarted within 60 s)" if t is None else ""))


if __name__ == "__main__":
    main()
