#!/usr/bin/python3
"""The workers' store at scale: ddprun's agent store against PyTorch 2.x's libuv TCPStore server.

  scripts/bench/store_scale.py [--ranks 1024,4096,16384] [--runs 3] [--procs 8] [--ddprun PATH]

N simulated ranks speak c10d's TCPStore wire protocol (version 2, as torch 2.x's client does;
elastic/src/store/agent_store.hpp has the encoding) to one server:
  - ddprun: a real `ddprun --nproc_per_node=1` whose one worker writes its MASTER_PORT and
    sleeps: the agent store (the default) serves MASTER_PORT on ddprun's own thread;
  - libuv: `torch.distributed.TCPStore(is_master=True, use_libuv=True)` of the torch 2.x venv
    (scripts/install-deps.sh --torch2), in a process of its own, with the name lookup it makes
    of every client answered from a private /etc/hosts (start_libuv(); libuv-dns: from the
    machine's DNS, as it is).
The ranks are --procs client processes (selectors, non-blocking sockets), each bound to its own
loopback source address (127.0.0.10+i), so that ephemeral ports do not run out. Each rank does
what init_process_group does with the store: connect, VALIDATE and PING (the client's
handshake); then, all ranks at once, the store-based barrier of torch.distributed (ADD of the
barrier key, ADD 0 to read it, SET of the last-worker key by the rank that saw N, WAIT for it),
with a SET of the rank's own address key before it and, after it, a GET (WAIT, then GET) of its
neighbour's, as gloo's key exchange does for one peer. Prints, medians over --runs (the two
servers alternate):
  1. connect: from the first connect to every rank validated (its PING answered);
  2. barrier: from the moment every rank was told to go to every rank through it;
  3. the server's peak RSS (VmHWM) and its CPU time over 1 and 2, in microseconds a rank.
The server and the clients share this machine's cores: the figures are upper bounds. The
clients hold N descriptors among them and the server N: N must stay below `ulimit -Hn` per
process (20,000 on these machines).
"""
import argparse
import os
import selectors
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time

from benchlib import ROOT, torch2_python

VALIDATE, SET, GET, ADD, WAIT, PING = 0, 1, 3, 4, 6, 13
MAGIC = 0x3C85F7CE
HOST = "127.0.0.1"


def key(k):
    b = k.encode()
    return struct.pack("=Q", len(b)) + b


def msg_set(k, v):
    return bytes([SET]) + key(k) + key(v)


def msg_add(k, n):
    return bytes([ADD]) + key(k) + struct.pack("=q", n)


def msg_wait(k):
    return bytes([WAIT]) + struct.pack("=Q", 1) + key(k)


def msg_get(k):
    return bytes([GET]) + key(k)


class Rank:
    """One simulated rank: a socket, what it still expects, what it does next."""

    def __init__(self, rank, sock):
        self.rank = rank
        self.sock = sock
        self.inbox = b""
        self.outbox = b""
        self.step = "connect"


