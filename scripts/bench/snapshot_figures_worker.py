"""One rank of snapshot_figures.py (run under ddprun; every time is time.monotonic(), one clock
for every namespace of the machine). Three modes:

  save D MIB ROUNDS DISK   (torch) a training loop that saves a state of MIB MiB (4 float32
      tensors) with torch.save to a temporary name and os.replace, in turn into
      DDPRUN_SNAPSHOT_DIR, into the disk folder DISK, and into DISK with an fsync of the file
      before the rename (and of the folder after it); appends one JSON line a save to D/saves:
      where, the save's wall time (the training loop's stall), the step before and the step after.
  repl D MIB COUNT         (standard library) rank 0 writes MIB MiB to ckpt.tmp in its
      DDPRUN_SNAPSHOT_DIR and renames it ckpt.pt each time the driver makes D/go.K, stamping
      D/commit.K (the rename done) and the write's start; every other rank polls its own folder
      every 2 ms for a new ckpt.pt of that size (a copy is renamed into place when whole) and
      stamps D/arrive.K.RANK. Each rank first writes D/node.RANK: its pid and folder. Exits when
      D/stop exists.
  restore D MIB WHERE      (torch, gloo) a DDP job that resumes: the state (MIB MiB and a step) is
      loaded from ckpt.pt in DDPRUN_SNAPSHOT_DIR (WHERE = snapshots) or in D/disk (WHERE = disk)
      when there, else rank 0 makes and saves it; then DDP steps until D/stop exists. After its
      first step each rank writes D/first.PID: its start, the load's end, the step's end, the
      step it loaded (null: none), its rank and its folder.
  recv ADDR PORT OUT D HMAC / send ADDR PORT SRC D HMAC   (standard library, no launcher) the raw
      TCP baseline of a copy: recv listens, writes what comes to the file OUT and stamps D/recv
      (closed); send connects and sends the file SRC (sendfile), stamping D/send (its start). HMAC =
      1: both ends tag each 1 MiB chunk with HMAC-SHA256 (Python's hmac: OpenSSL), as ddprun's
      links do, the sender a tag line before each chunk, the receiver checking it.
"""
import json
import os
import sys
import time


def stamp(path, value):
    with open(path + ".tmp", "w") as f:
        json.dump(value, f)
    os.replace(path + ".tmp", path)  # whole when seen


