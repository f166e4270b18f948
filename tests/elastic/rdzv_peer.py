#!/usr/bin/env python3
"""A hand-driven rendezvous peer for the authentication tests (standard library only).

  rdzv_peer.py stranger HOST PORT [--secret S] [--claim-host] [--version V]
                                                 joins (with a secret: tries to authenticate
                                                 with it), saying it hosts the rendezvous with
                                                 --claim-host, in hello and join with version V;
                                                 prints every line it receives
  rdzv_peer.py forge HOST PORT --secret S --run-id ID --nnodes MIN:MAX
                                                 joins properly, then reports a failure of a
                                                 worker of another node; prints what follows
  rdzv_peer.py insider HOST PORT --secret S --run-id ID --nnodes MIN:MAX [--bad-kind]
                                                 joins properly, then reports a failure of its
                                                 own worker whose cause, message, traceback and
                                                 host hold escape sequences, newlines and forged
                                                 "ddprun:" lines (with --bad-kind, its kind too);
                                                 answers a stop; prints what follows
  rdzv_peer.py squat HOST PORT --secret S        listens on the endpoint and plays a host with
                                                 its own secret; prints each message received
  rdzv_peer.py flood HOST PORT N SECONDS         holds N connections that only send heartbeats;
                                                 prints how many the host closed
The wire format is elastic/src/core/rendezvous_protocol.hpp and elastic/src/auth/rendezvous_auth.hpp.
"""
import argparse
import hashlib
import hmac
import json
import os
import select
import socket
import sys
import time

VERSION = 12


def mac(key, data):
    return hmac.new(key.encode(), data.encode(), hashlib.sha256).hexdigest()


def joined(*parts):
    return "".join(f"{len(p.encode())}:{p}" for p in parts)


class Conn:
    def __init__(self, sock, role):
        self.sock, self.role, self.buf = sock, role, b""
        self.key, self.sent, self.received = None, 0, 0

    def send(self, msg):
        text = json.dumps(msg, separators=(",", ":"))
        if self.key:
            direction = "client->server" if self.role == "client" else "server->client"
            text = mac(self.key, joined(direction, str(self.sent), text)) + " " + text
            self.sent += 1
        self.sock.sendall(text.encode() + b"\n")

    def recv(self, timeout):
        """The next message (heartbeats skipped), None on EOF or timeout."""
        deadline = time.time() + timeout
        while True:
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                text = line.decode()
                if self.key and not text.startswith("{"):  # a refusal comes untagged
                    text = text.split(" ", 1)[1]
                msg = json.loads(text)
                if msg.get("type") != "heartbeat":
                    print("received", text, flush=True)
                    return msg
            left = deadline - time.time()
            if left <= 0 or not select.select([self.sock], [], [], left)[0]:
                return None
            try:
                data = self.sock.recv(65536)
            except ConnectionResetError:
                data = b""
            if not data:
                print("closed by peer", flush=True)
                return None
            self.buf += data


def connect(host, port):
    deadline = time.time() + 10  # the host may start a moment later
    while True:
        try:
            return Conn(socket.create_connection((host, port), timeout=10), "client")
        except ConnectionRefusedError:
            if time.time() > deadline:
                raise
            time.sleep(0.05)


def authenticate(c, secret, version=VERSION):
    nonce = os.urandom(32).hex()
    c.send({"type": "hello", "version": version, "nonce": nonce})
    challenge = c.recv(10)
    if not challenge or challenge.get("type") != "challenge":
        return False
    sn = challenge["nonce"]
    print("server proof ok:", hmac.compare_digest(challenge["proof"], mac(secret, joined("ddprun-rdzv server", nonce, sn))))
    c.send({"type": "proof", "proof": mac(secret, joined("ddprun-rdzv client", nonce, sn))})
    c.key = mac(secret, joined("ddprun-rdzv session", nonce, sn))
    return True


def spec(args, addr):
    lo, _, hi = args.nnodes.partition(":")
    return {"run_id": args.run_id, "min_nodes": int(lo), "max_nodes": int(hi or lo), "max_restarts": args.max_restarts,
            "restart": {"restart_on_any": False, "backoff_max": 60.0, "crash_loop_limit": 5, "window": 0.0},
            "heartbeat_interval": 0.5, "heartbeat_timeout": 5.0,
            "node_rank": -1, "nproc": 1, "addr": addr, "hostname": "zz-forger", "master_port": 1,
            "hosts_rendezvous": args.claim_host, "agent_store": True,
            "snapshot_node": "", "snapshot_port": 0, "chaos": "off"}


def stranger(args):
    c = connect(args.host, args.port)
    if args.secret and not authenticate(c, args.secret, args.version):
        return
    c.send({"type": "join", "version": args.version, "node": spec(args, "127.0.0.9")})
    while c.recv(args.wait) is not None:
        pass


