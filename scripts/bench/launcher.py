#!/usr/bin/python3
"""Launcher benchmark: ddprun next to torchrun, same machine, same run.

  scripts/bench/launcher.py [--torch 1.13|2] [--ddprun build/launcher/ddprun ...] [--runs 30]

--torch picks the torchrun: 1.13 (default) is Debian's python3-torch, run with
--redirects 9:1 --tee 9:1 (it fails under Python 3.11 without them; they redirect nothing) and
--monitor_interval 0.1 (its default is 5 s); 2 is the one in the PyTorch 2.x virtual environment
(scripts/torch2-env.sh), run with its defaults: it needs no workaround and its
--monitor-interval already defaults to 0.1 s.

Prints three tables:
  1. start-to-exit time for N trivial workers (/bin/true): launch, supervise, exit; next to a
     bare posix_spawn of N (a C program that spawns them and waits for them), run in turn with
     ddprun (paired: one of each, --runs times) so that a change of load falls on both; with
     several --ddprun (a build before a change and one after it), each of them in turn, with a
     row of its own;
  2. crash-to-restarted latency: from a worker's exit(1) to the restarted worker's main(), as
     measured and minus the worker's own start-up (exec of a tiny C program, measured
     separately), with the slowest ddprun run and the fastest torchrun run. ddprun runs with
     --restart_backoff_max=0: by default a worker that fails having made no progress (as this
     one, 0.2 s after its start, before any step) is restarted after the crash-loop backoff of
     1, 2, 4 ... s (docs/guides/failures.md: the restart policy), which torchrun does not have; the row measures
     the restart itself;
  3. peak memory (VmHWM) of the launcher process itself, with 8 workers.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import ROOT, TORCH_VERSIONS, compile_bare_spawn, compile_worker, free_port, read_stamp, torchrun


def env_for_runs():
    return dict(os.environ, OMP_NUM_THREADS="1")


def timed(cmd, env):
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def with_free_port(run):
    """run(port), again with another free port when it fails: between free_port() and torchrun's
    bind, a machine short of ephemeral ports (another job's thousands of connections) can hand
    the port to someone else, and torchrun exits 1 (EADDRINUSE). Says so on stderr."""
    for attempt in range(5):
        try:
            return run(free_port())
        except subprocess.CalledProcessError:
            print(f"bench/launcher.py: torchrun failed (its port taken?); again with another port",
                  file=sys.stderr)
    raise SystemExit("bench/launcher.py: torchrun failed 5 times in a row")


def start_to_exit(ddpruns, torchrun_cmd, bare_spawn, runs, torch_runs):
    env = env_for_runs()
    counts = (1, 2, 4, 8)
    d = {(ddprun, n): [] for ddprun in ddpruns for n in counts}
    b = {n: [] for n in counts}
    for _ in range(runs):
        for n in counts:
            for ddprun in ddpruns:
                d[ddprun, n].append(timed([ddprun, f"--nproc_per_node={n}", "/bin/true"], env))
            b[n].append(timed([bare_spawn, str(n), "/bin/true"], env))
    rows = []
    for n in counts:
        t = [with_free_port(lambda port: timed(torchrun_cmd + [f"--nproc_per_node={n}", f"--master_port={port}",
                                                               "--no_python", "/bin/true"], env))
             for _ in range(torch_runs)]
        for i, ddprun in enumerate(ddpruns):
            ratios = [x / y for x, y in zip(d[ddprun, n], b[n])]
            rows.append((n, i + 1, statistics.median(d[ddprun, n]) * 1e3, statistics.median(b[n]) * 1e3,
                         statistics.median(ratios), statistics.median(t) * 1e3))
    print("\n1. start-to-exit time, N workers of /bin/true (median; ddprun and a bare posix_spawn of N "
          "in turn, ratio: median of the pairs' ratios)")
    print(f"{'workers':>8} {'ddprun':>7} {'ddprun ms':>10} {'spawn ms':>9} {'ddprun/spawn':>13} {'torchrun ms':>12} "
          f"{'torchrun/ddprun':>16}")
    for n, which, dm, bm, ratio, tm in rows:
        print(f"{n:>8} {which:>7} {dm:>10.2f} {bm:>9.2f} {ratio:>12.2f}x {tm:>12.1f} {tm / dm:>15.0f}x")


def restart_latency(ddprun, torchrun_cmd, worker, runs, torch_runs):
    env = env_for_runs()
    bare = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as d:
            t0 = time.time()
            subprocess.run([worker, d], check=True, env={k: v for k, v in env.items()
                                                         if k != "TORCHELASTIC_RESTART_COUNT"})
            bare.append(read_stamp(f"{d}/bare.x.x") - t0)
    startup = statistics.median(bare)

    def one(cmd_for, port):
        with tempfile.TemporaryDirectory() as d:
            subprocess.run(cmd_for(d, port), env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, check=True)
            crash = read_stamp(f"{d}/crash.0.x")
            return min(read_stamp(f"{d}/start.1.{r}") for r in (0, 1)) - crash

    # Each run's latency, as measured (not less the worker's start-up).
    d = [one(lambda d, _: [ddprun, "--nproc_per_node=2", "--max_restarts=1", "--restart_backoff_max=0", worker, d], 0)
         for _ in range(runs)]
    t = [with_free_port(lambda port: one(lambda d, p: torchrun_cmd + [
        "--nproc_per_node=2", "--max_restarts=1", f"--master_port={p}", "--no_python", worker, d], port))
         for _ in range(torch_runs)]
    dm, tm = statistics.median(d), statistics.median(t)
    print("\n2. crash-to-restarted latency, 2 workers: a worker's exit(1) -> the restarted worker's "
          f"main() (median; the worker's own start-up is {startup * 1e3:.2f} ms)")
    print(f"{'':>22} {'ddprun ms':>10} {'torchrun ms':>12} {'ratio':>7}")
    print(f"{'as measured':>22} {dm * 1e3:>10.2f} {tm * 1e3:>12.2f} {tm / dm:>6.1f}x")
    print(f"{'less start-up':>22} {(dm - startup) * 1e3:>10.2f} {(tm - startup) * 1e3:>12.2f} "
          f"{(tm - startup) / max(dm - startup, 1e-6):>6.1f}x")
    print(f"{'slowest/fastest run':>22} {max(d) * 1e3:>10.2f} {min(t) * 1e3:>12.2f}   "
          f"(ddprun's slowest of {len(d)}, torchrun's fastest of {len(t)})")


def peak_memory(ddprun, torchrun_cmd):
    def hwm_kib(cmd):
        p = subprocess.Popen(cmd, env=env_for_runs(), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        try:
            deadline = time.time() + 30
            # Workers sleep 2 s; sample the launcher while they run (its peak is reached at spawn).
            best = 0
            while time.time() < deadline and p.poll() is None:
                try:
                    with open(f"/proc/{p.pid}/status") as f:
                        for line in f:
                            if line.startswith("VmHWM:"):
                                best = max(best, int(line.split()[1]))
                except FileNotFoundError:
                    break
                time.sleep(0.05)
            return best
        finally:
            p.wait()

    d = hwm_kib([ddprun, "--nproc_per_node=8", "sleep", "2"])
    t = hwm_kib(torchrun_cmd + ["--nproc_per_node=8", f"--master_port={free_port()}",
                                "--no_python", "sleep", "2"])
    print("\n3. peak memory of the launcher process (VmHWM), 8 workers")
    print(f"{'':>8} {'ddprun MiB':>10} {'torchrun MiB':>12} {'ratio':>7}")
    print(f"{'':>8} {d / 1024:>10.1f} {t / 1024:>12.1f} {t / d:>6.0f}x")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--torch", choices=TORCH_VERSIONS, default="1.13",
                    help="whose torchrun: 1.13 (Debian's python3) or 2 (the venv's python)")
    ap.add_argument("--ddprun", action="append",
                    help="a ddprun to measure (repeatable: table 1 measures each, the others the first); "
                         "default build/launcher/ddprun")
    ap.add_argument("--runs", type=int, default=30, help="runs per ddprun figure")
    ap.add_argument("--torch-runs", type=int, default=3, help="runs per torchrun figure (slow)")
    args = ap.parse_args()
    ddpruns = args.ddprun or [os.path.join(ROOT, "build", "launcher", "ddprun")]
    if shutil.which("gcc") is None:
        sys.exit("bench/launcher.py: needs gcc for the crash-latency worker")
    command, fixes = torchrun(args.torch)
    torchrun_cmd = command + fixes
    version = subprocess.run([command[0], "-c", "import torch; print(torch.__version__)"],
                             check=True, capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        worker = compile_worker(tmp)
        bare_spawn = compile_bare_spawn(tmp)
        load = os.getloadavg()[0]
        print(f"machine: {os.cpu_count()} cores, {os.uname().release}, load average {load:.2f}")
        for i, ddprun in enumerate(ddpruns):
            print(f"ddprun {i + 1}: {ddprun}")
        print(f"torchrun: torch {version}, {' '.join(torchrun_cmd)}")
        start_to_exit(ddpruns, torchrun_cmd, bare_spawn, args.runs, args.torch_runs)
        restart_latency(ddpruns[0], torchrun_cmd, worker, args.runs, args.torch_runs)
        peak_memory(ddpruns[0], torchrun_cmd)
        print(f"\nload average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