def client(args):
    """A client process: ranks [first, first+count) from source address `source`. Talks to its
    driver on stdin/stdout: 'validated T' when its ranks are through the handshake, then waits for
    'go', then 'done T'."""
    first, count, world, port, source = args
    barrier = "store_based_barrier_key:1"
    last = barrier + ":last_worker"
    sel = selectors.DefaultSelector()
    ranks = []
    for r in range(first, first + count):
        s = socket.socket()
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.bind((source, 0))
        s.setblocking(False)
        ranks.append(Rank(r, s))
    pending = len(ranks)

    def send(rk, data):
        rk.outbox += data
        try:
            n = rk.sock.send(rk.outbox)
            rk.outbox = rk.outbox[n:]
        except BlockingIOError:
            pass
        sel.modify(rk.sock, selectors.EVENT_READ | (selectors.EVENT_WRITE if rk.outbox else 0), rk)

    def take(rk, n):
        if len(rk.inbox) < n:
            return None
        head, rk.inbox = rk.inbox[:n], rk.inbox[n:]
        return head

    def advance(rk):
        """Consumes replies; returns True when the rank finished its current phase."""
        nonlocal pending
        while True:
            if rk.step == "ping":
                b = take(rk, 4)
                if b is None:
                    return
                assert struct.unpack("=I", b)[0] == rk.rank, "PING answered another nonce"
                rk.step = "validated"
                pending -= 1
            elif rk.step == "add1":
                b = take(rk, 8)
                if b is None:
                    return
                rk.step = "add0"
                send(rk, msg_add(barrier, 0))
            elif rk.step == "add0":
                b = take(rk, 8)
                if b is None:
                    return
                if struct.unpack("=q", b)[0] == world:
                    send(rk, msg_set(last, "1"))
                rk.step = "wait"
                send(rk, msg_wait(last))
            elif rk.step == "wait":
                b = take(rk, 1)
                if b is None:
                    return
                peer = f"rank_{(rk.rank + 1) % world}"
                rk.step = "get_wait"
                send(rk, msg_wait(peer) + msg_get(peer))
            elif rk.step == "get_wait":
                if take(rk, 1) is None:
                    return
                rk.step = "get"
            elif rk.step == "get":
                if len(rk.inbox) < 8:
                    return
                (n,) = struct.unpack("=Q", rk.inbox[:8])
                if take(rk, 8 + n) is None:
                    return
                rk.step = "done"
                pending -= 1
            else:
                return

    def run_until_done():
        while pending > 0:
            for k, events in sel.select(timeout=60):
                rk = k.data
                if events & selectors.EVENT_WRITE:
                    if rk.step == "connect":
                        err = rk.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                        if err:
                            sys.exit(f"store_scale client: connect: {os.strerror(err)}")
                        rk.step = "ping"
                        send(rk, bytes([VALIDATE]) + struct.pack("=I", MAGIC) +
                             bytes([PING]) + struct.pack("=I", rk.rank))
                        continue
                    send(rk, b"")
                if events & selectors.EVENT_READ:
                    data = rk.sock.recv(65536)
                    if not data:
                        sys.exit(f"store_scale client: rank {rk.rank}: the server closed the connection")
                    rk.inbox += data
                    advance(rk)

    for rk in ranks:
        rk.sock.connect_ex((HOST, port))
        sel.register(rk.sock, selectors.EVENT_WRITE, rk)
    run_until_done()
    print(f"validated {time.monotonic()}", flush=True)
    if sys.stdin.readline().strip() != "go":
        sys.exit("store_scale client: no go")
    pending = len(ranks)
    for rk in ranks:
        rk.step = "add1"
        send(rk, msg_set(f"rank_{rk.rank}", f"127.0.0.1:{10000 + rk.rank % 50000}") + msg_add(barrier, 1))
    run_until_done()
    print(f"done {time.monotonic()}", flush=True)
    sys.stdin.readline()  # hold the connections until the driver has read the server's figures


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


def measure(server, ranks, procs, ddprun):
    with tempfile.TemporaryDirectory() as tmp:
        if server == "ddprun":
            proc, pid, port = start_ddprun(ddprun, tmp)
        else:
            # unshare and sh exec the server: proc.pid is its pid
            proc, pid, port = start_libuv(tmp, procs, "hosts" if server == "libuv" else "system")
        rss0, cpu0 = proc_figures(pid)
        per = [ranks // procs + (1 if i < ranks % procs else 0) for i in range(procs)]
        clients, first = [], 0
        start = time.monotonic()
        for i, count in enumerate(per):
            args = repr((first, count, ranks, port, f"127.0.0.{10 + i}"))
            clients.append(subprocess.Popen(
                [sys.executable, __file__, "--client", args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                text=True))
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
    if len(sys.argv) == 3 and sys.argv[1] == "--client":
        import ast
        client(ast.literal_eval(sys.argv[2]))
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ranks", default="1024,4096,16384")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--procs", type=int, default=8)
    p.add_argument("--ddprun", default=os.path.join(ROOT, "build", "launcher", "ddprun"))
    p.add_argument("--servers", default="ddprun,libuv",
                   help="of ddprun, libuv (name lookups from a private /etc/hosts; needs root), libuv-dns (the machine's resolver)")
    a = p.parse_args()
    servers = a.servers.split(",")
    if "libuv" in servers and os.geteuid() != 0:
        sys.exit("store_scale: --servers libuv needs root (a mount namespace for its /etc/hosts); use libuv-dns")
    print(f"{'ranks':>7} {'server':>9} {'connect s':>10} {'barrier s':>10} {'RSS MiB':>8} {'CPU us/rank':>12}")
    for n in [int(x) for x in a.ranks.split(",")]:
        results = {s: [] for s in servers}
        for _ in range(a.runs):
            for s in servers:
                results[s].append(measure(s, n, a.procs, a.ddprun))
        for s in servers:
            cols = list(zip(*results[s]))
            med = [statistics.median(c) for c in cols]
            print(f"{n:>7} {s:>9} {med[0]:>10.3f} {med[1]:>10.3f} {med[2] / 1024:>8.1f} {med[3]:>12.1f}", flush=True)


if __name__ == "__main__":
    main()
