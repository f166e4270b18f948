#!/usr/bin/python3
"""What ddprun's progress module (--progress, launcher/python_bootstrap/) costs a Python training step.

  scripts/bench/progress.py [--ddprun build/launcher/ddprun] [--rounds 5]

An unmodified DDP training loop (progress_python_worker.py: an MLP of LAYERS Linear+ReLU pairs,
SGD, gloo, one rank, one thread) under ddprun --progress=on, timed in blocks that alternate
between what the module added (the DDP model's forward pre-hook, the optimizer step hook) and
nothing, in the same process: a loaded machine drifts more between runs than the hooks cost.
Each row: the median over rounds of each kind's median time per step, and of the median
difference between adjacent blocks (the cost a step). Both
PyTorch versions: Debian's 1.13 and the 2.x venv (scripts/install-deps.sh --torch2).

Then the module's own calls alone (timeit, the best of 5 repeats of 200,000 calls, the record
in a real heartbeat file in a temporary folder): what a step adds (_step: the progress record's
write through the mmap and the throttled beat), what a collective adds (its wrapper around a
function that does nothing: two record writes), what a synchronised DDP backward pass adds (the
DDP model's forward hook, then the wrapped torch.autograd.backward around a function that does
nothing: the "ddp_backward" collective's two record writes) and a throttled beat. These are below
the resolution of the first table on a loaded machine.
"""
import argparse
import os
import re
import statistics
import subprocess
import tempfile

from benchlib import BENCH_DIR, PYTHON_113, ROOT, torch2_python

# Times the module's calls in a Python of its own; prints "step_us collective_us ddp_us beat_us".
CALLS = """
import os, sys, timeit
import torch
import _ddprun_progress as p
p._file, p._owner = sys.argv[1], os.getpid()
p._grad_enabled, p._compiling = torch.is_grad_enabled, getattr(getattr(torch, "compiler", None), "is_compiling", None)
def best(call):
    return min(timeit.repeat(call, number=200000, repeat=5)) / 200000 * 1e6
collective = p._collective(lambda: None, "all_reduce")
class Model:
    require_backward_grad_sync = True
model, backward = Model(), p._backward(lambda: None)
def ddp_backward():
    p._ddp_forward_done(model, (), None)
    backward()
print("%.2f %.2f %.2f %.2f" % (best(p._step), best(collective), best(ddp_backward), best(p._beat)))
"""


def calls(ddprun, python):
    bootstrap = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(ddprun))), "share", "ddprun", "python")
    with tempfile.TemporaryDirectory() as tmp:
        heartbeat = os.path.join(tmp, "heartbeat")
        open(heartbeat, "w").close()
        out = subprocess.run([python, "-c", CALLS, heartbeat], env=dict(os.environ, PYTHONPATH=bootstrap),
                             check=True, capture_output=True, text=True).stdout
    return [float(x) for x in out.split()]

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
    print()
    print("| PyTorch | a step (_step) | a collective (wrapper) | a DDP backward (hook and wrapper) | a throttled beat |")
    print("|---|---|---|---|---|")
    for version, python in pythons:
        step, collective, ddp, beat = calls(args.ddprun, python)
        print(f"| {version} | {step:.2f} us | {collective:.2f} us | {ddp:.2f} us | {beat:.2f} us |")


if __name__ == "__main__":
    main()
