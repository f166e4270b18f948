#!/usr/bin/python3
"""What losing an etcd member costs a job that forms in etcd (--rdzv_backend=etcd).

  scripts/bench/etcd_members.py [--ddprun build/launcher/ddprun] [--runs 5]

A 3-member etcd on loopback (started here), two nodes (launchers on 127.0.0.2 and 127.0.0.3, one
worker each: a C program that stamps the time its main() runs). Node a joins; then etcd's Raft
leader is lost, and node b starts. Each row is the median time from the loss (or, with no loss,
from b's start) to both workers running:
  - no loss, for scale;
  - the Raft leader SIGKILLed, it being the member the nodes talk to first;
  - the Raft leader SIGKILLed, the nodes talking to a follower (whose requests wait for a leader
    that died: etcd holds them about 7 s);
  - the Raft leader SIGSTOPped (hung: no FIN, no answer), it being the nodes' first member.
etcd elects a new leader in about a second (its default election timeout); the rest is ddprun's.
"""
import argparse
import base64
import contextlib
import json
import os
import signal
import statistics
import subprocess
import tempfile
import time
import urllib.request

from benchlib import ROOT, compile_worker, free_port, terminate_all, written_stamps

FORM_LIMIT = 60  # seconds: a job that has not formed by then is reported as not formed


def post(port, path, body, timeout=1.0):
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as r:
        return json.load(r)


class Cluster:
    """Three etcd members on free loopback ports, their data in `tmp`."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.names = ["m1", "m2", "m3"]
        self.client = {n: free_port() for n in self.names}
        self.peer = {n: free_port() for n in self.names}
        self.cluster = ",".join(f"{n}=http://127.0.0.1:{self.peer[n]}" for n in self.names)
        self.procs = {}
        for n in self.names:
            self.start(n)
        self.wait_healthy()

    def start(self, n):
        url = f"http://127.0.0.1:{self.client[n]}"
        self.procs[n] = subprocess.Popen(
            ["etcd", "--name", n, "--data-dir", os.path.join(self.tmp, f"etcd.{n}"), "--listen-client-urls", url,
             "--advertise-client-urls", url, "--listen-peer-urls", f"http://127.0.0.1:{self.peer[n]}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.peer[n]}", "--initial-cluster", self.cluster,
             "--initial-cluster-token", self.tmp], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def wait_healthy(self):
        deadline = time.time() + 60
        while True:
            up = 0
            for n in self.names:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{self.client[n]}/health", timeout=1) as r:
                        up += b'"true"' in r.read()
                except OSError:
                    pass
            if up == len(self.names):
                return
            if time.time() > deadline:
                raise RuntimeError("etcd members not healthy after 60 s")
            time.sleep(0.05)

    def raft_leader(self):
        deadline = time.time() + 30
        while time.time() < deadline:
            for n in self.names:
                try:
                    s = post(self.client[n], "/v3/maintenance/status", {})
                    if s.get("leader") and s["leader"] == s["header"]["member_id"]:
                        return n
                except OSError:
                    pass
            time.sleep(0.05)
        raise RuntimeError("etcd has no Raft leader")

    def has_node(self, port, run_id):
        prefix = f"/ddprun/v1/{run_id}/nodes/".encode()
        end = prefix[:-1] + bytes([prefix[-1] + 1])
        try:
            answer = post(port, "/v3/kv/range", {"key": base64.b64encode(prefix).decode(),
                                                 "range_end": base64.b64encode(end).decode(), "count_only": True})
        except OSError:
            return False
        return int(answer.get("count", 0)) > 0

    def stop(self):
        for p in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGCONT)
            p.terminate()
        for p in self.procs.values():
            p.wait(timeout=30)


def one_run(ddprun, worker, cluster, k, case):
    """Seconds from the loss (case: None, "kill", "kill-follower", "stop"; None: from b's start)
    to both workers running; None when the job did not form within FORM_LIMIT seconds."""
    leader = cluster.raft_leader()
    follower = next(n for n in cluster.names if n != leader)
    first = follower if case == "kill-follower" else leader
    order = [first] + [n for n in cluster.names if n != first]
    endpoints = ",".join(f"127.0.0.1:{cluster.client[n]}" for n in order)
    run_id = f"loss-{case}-{k}-{os.getpid()}"
    with tempfile.TemporaryDirectory() as d:
        def node(i):
            return subprocess.Popen(
                [ddprun, "--nnodes=2", "--nproc_per_node=1", "--rdzv_backend=etcd", f"--rdzv_endpoint={endpoints}",
                 f"--rdzv_id={run_id}", f"--local_addr=127.0.0.{i + 2}", "--rdzv_conf=join_timeout=60",
                 worker, d],
                env=dict(os.environ, CRASH_RANK="none"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        nodes = [node(0)]
        try:
            deadline = time.time() + 60
            while not cluster.has_node(cluster.client[follower], run_id):
                if time.time() > deadline:
                    raise RuntimeError("node a did not join")
                time.sleep(0.01)
            t0 = time.time()
            if case in ("kill", "kill-follower"):
                cluster.procs[leader].kill()
            elif case == "stop":
                cluster.procs[leader].send_signal(signal.SIGSTOP)
            nodes.append(node(1))
            while len(started := written_stamps(d)) < 2:
                if time.time() > t0 + FORM_LIMIT:
                    return None
                time.sleep(0.005)
            return max(started) - t0
        finally:
            terminate_all(nodes)
            if case in ("kill", "kill-follower"):
                cluster.procs[leader].wait()
                cluster.start(leader)
            elif case == "stop":
                cluster.procs[leader].send_signal(signal.SIGCONT)
            cluster.wait_healthy()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ddprun", default=os.path.join(ROOT, "build", "launcher", "ddprun"))
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    cases = [(None, "no loss: node b started → both workers running"),
             ("kill", "Raft leader SIGKILLed, the nodes' first member → both workers running"),
             ("kill-follower", "Raft leader SIGKILLed, the nodes talking to a follower → both workers running"),
             ("stop", "Raft leader SIGSTOPped, the nodes' first member → both workers running")]
    times = {case: [] for case, _ in cases}
    with tempfile.TemporaryDirectory() as tmp:
        worker = compile_worker(tmp)
        cluster = Cluster(tmp)
        try:
            for k in range(args.runs):  # the cases alternate: a drifting machine affects all alike
                for case, _ in cases:
                    times[case].append(one_run(args.ddprun, worker, cluster, k, case))
        finally:
            cluster.stop()
    print(f"etcd member loss, 3-member etcd on loopback, 2 nodes, medians of {args.runs}:")
    print("| what | ms |\n|---|---|")
    for case, what in cases:
        formed = [t for t in times[case] if t is not None]
        if len(formed) == len(times[case]):
            print(f"| {what} | {statistics.median(formed) * 1000:.0f} |")
        else:
            print(f"| {what} | did not form within {FORM_LIMIT} s in {len(times[case]) - len(formed)} of "
                  f"{len(times[case])} runs |")


if __name__ == "__main__":
    main()
