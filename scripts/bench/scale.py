#!/usr/bin/python3
"""The TCP rendezvous host at scale: one real ddprun host and N-1 simulated nodes.

  scripts/bench/scale.py [--nodes 1024,4096,8192,10000,16384] [--runs 3] [--default-check 8192] [--hold SECONDS]

The host is a real ddprun (--rdzv_backend=c10d, --nnodes=2:N, one trivial worker: `sleep`) on
127.0.0.2; the other N-1 nodes are build/elastic/ddprun_rendezvous_sim, one process whose nodes
are the real node's parts (tcp/channel, node_spec, NodeRound; see elastic/bench/) with simulated
workers, each from its own loopback address, without a secret (the host runs open). Before
measuring, a real ddprun node's join line is captured at a listening socket and compared byte
for byte with the simulator's (but for master_port, a port the real node holds). Prints, medians
over --runs:
  1. join -> every node assigned: from the simulator's first connect (the host already up) to
     the last node's first round; all N-1 nodes connect at once, one after the other (their
     sockets made and bound before), and each sends its join as soon as its connect() returns;
     in brackets, when the last join was sent: the rest is the host's;
  2. a node lost -> every other node re-assigned: one simulated node's connection closed (a
     launcher killed) to the last survivor's next round (the host's own worker is restarted too);
  3. the host's peak RSS (VmHWM);
  4. the CPU time of the host and of the simulator over 1 and 2 (from the simulator's start to
     the last survivor re-assigned), in microseconds a node: on a loaded machine the two share
     the cores with everything else, so this, not the wall time, is what a change of either
     moves first;
  5. with --hold SECONDS: every node then stays connected and idle that long, and the host's CPU
     time over it (heartbeats only) is printed as a share of one core, with the simulator's.
The host runs with --rdzv_conf max_connections=N+16, so that the figures measure the host, not
this machine's ulimit -n; --default-check N runs N nodes once with the default settings and
prints whether they ran or how many were refused, with the host's message. Both processes share
this machine's cores: the figures are an upper bound. --heartbeat=2:20 gives every node (host
and simulated) --rdzv_conf heartbeat_interval=2,heartbeat_timeout=20: a quarter of the
heartbeats.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from benchlib import ROOT, free_port

HOST = "127.0.0.2"


def wait_listening(port, proc, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"scale: the host exited with {proc.returncode}: {proc.stderr.read()}")
        with socket.socket() as s:
            if s.connect_ex((HOST, port)) == 0:
                return
        time.sleep(0.02)
    sys.exit("scale: the host did not listen")


def host_command(ddprun, nodes, port, conf):
    return [ddprun, f"--nnodes=2:{nodes}", "--nproc_per_node=1", "--rdzv_backend=c10d",
            f"--rdzv_endpoint={HOST}:{port}", "--rdzv_id=scale", f"--local_addr={HOST}", f"--rdzv_conf={conf}",
            "sleep", "1000"]


def check_join_bytes(ddprun, sim):
    """A real node's join, captured, against the simulator's: equal but for master_port."""
    port = free_port()
    listener = socket.create_server((HOST, port))
    node = subprocess.Popen([ddprun, "--nnodes=2:4", "--nproc_per_node=1", "--rdzv_backend=c10d",
                             f"--rdzv_endpoint={HOST}:{port}", "--rdzv_id=scale", "--local_addr=127.0.0.1",
                             "true"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        listener.settimeout(30)
        conn, _ = listener.accept()
        conn.settimeout(30)
        data = b""
        while b"\n" not in data:
            chunk = conn.recv(4096)
            if not chunk:
                break
            data += chunk
        conn.close()
    finally:
        node.kill()
        node.wait()
        listener.close()
    real = data.split(b"\n", 1)[0].decode()
    port_field = f'"master_port":{json.loads(real)["node"]["master_port"]}'
    simulated = subprocess.run([sim, f"{HOST}:{port}", "1", "scale", "2:4", "--print-join"], check=True,
                               capture_output=True, text=True).stdout.strip()
    if real.replace(port_field, '"master_port":1') != simulated:
        sys.exit(f"scale: the simulator's join differs from a real node's:\n  real      {real}\n  simulated {simulated}")
    print(f"join line: the simulator's equals a real node's byte for byte (but master_port): {simulated}")


def cpu_seconds(pid):
    """The user and system CPU time of process `pid` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def simulate(args, host_pid):
    """Runs the simulator; its events by name, each with the CPU time of the host ("host_cpu") and
    of the simulator ("sim_cpu") from the simulator's start to when it was read, the host's CPU
    time while it held its nodes idle added to "held"; {"failed": its last line} when it failed."""
    with tempfile.TemporaryFile("w+") as err:
        host_from = cpu_seconds(host_pid)
        sim = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=err, text=True)
        watchdog = threading.Timer(300, sim.kill)
        watchdog.start()
        events, held_from = {}, 0.0
        for line in sim.stdout:
            event = json.loads(line)
            events[event["event"]] = event
            # The simulator is not reaped before the loop ends: its /proc entry outlives its exit.
            event["host_cpu"], event["sim_cpu"] = cpu_seconds(host_pid) - host_from, cpu_seconds(sim.pid)
            if event["event"] == "holding":
                held_from = cpu_seconds(host_pid)
            elif event["event"] == "held":
                event["host_cpu_seconds"] = cpu_seconds(host_pid) - held_from
        sim.wait()
        watchdog.cancel()
        if sim.returncode != 0:
            err.seek(0)
            lines = err.read().strip().splitlines() or [f"the simulator exited with {sim.returncode}"]
            return {"failed": lines[-1]}
    return events


