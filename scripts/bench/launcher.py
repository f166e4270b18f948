#!/usr/bin/python3
"""Launcher benchmark: ddprun next to torchrun, same machine, same run.

  scripts/bench/launcher.py [--torch 1.13|2] [--ddprun build/launcher/ddprun] [--runs 30]

--torch picks the torchrun: 1.13 (default) is Debian's python3-torch, run with
--redirects 9:1 --tee 9:1 (it fails under Python 3.11 without them; they redirect nothing) and
--monitor_interval 0.1 (its default is 5 s); 2 is the one in the PyTorch 2.x virtual environment
(scripts/torch2-env.sh), run with its defaults: it needs no workaround and its
--monitor-interval already defaults to 0.1 s.

Prints three tables:
  1. start-to-exit time for N trivial workers (/bin/true): launch, supervise, exit;
  2. crash-to-restarted latency: from a worker's exit(1) to the restarted worker's main(),
     minus the worker's own start-up (exec of a tiny C program, measured separately);
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

from benchlib import ROOT, TORCH_VERSIONS, compile_worker, free_port, read_stamp, torchrun


def env_for_runs():
    return dict(os.environ, OMP_NUM_THREADS="1")


def timed(cmd, env):
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def start_to_exit(ddprun, torchrun_cmd, runs, torch_runs):
    env = env_for_runs()
    rows = []
    for n in (1, 2, 4, 8):
        d = [timed([ddprun, f"--nproc_per_node={n}", "/bin/true"], env) for _ in range(runs)]
        t = [timed(torchrun_cmd + [f"--nproc_per_node={n}", f"--master_port={free_port()}",
                                   "--no_python", "/bin/true"], env) for _ in range(torch_runs)]
        rows.append((n, statistics.median(d) * 1e3, statistics.median(t) * 1e3))
    print("\n1. start-to-exit time, N workers of /bin/true (median)")
    print(f"{'workers':>8} {'ddprun ms':>10} {'torchrun ms':>12} {'ratio':>7}")
    for n, d, t in rows:
        print(f"{n:>8} {d:>10.2f} {t:>12.1f} {t / d:>6.0f}x")


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

    def measure(cmd_for, count):
        lat = []
        for _ in range(count):
            with tempfile.TemporaryDirectory() as d:
                subprocess.run(cmd_for(d), env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, check=True)
                crash = read_stamp(f"{d}/crash.0.x")
                restarted = min(read_stamp(f"{d}/start.1.{r}") for r in (0, 1))
                lat.append(restarted - crash)
        return statistics.median(lat)

    d = measure(lambda d: [ddprun, "--nproc_per_node=2", "--max_restarts=1", worker, d], runs)
    t = measure(lambda d: torchrun_cmd + ["--nproc_per_node=2", "--max_restarts=1",
                                          f"--master_port={free_port()}", "--no_python", worker, d],
                torch_runs)
    print("\n2. crash-to-restarted latency, 2 workers (median; worker start-up "
          f"{startup * 1e3:.2f} ms subtracted)")
    print(f"{'':>8} {'ddprun ms':>10} {'torchrun ms':>12} {'ratio':>7}")
    print(f"{'':>8} {(d - startup) * 1e3:>10.2f} {(t - startup) * 1e3:>12.1f} "
          f"{(t - startup) / max(d - startup, 1e-6):>6.0f}x")


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
    ap.add_argument("--ddprun", default=os.path.join(ROOT, "build", "launcher", "ddprun"))
    ap.add_argument("--runs", type=int, default=30, help="runs per ddprun figure")
    ap.add_argument("--torch-runs", type=int, default=3, help="runs per torchrun figure (slow)")
    args = ap.parse_args()
    if shutil.which("gcc") is None:
        sys.exit("bench/launcher.py: needs gcc for the crash-latency worker")
    command, fixes = torchrun(args.torch)
    torchrun_cmd = command + fixes
    version = subprocess.run([command[0], "-c", "import torch; print(torch.__version__)"],
                             check=True, capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        worker = compile_worker(tmp)
        load = os.getloadavg()[0]
        print(f"machine: {os.cpu_count()} cores, {os.uname().release}, load average {load:.2f}; "
              f"ddprun {args.ddprun}")
        print(f"torchrun: torch {version}, {' '.join(torchrun_cmd)}")
        start_to_exit(args.ddprun, torchrun_cmd, args.runs, args.torch_runs)
        restart_latency(args.ddprun, torchrun_cmd, worker, args.runs, args.torch_runs)
        peak_memory(args.ddprun, torchrun_cmd)
        print(f"\nload average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
