#!/usr/bin/python3
"""What ddprun's progress module (--progress, launcher/python/) costs a Python training step.

  scripts/bench/progress.py [--ddprun build/launcher/ddprun] [--rounds 5]

An unmodified DDP training loop (progress_python_worker.py: an MLP of LAYERS Linear+ReLU pairs,
SGD, gloo, one rank, one thread) under ddprun --progress=on, timed in blocks that alternate
between what the module added (the DDP model's forward pre-hook, the optimizer step hook) and
nothing, in the same process: a loaded machine drifts more between runs than the hooks cost.
Each row: the median over rounds of each kind's median time per step, and of the median
difference between adjacent blocks (the cost a step). Both
PyTorch versions: Debian's 1.13 and the 2.x venv (scripts/install-deps.sh --torch2).
"""
import argparse
import os
import re
import statistics
import subprocess

from benchlib import BENCH_DIR, PYTHON_113, ROOT, torch2_python

# (label, layers, width, batch): a short step and a longer one (2 and 20-40 ms on the 2-core VM).
SHAPES = [("20 x Linear(64) + ReLU, batch 32", 20, 64, 32), ("20 x Linear(256) + ReLU, batch 256", 20, 256, 256)]


def one(ddprun, python, shape, steps, blocks):
    _, layers, width, batch = shape
    out = subprocess.run([ddprun, "--nproc_per_node=1", "--progress=on",
                          os.path.join(BENCH_DIR, "progress_python_worker.py"),
                          str(layers), str(width), str(batch), str(steps), str(blocks)],
                         env=dict(os.environ, PYTHON_EXEC=python), check=True, capture_output=True, text=True).stdout
    found = re.search(r"off_us=([0-9.]+) on_us=([0-9.]+) diff_us=(-?[0-9.]+)", out)
    return float(found.group(1)), float(found.group(2)), float(found.group(3))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ddprun", default=os.path.join(ROOT, "build", "launcher", "ddprun"))
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    pythons = [("1.13", PYTHON_113)]
    p2 = torch2_python()
    if os.access(p2, os.X_OK):
        pythons.append(("2.x", p2))
    print("| PyTorch | step | without the hooks | with them | cost a step |")
    print("|---|---|---|---|---|")
    for version, python in pythons:
        for shape in SHAPES:
            steps = 100 if shape[2] == 64 else 10
            runs = [one(args.ddprun, python, shape, steps, 30) for _ in range(args.rounds)]
            off = statistics.median(r[0] for r in runs)
            on = statistics.median(r[1] for r in runs)
            cost = statistics.median(r[2] for r in runs)
            print(f"| {version} | {shape[0]} | {off:.0f} us | {on:.0f} us | {cost:+.1f} us ({cost / off * 100:+.2f} %) |")


if __name__ == "__main__":
    main()
