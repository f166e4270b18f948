#!/usr/bin/python3
"""How PyTorch's libuv TCPStore server takes simultaneous connections (issue 44): the probe behind
docs/performance.md's remark on its steps of 5 s.

  $TORCH2_PYTHON scripts/bench/store_libuv_accept.py [N ...]   (default: 40 60 100 256)

For each N: a `torch.distributed.TCPStore(is_master=True, use_libuv=True)` in this process, N
non-blocking client sockets connected at once, each sending what torch's client sends first
(VALIDATE, then PING with its own nonce) and waiting for the PING's answer. Prints how many were
answered in each second after the connects, and every 2 s the listener's accept queue (ss's
Recv-Q: connections the kernel completed and the server has not accepted yet). Run with the
torch 2.x venv's Python (scripts/torch2-env.sh).
"""
import collections
import selectors
import socket
import struct
import subprocess
import sys
import time
from datetime import timedelta

import torch.distributed as dist

VALIDATE, PING, MAGIC = 0, 13, 0x3C85F7CE


def accept_queue(port):
    lines = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True).stdout.split()
    return lines[1] if len(lines) > 1 else "?"


def probe(n):
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, use_libuv=True, wait_for_workers=False,
                           timeout=timedelta(seconds=120))
    port = server.port
    sel = selectors.DefaultSelector()
    start = time.monotonic()
    answered = {}
    for i in range(n):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        sel.register(s, selectors.EVENT_WRITE, i)
    queue = []
    sampled = -10.0
    while len(answered) < n and time.monotonic() - start < 110:
        now = time.monotonic() - start
        if now - sampled >= 2:
            sampled = now
            queue.append("%.0f s: %s" % (now, accept_queue(port)))
        for key, events in sel.select(timeout=0.5):
            s, i = key.fileobj, key.data
            if events & selectors.EVENT_WRITE:
                s.send(bytes([VALIDATE]) + struct.pack("=I", MAGIC) + bytes([PING]) + struct.pack("=I", i))
                sel.modify(s, selectors.EVENT_READ, i)
            elif s.recv(4):
                answered[i] = time.monotonic() - start
                sel.unregister(s)
                s.close()
    by_second = sorted(collections.Counter(int(t) for t in answered.values()).items())
    print(f"{n} connections: {len(answered)} answered; by second after the connects: {by_second}")
    print(f"  accept queue (ss Recv-Q) every 2 s: {', '.join(queue)}")


for n in [int(a) for a in sys.argv[1:]] or [40, 60, 100, 256]:
    probe(n)
