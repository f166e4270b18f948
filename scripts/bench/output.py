#!/usr/bin/python3
"""Output benchmark: worker output through ddprun into a console of a given speed.

  scripts/bench/output.py [--ddprun build/launcher/ddprun] [--rate 100]

The console is tests/launcher/slow_reader.py (64 KiB reads at about --rate MB/s, checking every
line as it comes). For each case it prints the bytes the console got of those sent, its speed,
ddprun's lines about dropped output (none expected) and ddprun's peak memory (VmHWM).
  1. the issue's: 2 ranks of `yes 0123456789abcdef | head -c 50000000`
  2. 2 ranks flooding 1 GB in numbered lines of 1000 bytes, at --rate, then at the reader's
     full speed
  3. one line of 200 MB from 1 rank (VmHWM read by the reader once the line has passed)
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

from benchlib import ROOT

READER = [sys.executable, os.path.join(ROOT, "tests", "launcher", "slow_reader.py")]

FLOOD_WORKER = """#!/usr/bin/python3
import os, sys
sys.path.insert(0, os.environ["DDPRUN_TESTS_DIR"])
from slow_reader import flood_line
rank, lines = int(os.environ["RANK"]), int(os.environ["FLOOD_LINES"])
batch = []
for i in range(lines):
    batch.append(flood_line(rank, i, 1000) + b"\\n")
    if len(batch) == 64 or i == lines - 1:
        sys.stdout.buffer.write(b"".join(batch))
        batch.clear()
sys.stdout.buffer.flush()
"""


def run(ddprun, args, reader_args, env=None):
    """ddprun ARGS | slow_reader READER_ARGS; returns (reader's key=values, ddprun's drop lines, VmHWM KiB, s)."""
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        launcher = subprocess.Popen([ddprun] + args, stdout=subprocess.PIPE, stderr=err,
                                    env=dict(os.environ, **(env or {})))
        reader_cmd = [a.replace("{pid}", str(launcher.pid)) for a in READER + reader_args]
        reader = subprocess.Popen(reader_cmd, stdin=launcher.stdout, stdout=subprocess.PIPE, text=True)
        launcher.stdout.close()
        hwm = 0
        while launcher.poll() is None:
            try:
                with open(f"/proc/{launcher.pid}/status") as f:
                    hwm = max([hwm] + [int(l.split()[1]) for l in f if l.startswith("VmHWM:")])
            except (FileNotFoundError, ProcessLookupError):
                pass
            time.sleep(0.05)
        out, _ = reader.communicate()
        seconds = time.perf_counter() - t0
        err.seek(0)
        drops = [l for l in err.read().decode(errors="replace").splitlines() if "dropp" in l]
    values = dict(l.split("=", 1) for l in out.splitlines() if "=" in l)
    if reader.returncode != 0:
        values["problem"] = f"reader exit {reader.returncode}"
    return values, drops, hwm, seconds


def row(name, expected, values, drops, hwm, seconds):
    got = int(values.get("bytes", 0))
    hwm = int(values.get("ddprun_peak_rss_kib", hwm))
    print(f"{name:<44} {got:>11} {expected:>11} {int(values.get('mb_per_s', 0)):>6} {seconds:>7.1f} "
          f"{hwm / 1024:>8.1f}  {values.get('problem', '')}{'; '.join(drops) or 'none'}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ddprun", default=os.path.join(ROOT, "build", "launcher", "ddprun"))
    ap.add_argument("--rate", type=float, default=100, help="the slow console's MB/s")
    args = ap.parse_args()
    sys.stdout.reconfigure(line_buffering=True)
    rate = str(args.rate)
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}; ddprun {args.ddprun}")
    print(f"{'case':<44} {'received':>11} {'sent':>11} {'MB/s':>6} {'seconds':>7} {'VmHWM MiB':>8}  dropped")
    with tempfile.TemporaryDirectory() as tmp:
        lines = 50_000_000 // 17
        rest = 50_000_000 - lines * 17  # an unfinished last line, prefixed too
        values = run(args.ddprun, ["--nproc_per_node=2", "sh", "-c", "yes 0123456789abcdef | head -c 50000000"],
                     ["--rate", rate])
        row(f"1. yes | head -c 50 MB, 2 ranks, {args.rate:g} MB/s", 2 * (lines * 26 + 10 + rest), *values)

        worker = os.path.join(tmp, "flood")
        with open(worker, "w") as f:
            f.write(FLOOD_WORKER)
        os.chmod(worker, 0o755)
        env = {"FLOOD_LINES": "500000", "DDPRUN_TESTS_DIR": os.path.join(ROOT, "tests", "launcher")}
        for speed, label in ((rate, f"{args.rate:g} MB/s"), ("1e9", "reader's full speed")):
            values = run(args.ddprun, ["--nproc_per_node=2", worker], ["--rate", speed, "--flood", "2", "500000", "1000"],
                         env)
            row(f"2. 1 GB flood, 2 ranks, {label}", 2 * 500000 * 1009, *values)

        release = os.path.join(tmp, "release")
        # The worker waits for the reader's release, at most 20 s (a reader that lost bytes never releases).
        script = (f"head -c 200000000 /dev/zero | tr '\\0' x; echo; n=0; "
                  f"while [ ! -e {release} ] && [ $n -lt 400 ]; do sleep 0.05; n=$((n+1)); done")
        values = run(args.ddprun, ["--nproc_per_node=1", "sh", "-c", script],
                     ["--rate", rate, "--line", "200000000", "--ddprun_pid", "{pid}", "--release", release])
        pieces = -(-200_000_000 // 65536)
        row(f"3. one 200 MB line, {args.rate:g} MB/s", 200_000_000 + pieces * 10, *values)
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