def save_mode(d, mib, rounds, disk):
    import torch
    torch.set_num_threads(1)
    state = {f"t{i}": torch.randn(mib * 2**20 // 16) for i in range(4)}  # 4 x MIB/4 MiB of float32
    a = torch.randn(256, 256)

    def step():
        t = time.monotonic()
        for _ in range(20):
            a.matmul(a)
        return time.monotonic() - t

    targets = [("snapshots", os.environ["DDPRUN_SNAPSHOT_DIR"], False), ("disk", disk, False),
               ("disk+fsync", disk, True)]
    for r in range(rounds):
        for where, folder, sync in targets[r % 3:] + targets[:r % 3]:  # each first in turn
            before = [step() for _ in range(3)]
            final, tmp = os.path.join(folder, "state.pt"), os.path.join(folder, "state.pt.tmp")
            t = time.monotonic()
            with open(tmp, "wb") as f:
                torch.save(state, f)
                if sync:
                    f.flush()
                    os.fsync(f.fileno())
            os.replace(tmp, final)
            if sync:
                fd = os.open(folder, os.O_RDONLY)
                os.fsync(fd)
                os.close(fd)
            stall = time.monotonic() - t
            after = step()
            with open(os.path.join(d, "saves"), "a") as f:
                f.write(json.dumps({"where": where, "round": r, "stall": stall, "step_before": min(before),
                                    "step_after": after}) + "\n")
    for folder in {folder for _, folder, _ in targets}:
        os.unlink(os.path.join(folder, "state.pt"))


def repl_mode(d, mib, count):
    rank = int(os.environ["RANK"])
    folder = os.environ["DDPRUN_SNAPSHOT_DIR"]
    stamp(os.path.join(d, f"node.{rank}"), {"pid": os.getpid(), "dir": folder})
    size = mib * 2**20
    final, tmp = os.path.join(folder, "ckpt.pt"), os.path.join(folder, "ckpt.tmp")
    block = os.urandom(64 * 2**20) if rank == 0 else b""
    seen = None
    k = 1
    while k <= count and not os.path.exists(os.path.join(d, "stop")):
        if rank == 0:
            if not os.path.exists(os.path.join(d, f"go.{k}")):
                time.sleep(0.005)
                continue
            start = time.monotonic()
            with open(tmp, "wb") as f:
                for done in range(0, size, len(block)):
                    f.write(block[:min(len(block), size - done)])
            os.replace(tmp, final)
            stamp(os.path.join(d, f"commit.{k}"), {"start": start, "t": time.monotonic()})
            k += 1
            continue
        try:
            st = os.stat(final)
            new = st.st_ino != seen and st.st_size == size
        except FileNotFoundError:
            new = False
        if new:
            seen = st.st_ino
            stamp(os.path.join(d, f"arrive.{k}.{rank}"), {"t": time.monotonic()})
            k += 1
        else:
            time.sleep(0.002)
    while not os.path.exists(os.path.join(d, "stop")):
        time.sleep(0.05)


def restore_mode(d, mib, where):
    start = time.monotonic()
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    folder = os.environ["DDPRUN_SNAPSHOT_DIR"] if where == "snapshots" else os.path.join(d, "disk")
    path = os.path.join(folder, "ckpt.pt")
    loaded = None
    if os.path.exists(path):
        state = torch.load(path)
        loaded = state["step"]
    else:
        state = {"step": 1, **{f"t{i}": torch.randn(mib * 2**20 // 16) for i in range(4)}}
        if dist.get_rank() == 0:
            torch.save(state, path + ".tmp")
            os.replace(path + ".tmp", path)
    t_loaded = time.monotonic()
    model = DDP(torch.nn.Linear(64, 64))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():
        opt.zero_grad()
        model(torch.randn(8, 64)).sum().backward()
        opt.step()

    step()
    stamp(os.path.join(d, f"first.{os.getpid()}"), {"start": start, "loaded_at": t_loaded, "t": time.monotonic(),
                                                      "loaded": loaded, "rank": dist.get_rank(), "dir": folder})
    while not os.path.exists(os.path.join(d, "stop")):
        step()
        time.sleep(0.05)
    dist.destroy_process_group()


KEY = b"snapshot-figures"
CHUNK = 2**20


def recv_mode(addr, port, out, d, tagged):
    import hashlib
    import hmac
    import socket
    with socket.create_server((addr, port)) as server:
        stamp(os.path.join(d, "listening"), {})
        conn, _ = server.accept()
        buf = bytearray(CHUNK)
        view = memoryview(buf)
        with conn, open(out, "wb") as f:
            reader = conn.makefile("rb") if tagged else None
            while True:
                tag = b""
                if tagged:
                    line = reader.readline()
                    if not line:
                        break
                    tag, n = line.split()
                    got = reader.readinto(view[:int(n)])
                else:
                    got = conn.recv_into(view)
                if not got:
                    break
                if tagged and not hmac.compare_digest(hmac.new(KEY, view[:got], hashlib.sha256).hexdigest().encode(), tag):
                    raise SystemExit("a chunk's tag is wrong")
                f.write(view[:got])
    stamp(os.path.join(d, "recv"), {"t": time.monotonic()})


def send_mode(addr, port, src, d, tagged):
    import hashlib
    import hmac
    import socket
    start = time.monotonic()
    with socket.create_connection((addr, port)) as conn, open(src, "rb") as f:
        if tagged:
            while True:
                chunk = f.read(CHUNK)
                if not chunk:
                    break
                tag = hmac.new(KEY, chunk, hashlib.sha256).hexdigest()
                conn.sendall(f"{tag} {len(chunk)}\n".encode())
                conn.sendall(chunk)
        else:
            conn.sendfile(f)
    stamp(os.path.join(d, "send"), {"start": start})


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode in ("send", "recv"):
        addr, port, path, d, tagged = sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6] == "1"
        (send_mode if mode == "send" else recv_mode)(addr, port, path, d, tagged)
        sys.exit(0)
    d, mib = sys.argv[2], int(sys.argv[3])
    if mode == "save":
        save_mode(d, mib, int(sys.argv[4]), sys.argv[5])
    elif mode == "repl":
        repl_mode(d, mib, int(sys.argv[4]))
    else:
        restore_mode(d, mib, sys.argv[4])
