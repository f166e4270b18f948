#!/usr/bin/python3
"""The workers' store at scale: ddprun's agent store against PyTorch 2.x's libuv TCPStore server.

  scripts/bench/store_scale.py [--ranks 1024,4096,16384] [--runs 3] [--procs 4] [--window 512]
                               [--servers ddprun,libuv] [--ddprun PATH] [--clients PATH]

N simulated ranks speak c10d's TCPStore wire protocol (version 2, as torch 2.x's client does;
elastic/src/store/agent_store.hpp has the encoding) to one server:
  - ddprun: a real `ddprun --nproc_per_node=1` whose one worker writes its MASTER_PORT and
    sleeps: the agent store (the default) serves MASTER_PORT on ddprun's own thread;
  - libuv: `torch.distributed.TCPStore(is_master=True, use_libuv=True)` of the torch 2.x venv
    (scripts/install-deps.sh --torch2), in a process of its own, with the name lookup it makes
    of every client answered from a private /etc/hosts (start_libuv(); libuv-dns: from the
    machine's DNS, as it is).
The ranks are --procs processes of build/elastic/ddprun_store_clients (elastic/bench/
store_clients.cpp: C++ on one epoll each, so that the clients take little of the cores the server
shares with them), each bound to its own loopback source address (127.0.0.10+i), so that
ephemeral ports do not run out. Each rank does what init_process_group does with the store:
connect, VALIDATE and PING (the client's handshake), at most --window of a process's ranks at
once (a rank connects when an earlier one is validated: 4 x 512 leave half of the listen backlog,
somaxconn = 4096 here, free, so that no SYN is dropped; all 16,384 at once overflow it and the
time becomes TCP's retransmission timer's, 1, 3, 7, 15 s: 4 to 26 s for either server, a draw);
then, all ranks at once, the store-based
barrier of torch.distributed (ADD of the barrier key, ADD 0 to read it, SET of the last-worker
key by the rank that saw N, WAIT for it), with a SET of the rank's own address key before it and,
after it, a GET (WAIT, then GET) of its neighbour's, as gloo's key exchange does for one peer.
Prints, medians over --runs (the servers alternate):
  1. connect: from the moment the client processes, started and ready, are told to connect to
     every rank validated (its PING answered);
  2. barrier: from the moment every rank was told to go to every rank through it;
  3. the server's peak RSS (VmHWM) and its CPU time over 1 and 2, in microseconds a rank.
The server and the clients share this machine's cores: the figures are upper bounds. The
clients hold N descriptors among them and the server N: N must stay below `ulimit -Hn` per
process (20,000 on these machines).
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import ROOT, torch2_python


def proc_figures(pid):
    with open(f"/proc/{pid}/status") as f:
        rss = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return rss, cpu


def start_ddprun(ddprun, tmp):
    port_file = os.path.join(tmp, "port")
    worker = os.path.join(tmp, "worker.sh")
    with open(worker, "w") as f:
        f.write(f'#!/bin/sh\necho "$MASTER_PORT" > {port_file}.tmp && mv {port_file}.tmp {port_file}\n'
                'exec sleep 100000\n')
    os.chmod(worker, 0o755)
    proc = subprocess.Popen([ddprun, "--nproc_per_node=1", "--master_addr=127.0.0.1", worker],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not os.path.exists(port_file):
        if proc.poll() is not None or time.time() > deadline:
            sys.exit(f"store_scale: ddprun did not start its worker: {proc.stderr.read()}")
        time.sleep(0.02)
    return proc, proc.pid, int(open(port_file).read())


LIBUV_SERVER = r"""
import sys, torch.distributed as dist
store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, use_libuv=True)
print(store.port, flush=True)
sys.stdin.readline()
"""


def start_libuv(tmp, procs, lookups):
    """torch's server, in a process of its own. It looks up the name of every client it accepts
    (getnameinfo, in its one event loop): its peers are IPv4-mapped IPv6 addresses (it listens on
    ::), which /etc/hosts's 127.0.0.x lines do not name, so each accept waits for a DNS query,
    and the resolver's 5-s timeout whenever the DNS server drops one ("libuv-dns", the machine as
    it is). "libuv" answers the lookups from a private /etc/hosts (a mount namespace) that names
    every client's mapped address: the server's own cost, as with a local cache."""
    command = [torch2_python(), "-c", LIBUV_SERVER]
    if lookups == "hosts":
        hosts = os.path.join(tmp, "hosts")
        with open("/etc/hosts") as system, open(hosts, "w") as f:
            f.write(system.read())
            for i in [1] + [10 + i for i in range(procs)]:
                f.write(f"::ffff:127.0.0.{i} store-client-{i}\n")
        command = ["unshare", "-m", "sh", "-c", 'mount --bind "$0" /etc/hosts && exec "$@"', hosts] + command
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if not line:
        sys.exit("store_scale: torch's TCPStore server did not start")
    return proc, proc.pid, int(line)


def stop(server, proc):
    if server.startswith("libuv"):
        proc.stdin.close()
    else:
        proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def measure(server, ranks, procs, ddprun, clients_binary, window):
    with tempfile.TemporaryDirectory() as tmp:
        if server == "ddprun":
            proc, pid, port = start_ddprun(ddprun, tmp)
        else:
            # unshare and sh exec the server: proc.pid is its pid
            proc, pid, port = start_libuv(tmp, procs, "hosts" if server == "libuv" else "system")
        rss0, cpu0 = proc_figures(pid)
        per = [ranks // procs + (1 if i < ranks % procs else 0) for i in range(procs)]
        clients, first = [], 0
        for i, count in enumerate(per):
            clients.append(subprocess.Popen(
                [clients_binary, str(first), str(count), str(ranks), str(port), f"127.0.0.{10 + i}", str(window)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
            first += count

        def last_stamp(word):
            stamps = []
            for c in clients:
                line = c.stdout.readline().split()
                if not line or line[0] != word:
                    for d in clients:
                        d.kill()
                    stop(server, proc)
                    sys.exit(f"store_scale: a client of {server} at {ranks} ranks failed")
                stamps.append(float(line[1]))
            return max(stamps)

        for c in clients:
            if c.stdout.readline().strip() != "ready":
                sys.exit(f"store_scale: a client of {server} at {ranks} ranks did not start")
        start = time.monotonic()
        for c in clients:
            c.stdin.write("connect\n")
            c.stdin.flush()
        validated = last_stamp("validated")
        go = time.monotonic()
        for c in clients:
            c.stdin.write("go\n")
            c.stdin.flush()
        done = last_stamp("done")
        rss, cpu = proc_figures(pid)
        for c in clients:
            c.stdin.close()
            c.wait()
        stop(server, proc)
    return validated - start, done - go, rss, (cpu - cpu0) / ranks * 1e6


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ranks", default="1024,4096,16384")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--procs", type=int, default=4)
    p.add_argument("--ddprun", default=os.path.join(ROOT, "build", "launcher", "ddprun"))
    p.add_argument("--window", type=int, default=512,
                   help="connections a client process has not validated yet, at most (default 512)")
    p.add_argument("--clients", default=os.path.join(ROOT, "build", "elastic", "ddprun_store_clients"),
                   help="the simulated ranks' program (elastic/bench/store_clients.cpp)")
    p.add_argument("--servers", default="ddprun,libuv",
                   help="of ddprun, libuv (name lookups from a private /etc/hosts; needs root), libuv-dns (the machine's resolver)")
    a = p.parse_args()
    servers = a.servers.split(",")
    if not os.access(a.clients, os.X_OK):
        sys.exit(f"store_scale: no {a.clients}: build it (ninja -C build elastic/ddprun_store_clients)")
    if "libuv" in servers and os.geteuid() != 0:
        sys.exit("store_scale: --servers libuv needs root (a mount namespace for its /etc/hosts); use libuv-dns")
    print(f"{'ranks':>7} {'server':>9} {'connect s':>10} {'barrier s':>10} {'RSS MiB':>8} {'CPU us/rank':>12}")
    for n in [int(x) for x in a.ranks.split(",")]:
        results = {s: [] for s in servers}
        for _ in range(a.runs):
            for s in servers:
                results[s].append(measure(s, n, a.procs, a.ddprun, a.clients, a.window))
        for s in servers:
            cols = list(zip(*results[s]))
            med = [statistics.median(c) for c in cols]
            print(f"{n:>7} {s:>9} {med[0]:>10.3f} {med[1]:>10.3f} {med[2] / 1024:>8.1f} {med[3]:>12.1f}", flush=True)


if __name__ == "__main__":
    main()