def run(ddprun, sim, nodes, conf, fail=True, heartbeat=None, hold=0):
    """One run: the host and nodes-1 simulated nodes; returns the simulator's events and the host's VmHWM."""
    port = free_port()
    if heartbeat:
        interval, timeout = heartbeat.split(":")
        conf += f",heartbeat_interval={interval},heartbeat_timeout={timeout}"
    host = subprocess.Popen(host_command(ddprun, nodes, port, conf), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_listening(port, host)
        args = [sim, f"{HOST}:{port}", str(nodes - 1), "scale", f"2:{nodes}"] + (["--fail"] if fail else [])
        if heartbeat:
            args.append(f"--heartbeat={heartbeat}")
        if hold:
            args.append(f"--hold={hold}")
        events = simulate(args, host.pid)
        if "failed" in events:
            return events, 0
        with open(f"/proc/{host.pid}/status") as f:
            hwm = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    finally:
        host.terminate()
        _, err = host.communicate(timeout=60)
    events["host_stderr"] = err
    return events, hwm


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ddprun", default=os.path.join(ROOT, "build/launcher/ddprun"))
    p.add_argument("--sim", default=os.path.join(ROOT, "build/elastic/ddprun_rendezvous_sim"))
    p.add_argument("--nodes", default="1024,4096,8192,10000,16384")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--default-check", type=int, default=8192, metavar="N")
    p.add_argument("--heartbeat", metavar="INTERVAL:TIMEOUT",
                   help="every node's --rdzv_conf heartbeat_interval and heartbeat_timeout (default 0.5:5)")
    p.add_argument("--hold", type=float, default=0, metavar="SECONDS",
                   help="keep the nodes connected and idle this long after each run; print the CPU at rest")
    a = p.parse_args()
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the start, "
          f"ulimit -n {os.sysconf('SC_OPEN_MAX')}")
    check_join_bytes(a.ddprun, a.sim)
    rest = " host CPU at rest (heartbeats only) | the simulator's |" if a.hold else ""
    print(f"| nodes | join -> every node assigned | a node lost -> every other node re-assigned | host peak RSS "
          f"| CPU of both, a node: host + simulator |{rest}")
    print("|---|---|---|---|---|" + ("---|---|" if a.hold else ""))
    for nodes in map(int, a.nodes.split(",")):
        joins, sent, fails, rss, host_cpu, sim_cpu, host_rest, sim_rest, failures = [], [], [], [], [], [], [], [], []
        for _ in range(a.runs):
            events, hwm = run(a.ddprun, a.sim, nodes, f"max_connections={nodes + 16}", heartbeat=a.heartbeat,
                              hold=a.hold)
            if "failed" in events:
                failures.append(events["failed"])
                continue
            if events["assigned"]["nodes"] != nodes - 1 or "refused" in events:
                sys.exit(f"scale: not every node was assigned: {events}")
            joins.append(events["assigned"]["seconds"])
            sent.append(events["assigned"].get("joins_sent_seconds", 0))
            fails.append(events["reassigned"]["seconds"])
            rss.append(hwm)
            host_cpu.append(events["reassigned"]["host_cpu"] / nodes)
            sim_cpu.append(events["reassigned"]["sim_cpu"] / nodes)
            if a.hold:
                host_rest.append(events["held"]["host_cpu_seconds"] / a.hold)
                sim_rest.append(events["held"]["cpu_seconds"] / a.hold)
        failed = f" ({len(failures)} of {a.runs} runs failed: {failures[0]})" if failures else ""
        if not joins:
            print(f"| {nodes} | - | - | - | - |{' - | - |' if a.hold else ''}{failed}", flush=True)
            continue
        at_rest = (f" {statistics.median(host_rest) * 100:.0f} % of a core | {statistics.median(sim_rest) * 100:.0f} % |"
                   if a.hold else "")
        joined = f"{statistics.median(joins) * 1000:.0f} ms"
        if all(sent):
            joined += f" (the last join sent at {statistics.median(sent) * 1000:.0f} ms)"
        print(f"| {nodes} | {joined} | {statistics.median(fails) * 1000:.0f} ms "
              f"| {statistics.median(rss) / 1024:.1f} MiB "
              f"| {statistics.median(host_cpu) * 1e6:.0f} + {statistics.median(sim_cpu) * 1e6:.0f} us |{at_rest}{failed}",
              flush=True)
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    if a.default_check:
        n = a.default_check
        events, _ = run(a.ddprun, a.sim, n, "last_call_timeout=2", fail=False)
        if "failed" in events:
            print(f"{n} nodes, default settings: the run failed: {events['failed']}")
        elif "refused" in events:
            lines = [l for l in events["host_stderr"].splitlines() if "refused a node" in l]
            print(f"{n} nodes, default settings: {events['refused']['nodes']} refused, "
                  f"{events['assigned']['nodes'] + 1} ran; the refused nodes' error: {events['refused']['error']}; "
                  f"the host said it {len(lines)} time(s)")
        else:
            print(f"{n} nodes, default settings: every node ran")


if __name__ == "__main__":
    main()
