#!/usr/bin/python3
"""The snapshot folder's figures (DDPRUN_SNAPSHOT_DIR, docs/guides/snapshots.md), each beside
what it replaces, measured in one run; root (mount and network namespaces); needs iperf3
(apt-get install iperf3) for the raw TCP baseline, and build/ (scripts/build.sh).

  python3 scripts/bench/snapshot_figures.py [--mib 1024] [--copies 5] [--save_rounds 5]
      [--restore_mib 1024] [--restores 3] [--only save,copy,restore] [--ddprun build/launcher/ddprun]

save     a training loop (snapshot_figures_worker.py save, torch of /usr/bin/python3, under one
         ddprun node) saves a --mib MiB state (4 float32 tensors) with torch.save to a temporary
         name and os.replace, in turn into DDPRUN_SNAPSHOT_DIR (tmpfs), into a folder on the disk
         (/var/tmp, the page cache: no fsync), and there with an fsync of the file and the folder;
         --save_rounds each: the save's wall time (the loop's stall), the step after it against
         the steps before (writeback that slows what follows).
copy     a file of --mib MiB committed on node A (the worker writes ckpt.tmp and renames it
         ckpt.pt, as torch.save users do): the commit (the rename) → the copy whole by its final
         name in node B's folder, and C's with 3 nodes (each node's worker polls its own folder
         every 2 ms: a copy is renamed into place when whole). Nodes on one machine, each in a mount
         namespace of its own with a private /dev/shm (tests/elastic/nodes.sh's nsnode): on
         loopback (127.0.0.2-4), and each also in a network namespace of its own joined by veth
         pairs on a bridge (127.1.0.1-3, as tests/elastic/netfault.sh). --copies copies each, 2
         and 3 nodes; beside them on the same link, alternating with ddprun's copies: iperf3 -n
         (memory to memory), a Python socket copy of the file between tmpfs folders (sendfile to
         the socket, recv_into, write), and the same with an HMAC-SHA256 tag each 1 MiB, checked,
         as ddprun's link does. Each copy's bytes on the link (loopback's or the veths' counters:
         how many times the file crossed it). And memory: each node's ddprun resident memory
         (VmRSS) before the copy and its peak during it, and its /dev/shm's use (the folder is a
         tmpfs: a copy per node is memory) at its peak, against the same 2-node job without
         DDPRUN_RDZV_SECRET (no replication).
restore  2 nodes of one rank and a hot spare (goodput_jobs.Nodes, loopback, nsnode), gloo DDP
         (snapshot_figures_worker.py restore): rank 0 saves a --restore_mib MiB checkpoint, to
         DDPRUN_SNAPSHOT_DIR (replicated) or to a folder on the disk that every node sees (a
         shared file system's part; the page cache holds it); once it is on both nodes, node B
         (not the rendezvous host) is SIGKILLed: the kill → both ranks of the next round (the
         survivor and the spare) past their first step with the checkpoint loaded, split in
         kill → workers started, → loaded, → first step; the spare's snapshot_restore record.

Every figure is a median over its repetitions, with the smallest (or fastest) beside it; the
machine and its load average (the 1-minute one, before each part) are printed first.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchlib import PYTHON_113, ROOT, free_port, stop_launcher  # noqa: E402
from goodput_jobs import Nodes, descendants, sweep  # noqa: E402
from snapshot_figures_copy import GB, SECRET, WORKER, load, machine, med, read_json, run_copy, wait_for  # noqa: E402

# ---- save ---------------------------------------------------------------------------------------

def run_save(args):
    disk = tempfile.mkdtemp(prefix="snapshot-figures-", dir="/var/tmp")
    with tempfile.TemporaryDirectory(prefix="snapshot-figures-") as d:
        try:
            print(f"\n## save: a {args.mib} MiB state (4 float32 tensors), torch.save to a temporary name + os.replace, "
                  f"{args.save_rounds} rounds of each, alternating; torch {torch_version()} (/usr/bin/python3); "
                  f"load {load():.2f}", flush=True)
            with open(os.path.join(d, "log"), "wb") as log:
                p = subprocess.run([args.ddprun, "--nproc_per_node=1", f"--rdzv_id=snapfig-save-{os.getpid()}",
                                    PYTHON_113, WORKER, "save", d, str(args.mib), str(args.save_rounds), disk],
                                   env=dict(os.environ, OMP_NUM_THREADS="1"), stdout=log, stderr=subprocess.STDOUT)
            if p.returncode != 0:
                print(f"the save job exited {p.returncode}:\n" + open(os.path.join(d, "log")).read()[-2000:])
                return
            rows = [json.loads(line) for line in open(os.path.join(d, "saves"))]
        finally:
            shutil.rmtree(disk, ignore_errors=True)
    print("| into | the save's wall time (the stall): median (min) | GB/s | the step after it | the steps before |")
    print("|---|---|---|---|---|")
    for where, label in (("snapshots", "DDPRUN_SNAPSHOT_DIR (tmpfs)"), ("disk", "/var/tmp (disk, no fsync)"),
                         ("disk+fsync", "/var/tmp (disk, fsync of file and folder)")):
        r = [row for row in rows if row["where"] == where]
        stall = [row["stall"] for row in r]
        print(f"| {label} | {med(stall, '{:.3f} s')} | {med([args.mib * 2**20 / s / GB for s in stall], best=max)} | "
              f"{med([row['step_after'] * 1e3 for row in r], '{:.1f} ms')} | "
              f"{med([row['step_before'] * 1e3 for row in r], '{:.1f} ms')} |")


def torch_version():
    return subprocess.run([PYTHON_113, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                          text=True).stdout.strip()


# ---- restore ------------------------------------------------------------------------------------

def restore_once(args, where, d):
    port = free_port()
    os.makedirs(os.path.join(d, "disk"))
    node = lambda i, d: [args.ddprun, "--nnodes=2", "--nproc_per_node=1", "--rdzv_backend=c10d",  # noqa: E731
                         f"--rdzv_endpoint=127.0.0.2:{port}", f"--rdzv_id=snapfig-{os.getpid()}-{port}",
                         "--max_restarts=5", f"--local_addr=127.0.0.{i + 2}", "--rdzv_conf=spares=1",
                         f"--event_log={d}/events.{i}", PYTHON_113, WORKER, "restore", d, str(args.restore_mib), where]
    env = dict(os.environ, DDPRUN_RDZV_SECRET=SECRET, OMP_NUM_THREADS="1")
    job = Nodes(node, True, env, d, port)
    seen = {}
    try:
        def firsts():
            found = {}
            for f in os.listdir(d):
                if f.startswith("first.") and not f.endswith(".tmp"):
                    found[int(f.split(".")[1])] = read_json(os.path.join(d, f))
            return found

        def member():
            """The node of the round other than the host (1 or 2: the spare is the one that joined
            last), once both ranks have stepped."""
            f = firsts()
            if len(f) < 2:
                return None
            return next((i for i in (1, 2) if set(f) & set(descendants(job.procs[i].pid))), None)

        def ready():
            m = member()
            if m is None or "hot spare" not in open(os.path.join(d, f"launcher.log.{3 - m}"), errors="replace").read():
                return None
            if where == "disk":
                return m
            rel = next(iter(firsts().values()))["dir"].lstrip("/")
            return m if all(os.path.exists(f"/proc/{job.procs[i].pid}/root/{rel}/ckpt.pt") for i in (0, m)) else None
        m = wait_for(ready, 240, lambda: job.exited() is None, 0.05)
        if m is None:
            return {"failed": job.exited() or "no first steps, spare or checkpoint on both nodes in 240 s"}
        spare = 3 - m
        before = set(firsts())
        victim = job.procs[m]
        below = descendants(victim.pid)
        kill = time.monotonic()
        victim.kill()
        for pid in below:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        victim.wait()
        job.killed.add(m)

        def restored():
            new = [v for p, v in firsts().items() if p not in before and v["start"] > kill and v["loaded"]]
            return new if len({v["rank"] for v in new}) >= 2 else None
        new = wait_for(restored, 240, lambda: job.procs[0].poll() is None, 0.01)
        if not new:
            return {"failed": job.exited() or "the next round did not load and step in 240 s"}
        log = os.path.join(d, f"events.{spare}")
        events = [json.loads(line) for line in open(log)] if os.path.exists(log) else []
        fetch = [e for e in events if e.get("event") == "snapshot_restore" and e.get("fetched")]
        return {"total": max(v["t"] for v in new) - kill, "started": max(v["start"] for v in new) - kill,
                "loaded": max(v["loaded_at"] for v in new) - kill,
                "fetch": fetch[-1]["seconds"] if fetch else None, "fetch_bytes": fetch[-1]["bytes"] if fetch else None}
    finally:
        open(os.path.join(d, "stop"), "w").close()
        for i, p in enumerate(job.procs):
            if i not in job.killed:
                seen.update(descendants(p.pid))
        for p in job.procs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                stop_launcher(p)
        sweep(seen, d)


def run_restore(args):
    print(f"\n## restore: 2 nodes + a spare, node B SIGKILLed, a {args.restore_mib} MiB checkpoint, {args.restores} "
          f"runs of each, alternating; load {load():.2f}", flush=True)
    results = {"snapshots": [], "disk": []}
    for r in range(args.restores):
        for where in (("snapshots", "disk") if r % 2 == 0 else ("disk", "snapshots")):
            with tempfile.TemporaryDirectory(prefix="snapshot-figures-") as d:
                res = restore_once(args, where, d)
            if "failed" in res:
                print(f"{where}, run {r + 1}: failed: {res['failed']}", flush=True)
            else:
                results[where].append(res)
    print("| checkpoint in | kill → every rank past its first step, loaded: median (min) | → the last worker started | "
          "→ loaded | the spare's snapshot_restore: seconds, bytes |")
    print("|---|---|---|---|---|")
    for where, label in (("snapshots", "DDPRUN_SNAPSHOT_DIR, replicated"), ("disk", "a disk folder of every node")):
        r = results[where]
        fetch = [x["fetch"] for x in r if x["fetch"] is not None]
        fb = [x["fetch_bytes"] for x in r if x["fetch_bytes"] is not None]
        print(f"| {label} ({len(r)} runs) | {med([x['total'] for x in r], '{:.2f} s')} | "
              f"{med([x['started'] for x in r], '{:.2f} s')} | {med([x['loaded'] for x in r], '{:.2f} s')} | "
              f"{med(fetch, '{:.2f} s')}, {med([b / 2**20 for b in fb], '{:.0f} MiB')} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ddprun", default=os.path.join(ROOT, "build", "launcher", "ddprun"))
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--copies", type=int, default=5)
    parser.add_argument("--save_rounds", type=int, default=5)
    parser.add_argument("--restore_mib", type=int, default=1024)
    parser.add_argument("--restores", type=int, default=3)
    parser.add_argument("--only", default="save,copy,restore")
    args = parser.parse_args()
    parts = args.only.split(",")
    if set(parts) - {"save", "copy", "restore"}:
        raise SystemExit(f"--only {args.only}: the parts are save, copy, restore (comma-separated)")
    if os.geteuid() != 0 and set(parts) & {"copy", "restore"}:
        raise SystemExit("copy and restore need root (mount and network namespaces); --only save runs without")
    if "copy" in parts and not shutil.which("iperf3"):
        raise SystemExit("copy needs iperf3 for its raw TCP baseline: apt-get install iperf3")
    if not os.access(args.ddprun, os.X_OK):
        raise SystemExit(f"--ddprun {args.ddprun}: not an executable; build it (scripts/build.sh)")
    print(f"machine: {machine()}; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; ddprun {args.ddprun}", flush=True)
    for part, run in (("save", run_save), ("copy", run_copy), ("restore", run_restore)):
        if part in parts:
            run(args)


if __name__ == "__main__":
    main()
