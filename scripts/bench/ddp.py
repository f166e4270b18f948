#!/usr/bin/python3
"""DDP step time: ddprun's C++ DDP against PyTorch's Python DDP on the same model and data.

    scripts/bench/ddp.py [--torch 1.13|2] [--steps 100] [--rounds 5]
                         [--rows single,ddp,nosync,ddp_other_view,small_ddp,small_nosync]

--torch picks the pair compared, the same PyTorch on both sides: 1.13 (default) is build/
(DDPRUN_BUILD_DIR) against Debian's python3-torch; 2 is build-torch2/ (DDPRUN_TORCH2_BUILD_DIR,
scripts/build.sh --torch2) against the python of the virtual environment that
scripts/torch2-env.sh names. Each side's launcher is its build's ddprun.

The models are worker/bench/bench_ddp.cpp and ddp_python_worker.py (beside this script): mlp, 4
Linear layers of 1024 (the rows single to ddp_other_view); many_small, 200 Linear layers of 64
(the small_ rows), where per-parameter and per-operator work counts more than the all-reduce.
Batch 64 per rank, MSE loss, SGD, gloo on the CPU, 2 ranks under ddprun (single: 1, no
launcher). Both sides run one intra-op thread (torch.set_num_threads(1) /
torch::set_num_threads(1), and OMP_NUM_THREADS, OPENBLAS_NUM_THREADS, MKL_NUM_THREADS=1), and
each prints the thread counts it really runs with, which the table's header repeats. Each run
prints the median step time of rank 0 and the CPU time per step of its process (all threads).

A virtual machine's speed drifts from one run to the next by more than the differences measured
here, so every round runs every configuration once, one after the other, and the table gives
each configuration's median over the rounds and C++/Python as the median of the rounds' ratios
(with the smallest and largest of them). --rows measures some rows only.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

from benchlib import BENCH_DIR, TORCH_VERSIONS, torch_pair

# (label, language, mode, extra arguments); C++ runs with its defaults (gradient_as_bucket_view
# on), Python with PyTorch's (off); one more row each shows the other setting.
SMALL = ["--model", "many_small"]
CONFIGS = [
    ("single", "cpp", "single", []),
    ("single", "py", "single", []),
    ("ddp", "cpp", "ddp", []),
    ("ddp", "py", "ddp", []),
    ("nosync", "cpp", "nosync", []),
    ("nosync", "py", "nosync", []),
    ("ddp_other_view", "cpp", "ddp", ["--gradient-as-bucket-view", "false"]),
    ("ddp_other_view", "py", "ddp", ["--gradient-as-bucket-view", "true"]),
    ("small_ddp", "cpp", "ddp", SMALL),
    ("small_ddp", "py", "ddp", SMALL),
    ("small_nosync", "cpp", "nosync", SMALL),
    ("small_nosync", "py", "nosync", SMALL),
]
ROWS = list(dict.fromkeys(c[0] for c in CONFIGS))


def run(build, python, lang, mode, extra, steps):
    """Returns (median ms, CPU ms, thread line) of one run."""
    program = [os.path.join(build, "worker", "bench_ddp")] if lang == "cpp" else \
        [python, os.path.join(BENCH_DIR, "ddp_python_worker.py")]
    args = program + ["--mode", mode, "--steps", str(steps)] + extra
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1",
               PYTHON_EXEC=python)
    if mode == "single":
        env.pop("WORLD_SIZE", None)
        env.pop("RANK", None)
    else:
        args = [os.path.join(build, "launcher", "ddprun"), "--nproc_per_node=2"] + args
    out = subprocess.run(args, env=env, check=True, capture_output=True, text=True).stdout
    m = re.search(r"median_ms=([0-9.]+).*cpu_ms=([0-9.]+)", out)
    threads = re.search(r"threads intra_op=.*", out)
    if not m or not threads:
        sys.exit(f"bench/ddp.py: no result from {' '.join(args)}:\n{out}")
    return float(m.group(1)), float(m.group(2)), threads.group(0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--torch", choices=TORCH_VERSIONS, default="1.13",
                    help="the PyTorch on both sides: 1.13 (build/, Debian's python3) or 2 "
                         "(build-torch2/, the venv's python)")
    ap.add_argument("--steps", type=int, default=100, help="timed steps per run")
    ap.add_argument("--rounds", type=int, default=5, help="runs of every configuration")
    ap.add_argument("--rows", default=",".join(ROWS),
                    help=f"comma-separated rows to measure, of {','.join(ROWS)} (default: all)")
    args = ap.parse_args()
    rows = args.rows.split(",")
    for label in rows:
        if label not in ROWS:
            sys.exit(f"bench/ddp.py: --rows: unknown row {label!r}; rows are {','.join(ROWS)}")
    configs = [c for c in CONFIGS if c[0] in rows]
    build, python = torch_pair(args.torch)
    if not os.access(os.path.join(build, "worker", "bench_ddp"), os.X_OK):
        sys.exit(f"bench/ddp.py: no {build}/worker/bench_ddp; build it (scripts/build.sh"
                 f"{' --torch2' if args.torch == '2' else ''})")
    py_version = subprocess.run([python, "-c", "import torch; print(torch.__version__)"],
                                check=True, capture_output=True, text=True).stdout.strip()

    load_before = os.getloadavg()
    wall = {c[:2]: [] for c in configs}
    cpu = {c[:2]: [] for c in configs}
    threads = {"cpp": set(), "py": set()}
    for r in range(args.rounds):
        for label, lang, mode, extra in configs:
            ms, cpu_ms, thread_line = run(build, python, lang, mode, extra, args.steps)
            wall[label, lang].append(ms)
            cpu[label, lang].append(cpu_ms)
            threads[lang].add(thread_line)
        print(f"round {r + 1}/{args.rounds}: " + ", ".join(
            f"{label} {lang} {wall[label, lang][-1]:.1f}" for label, lang, _, _ in configs),
            file=sys.stderr, flush=True)
    load_after = os.getloadavg()

    def med(values):
        return statistics.median(values)

    def ratios(label):
        return [c / p for c, p in zip(wall[label, "cpp"], wall[label, "py"])]

    print(f"torch {py_version} (python {python}) against libtorch of {build}; "
          f"{os.cpu_count()} cores; load average {load_before[0]:.2f} before, "
          f"{load_after[0]:.2f} after; {args.rounds} rounds of {args.steps} steps")
    for lang, name in (("cpp", "C++"), ("py", "Python")):
        print(f"{name} {'; '.join(sorted(threads[lang]))}")
    if threads["cpp"] != threads["py"]:
        print("(the two sides ran with different thread counts: the ratios compare them too)")
    print("ms per step, median over rounds (CPU: all threads of one rank)")
    print(f"{'':40} {'C++':>8} {'Python':>8} {'C++/Py':>7} {'range':>11} {'C++ CPU':>8} "
          f"{'Py CPU':>8}")

    def row(title, label):
        if label not in rows:
            return
        r = ratios(label)
        print(f"{title:40} {med(wall[label, 'cpp']):8.2f} {med(wall[label, 'py']):8.2f} "
              f"{med(r):7.2f} {min(r):5.2f}-{max(r):<5.2f} {med(cpu[label, 'cpp']):8.2f} "
              f"{med(cpu[label, 'py']):8.2f}")

    def overhead(title, ddp, nosync):
        if ddp not in rows or nosync not in rows:
            return
        d = {lang: [a - b for a, b in zip(wall[ddp, lang], wall[nosync, lang])]
             for lang in ("cpp", "py")}
        print(f"{title:40} {med(d['cpp']):8.2f} {med(d['py']):8.2f}")

    row("world size 1", "single")
    row("world size 2, DDP", "ddp")
    row("world size 2, no sync", "nosync")
    overhead("DDP overhead over no sync", "ddp", "nosync")
    row("DDP, other gradient_as_bucket_view", "ddp_other_view")
    row("many_small: world size 2, DDP", "small_ddp")
    row("many_small: world size 2, no sync", "small_nosync")
    overhead("many_small: DDP overhead over no sync", "small_ddp", "small_nosync")
    print("(mlp unless the row says many_small. C++/Py: median of the rounds' ratios; range: "
          "their smallest and largest.")
    print(" gradient_as_bucket_view: on by default in C++, off in PyTorch"
          + ("; the other-view row swaps them: C++ off, Python on.)" if "ddp_other_view" in rows
             else ".)"))


if __name__ == "__main__":
    main()