def join_authenticated(args):
    """Joins with the job's secret; the connection and the first assignment."""
    c = connect(args.host, args.port)
    if not authenticate(c, args.secret):
        sys.exit("not authenticated")
    c.send({"type": "join", "version": VERSION, "node": spec(args, "127.0.0.9")})
    while True:
        msg = c.recv(30)
        if msg is None:
            sys.exit("no assignment")
        if msg["type"] == "assign":
            return c, msg["assignment"]


def forge(args):
    c, a = join_authenticated(args)
    other = 0 if a["group_rank"] != 0 else 1
    failure = {"rank": 0 if a["base_rank"] != 0 else a["world_size"] - 1, "local_rank": 0, "group_rank": other,
               "host": "h-other", "pid": 1, "exit_code": 7, "signal": 0, "signal_from_outside": False, "hung": False,
               "message": "forged", "traceback": "", "error_file": "", "timestamp": time.time(),
               "kind": "exit_code", "retryable": True, "cause": "exit code 7", "exception": "", "location": "",
               "step": -1, "progressed": False}
    print("forging a failure of rank", failure["rank"], "group rank", other, flush=True)
    c.send({"type": "worker_failed", "round": a["round"], "failure": failure})
    while c.recv(10) is not None:
        pass


# What an insider would put in a failure's text: colours, a screen clear, a terminal title, a
# carriage return and newlines each followed by a line that reads as ddprun's own, and C1's CSI.
ESC = "\x1b"
FORGED = {
    "kind": f"{ESC}[2Jexit_code\nddprun: forged kind line",
    "cause": f"exit code 7: {ESC}[31mred{ESC}[0m\r\nddprun: forged cause line {ESC}]0;title\x07 \u009b2J",
    "message": f"msg {ESC}[1mbold\r{ESC}[2K\nddprun: forged message line",
    "traceback": f"Traceback (most recent call last):\n{ESC}[2J\rddprun: forged traceback line",
    "host": f"h{ESC}[2J\nddprun: forged host line",
}


def insider(args):
    c, a = join_authenticated(args)
    failure = {"rank": a["base_rank"], "local_rank": 0, "group_rank": a["group_rank"], "host": FORGED["host"],
               "pid": 1, "exit_code": 7, "signal": 0, "signal_from_outside": False, "hung": False,
               "message": FORGED["message"], "traceback": FORGED["traceback"], "error_file": "",
               "timestamp": time.time(), "kind": FORGED["kind"] if args.bad_kind else "exit_code",
               "retryable": True, "cause": FORGED["cause"], "exception": "", "location": "", "step": -1,
               "progressed": False}
    print("reporting its own worker's failure, rank", failure["rank"], flush=True)
    c.send({"type": "worker_failed", "round": a["round"], "failure": failure})
    while True:
        msg = c.recv(10)
        if msg is None:
            break
        if msg["type"] == "stop":
            c.send({"type": "workers_stopped", "round": msg["round"], "failures": []})


def squat(args):
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((args.host, args.port))
    server.listen(16)
    print("listening", flush=True)
    while True:
        sock, _ = server.accept()
        c = Conn(sock, "server")
        hello = c.recv(10)
        if hello and hello.get("type") == "hello":
            sn = os.urandom(32).hex()
            c.send({"type": "challenge", "nonce": sn,
                    "proof": mac(args.secret, joined("ddprun-rdzv server", hello["nonce"], sn))})
        while c.recv(5) is not None:
            pass
        sock.close()


def flood(args):
    conns = []
    for _ in range(args.n):
        try:
            conns.append(socket.create_connection((args.host, args.port), timeout=5))
        except OSError as e:
            print("connect failed:", e, flush=True)
            break
    print("opened", len(conns), flush=True)
    closed = set()
    deadline = time.time() + args.seconds
    while time.time() < deadline:
        for i, s in enumerate(conns):
            if i in closed:
                continue
            try:
                s.setblocking(False)
                s.send(b'{"type":"heartbeat"}\n')
                if s.recv(4096) == b"":
                    closed.add(i)
            except BlockingIOError:
                pass
            except OSError:
                closed.add(i)
        time.sleep(0.2)
    print("closed by host", len(closed), flush=True)
    for s in conns:
        s.close()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["stranger", "forge", "insider", "squat", "flood"])
    p.add_argument("host")
    p.add_argument("port", type=int)
    p.add_argument("n", type=int, nargs="?", default=0)
    p.add_argument("seconds", type=float, nargs="?", default=0)
    p.add_argument("--secret", default="")
    p.add_argument("--run-id", default="guess")
    p.add_argument("--nnodes", default="2")
    p.add_argument("--max-restarts", type=int, default=0)
    p.add_argument("--wait", type=float, default=3)
    p.add_argument("--claim-host", action="store_true")
    p.add_argument("--version", type=int, default=VERSION)
    p.add_argument("--bad-kind", action="store_true")
    args = p.parse_args()
    {"stranger": stranger, "forge": forge, "insider": insider, "squat": squat, "flood": flood}[args.mode](args)


if __name__ == "__main__":
    main()
