#!/usr/bin/python3
"""--progress_pattern benchmark: the cost of matching every line of worker output.

  scripts/bench/progress_pattern.py [--ddprun build-dev/launcher/ddprun] [--lines 200000] [--runs 3]

2 ranks each print --lines lines (`yes LINE | head -n N`) through ddprun to /dev/null, with no
pattern, then with patterns; it prints the best wall time of --runs runs, the lines per second
through ddprun, and the time matching added per line against the run without a pattern.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

from benchlib import ROOT

CASES = [
    # name, line, patterns
    ("no pattern", "step 12 loss 0.531", []),
    ("anchored, every line matches", "step 12 loss 0.531", ["^step (?<step>[0-9]+)"]),
    ("anchored, no line matches", "iter 12 loss 0.531", ["^step (?<step>[0-9]+)"]),
    ("unanchored, no line matches", "iter 12 loss 0.531", ["step=(?<step>[0-9]+)"]),
    ("two patterns, the second matches", "iter 12 loss 0.531", ["^step (?<step>[0-9]+)", "^iter"]),
    ("no pattern, 1000-byte lines", "x" * 1000, []),
    ("unanchored, 1000-byte lines, no match", "x" * 1000, ["step=(?<step>[0-9]+)"]),
]


def run_once(ddprun, worker, line, patterns, lines):
    args = [ddprun, "--nproc_per_node=2"] + [f"--progress_pattern={p}" for p in patterns] + [worker]
    env = dict(os.environ, BENCH_LINE=line, BENCH_LINES=str(lines))
    t0 = time.perf_counter()
    subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=True)
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ddprun", default=os.path.join(ROOT, "build", "launcher", "ddprun"))
    ap.add_argument("--lines", type=int, default=200000, help="lines per rank")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    sys.stdout.reconfigure(line_buffering=True)
    with tempfile.TemporaryDirectory() as folder:
        worker = os.path.join(folder, "printer")
        with open(worker, "w") as f:
            f.write('#!/bin/sh\nyes "$BENCH_LINE" | head -n "$BENCH_LINES"\n')
        os.chmod(worker, 0o755)
        print(f"{'case':<40} {'best s':>7} {'lines/s':>10} {'ns/line added':>14}")
        base = {}
        for name, line, patterns in CASES:
            best = min(run_once(args.ddprun, worker, line, patterns, args.lines) for _ in range(args.runs))
            total = 2 * args.lines
            key = len(line)
            if not patterns:
                base[key] = best
            added = (best - base[key]) / total * 1e9 if patterns else 0
            print(f"{name:<40} {best:>7.2f} {total / best:>10.0f} {added:>14.0f}")


if __name__ == "__main__":
    main()
