"""The worker of store_churn_test.sh: thousands of simulated ranks churning on ddprun's agent store
(MASTER_ADDR:MASTER_PORT), speaking TCPStore's protocol (version 2) as torch 2.x's client does.

Attempt 0, twice over: every rank connects (VALIDATE, PING), SETs its key, ADDs itself to a
barrier and WAITs for its last key; then half of them die mid-barrier (a reset, no goodbye), a
quarter reconnect as torch's client does when its connection breaks (a new connection, the
handshake, the barrier's ADD 0 and the WAIT again), and one SETs the last key: every rank still
waiting must be answered. All close; ddprun's descriptors must come back to what they were (no
connection, no waiter kept). It leaves a key behind and exits 1: ddprun restarts the job.
Attempt 1: the restarted round's store must be empty; a client that reads its replies late gets
them all while another is served. Prints one `ok:` line per check; exits 0
when all hold. Usage: store_churn_worker.py RANKS"""
import os
import resource
import socket
import struct
import sys
import time

VALIDATE, SET, GET, ADD, CHECK, WAIT, GETNUMKEYS, PING = 0, 1, 3, 4, 5, 6, 7, 13
MAGIC = 0x3C85F7CE
ADDR = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
DDPRUN = os.getppid()


def key(k):
    b = k.encode()
    return struct.pack("=Q", len(b)) + b


def recv_exactly(s, n):
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the store closed the connection")
        data += chunk
    return data


def connect(nonce):
    s = socket.create_connection(ADDR, timeout=60)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as torch's client: no Nagle wait
    s.sendall(bytes([VALIDATE]) + struct.pack("=I", MAGIC) + bytes([PING]) + struct.pack("=I", nonce))
    assert struct.unpack("=I", recv_exactly(s, 4))[0] == nonce, "PING answered another nonce"
    return s


def add(s, k, n):
    s.sendall(bytes([ADD]) + key(k) + struct.pack("=q", n))
    return struct.unpack("=q", recv_exactly(s, 8))[0]


def descriptors():
    return len(os.listdir(f"/proc/{DDPRUN}/fd"))


def wait_for(condition, what, limit=60):
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            sys.exit(f"FAIL: {what} after {limit} s")
        time.sleep(0.05)


START = time.monotonic()


def churn(ranks, cycle, baseline):
    barrier, last = f"barrier:{cycle}", f"barrier:{cycle}:last"
    socks = {r: connect(r) for r in range(ranks)}
    for r, s in socks.items():
        s.sendall(bytes([SET]) + key(f"rank_{cycle}_{r}") + key("x" * 32))
        add(s, barrier, 1)
        s.sendall(bytes([WAIT]) + struct.pack("=Q", 1) + key(last))  # answered once `last` is set
    print(f"ok: {time.monotonic() - START:.1f} s: cycle {cycle}: {ranks} ranks connected, in the barrier and waiting "
          f"(ddprun holds {descriptors() - baseline} more descriptors)", flush=True)
    died = [r for r in socks if r % 2 == 0]
    for r in died:  # die mid-barrier: a reset, as a killed process's connection ends
        socks[r].setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        socks.pop(r).close()
    for r in [r for r in socks if r % 4 == 1]:  # reconnect, as torch's client retries
        socks[r].close()
        socks[r] = connect(10_000_000 + r)
        assert add(socks[r], barrier, 0) == ranks, "the barrier's count changed"
        socks[r].sendall(bytes([WAIT]) + struct.pack("=Q", 1) + key(last))
    setter = connect(20_000_000)
    setter.sendall(bytes([SET]) + key(last) + key("1"))
    assert add(setter, barrier, 0) == ranks
    for r, s in socks.items():
        assert recv_exactly(s, 1) == b"\0", f"rank {r}: the WAIT was answered with something else"
        # Nothing more on the connection (a waiter kept for a dead connection whose descriptor
        # this one reuses would have answered twice): a PING's answer comes next, and only it.
        s.sendall(bytes([PING]) + struct.pack("=I", 30_000_000 + r))
        assert struct.unpack("=I", recv_exactly(s, 4))[0] == 30_000_000 + r, f"rank {r}: more than the WAIT's answer"
    print(f"ok: {time.monotonic() - START:.1f} s: cycle {cycle}: {len(died)} ranks died mid-barrier, {ranks // 4} reconnected; the "
          f"{len(socks)} still waiting were all answered", flush=True)
    for s in list(socks.values()) + [setter]:
        s.close()
    # A few descriptors of ddprun's own may come and go meanwhile (its event log, /proc reads).
    wait_for(lambda: descriptors() <= baseline + 4, f"ddprun still holds {descriptors() - baseline} more "
             f"descriptors than before cycle {cycle}")
    print(f"ok: {time.monotonic() - START:.1f} s: cycle {cycle}: every connection closed, ddprun's descriptors back to "
          f"{descriptors()} (before: {baseline})", flush=True)


def main():
    ranks = int(sys.argv[1])
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if os.environ["TORCHELASTIC_RESTART_COUNT"] == "0":
        baseline = descriptors()
        for cycle in (1, 2):
            churn(ranks, cycle, baseline)
        s = connect(1)
        s.sendall(bytes([SET]) + key("leftover") + key("1"))
        s.sendall(bytes([GETNUMKEYS]))
        print(f"ok: the round's store holds {struct.unpack('=q', recv_exactly(s, 8))[0]} keys at its end", flush=True)
        sys.exit(1)
    s = connect(1)
    s.sendall(bytes([GETNUMKEYS]))
    keys = struct.unpack("=q", recv_exactly(s, 8))[0]
    s.sendall(bytes([CHECK]) + struct.pack("=Q", 1) + key("leftover"))
    leftover = recv_exactly(s, 1)
    if keys != 0 or leftover != b"\1":
        found = "found" if leftover == b"\0" else "not found"
        sys.exit(f"FAIL: the restarted round's store holds {keys} keys (the last round's key: {found})")
    print("ok: the restarted round's store is empty", flush=True)
    slow_reader()


def slow_reader():
    """A client that asks for 64 MiB of replies at once and reads none yet: the server's writes to
    it wait for room (and its further queries for the replies to go out) while another client is
    served; then every reply arrives, whole and in order."""
    value = bytes(range(256)) * 4096  # 1 MiB
    s = connect(2)
    s.sendall(bytes([SET]) + key("big") + struct.pack("=Q", len(value)) + value)
    s.sendall(b"".join(bytes([GET]) + key("big") for _ in range(64)))
    other = connect(3)  # answered while 64 MiB wait for the slow reader
    other.sendall(bytes([PING]) + struct.pack("=I", 5))
    assert struct.unpack("=I", recv_exactly(other, 4))[0] == 5, "another client was answered wrong"
    for i in range(64):
        assert struct.unpack("=Q", recv_exactly(s, 8))[0] == len(value), f"reply {i}: a wrong length"
        assert recv_exactly(s, len(value)) == value, f"reply {i}: other bytes than the value"
    s.sendall(bytes([PING]) + struct.pack("=I", 4))
    assert struct.unpack("=I", recv_exactly(s, 4))[0] == 4, "more than 64 replies"
    print("ok: a client that read 64 MiB of replies late got them all, in order; another was served meanwhile",
          flush=True)


if __name__ == "__main__":
    main()
