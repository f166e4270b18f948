#!/usr/bin/env python3
"""Holds the packets of one netfilter queue and lets each go after a delay: the delay, jitter and
reordering of tests/elastic/netfault.sh on kernels without tc netem (sch_netem). Standard library
only: it speaks nfnetlink_queue itself (linux/netfilter/nfnetlink_queue.h), copying no payload,
only each packet's id, and gives the verdicts in the order the packets' times come, not the order
they arrived, so that jitter reorders packets as netem's does.

usage: nf_delay.py QUEUE READY_FILE DELAY_MS [JITTER_MS [NOW_PCT]]
  Each packet waits DELAY_MS, plus or minus up to JITTER_MS (uniform), except NOW_PCT % of them,
  which go at once (and overtake the others: netem's "reorder"). READY_FILE is written once the
  queue is bound; the iptables rule that sends packets to QUEUE comes after (with --queue-bypass,
  so that without this process packets pass). On SIGTERM every held packet is let go at once.
Run it in the network namespace whose packets it holds: a queue belongs to one.
"""

import heapq
import os
import random
import select
import signal
import socket
import struct
import sys
import time

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET, NFQNL_MSG_VERDICT, NFQNL_MSG_CONFIG = 0, 1, 2
NFQA_PACKET_HDR, NFQA_VERDICT_HDR = 1, 2
NFQA_CFG_CMD, NFQA_CFG_PARAMS, NFQA_CFG_QUEUE_MAXLEN = 1, 2, 3
NFQNL_CFG_CMD_BIND = 1
NFQNL_COPY_META = 1
NLM_F_REQUEST, NLM_F_ACK = 1, 4
NLMSG_ERROR = 2
NF_ACCEPT = 1


def attribute(kind, payload):
    length = 4 + len(payload)
    return struct.pack("=HH", length, kind) + payload + b"\0" * (-length % 4)


def message(kind, queue, attributes, flags=NLM_F_REQUEST, seq=0):
    # nfgenmsg: family, version (NFNETLINK_V0), the queue number (big-endian)
    body = struct.pack("=BB", socket.AF_UNSPEC, 0) + struct.pack(">H", queue) + b"".join(attributes)
    return struct.pack("=IHHII", 16 + len(body), (NFNL_SUBSYS_QUEUE << 8) | kind, flags, seq, 0) + body


def messages(data):
    """(type, payload after the nfgenmsg or the error code) of each netlink message in `data`."""
    offset = 0
    while offset + 16 <= len(data):
        length, kind, _, _, _ = struct.unpack_from("=IHHII", data, offset)
        if length < 16:
            break
        yield kind, data[offset + 16:offset + length]
        offset += (length + 3) & ~3


def packet_id(payload):
    """The id in a NFQNL_MSG_PACKET's NFQA_PACKET_HDR, after its 4-byte nfgenmsg."""
    offset = 4
    while offset + 4 <= len(payload):
        length, kind = struct.unpack_from("=HH", payload, offset)
        if length < 4:
            break
        if kind & 0x7FFF == NFQA_PACKET_HDR:
            return struct.unpack_from(">I", payload, offset + 4)[0]
        offset += (length + 3) & ~3
    return None


def configure(sock, queue, attributes, seq):
    """A config request, acknowledged: raises OSError with the kernel's answer on a refusal."""
    sock.send(message(NFQNL_MSG_CONFIG, queue, attributes, NLM_F_REQUEST | NLM_F_ACK, seq))
    while True:
        for kind, payload in messages(sock.recv(65536)):
            if kind == NLMSG_ERROR:
                error = -struct.unpack_from("=i", payload)[0]
                if error:
                    raise OSError(error, "nfnetlink_queue config: " + os.strerror(error))
                return


def main(argv):
    if len(argv) < 3:
        raise SystemExit(__doc__.split("\n\n")[1])
    queue, ready, delay = int(argv[0]), argv[1], float(argv[2]) / 1000
    jitter = float(argv[3]) / 1000 if len(argv) > 3 else 0.0
    now_pct = float(argv[4]) if len(argv) > 4 else 0.0

    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    sock.bind((0, 0))
    configure(sock, queue, [attribute(NFQA_CFG_CMD, struct.pack(">BBH", NFQNL_CFG_CMD_BIND, 0, socket.AF_INET))], 1)
    configure(sock, queue, [attribute(NFQA_CFG_PARAMS, struct.pack(">IB", 0, NFQNL_COPY_META)),
                            attribute(NFQA_CFG_QUEUE_MAXLEN, struct.pack(">I", 65536))], 2)

    stop_r, stop_w = os.pipe()
    signal.signal(signal.SIGTERM, lambda *_: os.write(stop_w, b"x"))
    with open(ready, "w") as f:
        f.write("%d\n" % os.getpid())

    held, order, stopping = [], 0, False  # held: a heap of (when, arrival order, packet id)

    def verdict(pid):
        sock.send(message(NFQNL_MSG_VERDICT, queue, [attribute(NFQA_VERDICT_HDR, struct.pack(">II", NF_ACCEPT, pid))]))

    while not (stopping and not held):
        now = time.monotonic()
        while held and (stopping or held[0][0] <= now):
            verdict(heapq.heappop(held)[2])
        if stopping:
            continue
        timeout = max(0.0, held[0][0] - now) if held else None
        readable, _, _ = select.select([sock, stop_r], [], [], timeout)
        if stop_r in readable:
            stopping = True
        if sock in readable:
            try:
                data = sock.recv(65536)
            except OSError:  # ENOBUFS: the kernel dropped messages; the packets are its to drop
                continue
            arrived = time.monotonic()
            for kind, payload in messages(data):
                pid = packet_id(payload) if kind == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET else None
                if pid is None:
                    continue
                wait = 0.0 if random.uniform(0, 100) < now_pct else max(0.0, delay + random.uniform(-jitter, jitter))
                order += 1
                heapq.heappush(held, (arrived + wait, order, pid))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
