#!/usr/bin/python3
"""GPU figures: ddprun's C++ worker library against PyTorch 2.x on the same GPU, NCCL.

    scripts/bench/gpu.py [--steps 100] [--rounds 5] [--nproc 1]
                         [--min-mib 1] [--max-mib 1024] [--iters 20]

Both sides are PyTorch 2.x with CUDA: build-torch2/ (DDPRUN_TORCH2_BUILD_DIR, scripts/build.sh
--torch2) and the python of the virtual environment that scripts/torch2-env.sh names. Every run
is --nproc ranks (default 1, one GPU each) under build-torch2's ddprun. Without a GPU the script
prints "no GPU: not measured" under each table's title and exits 0.

1. DDP overhead over no gradient sync: worker/bench/bench_ddp.cpp and ddp_python_worker.py (beside
   this script) with --device cuda (ddp.py's models mlp and many_small, batch 64, each step ends
   with a device synchronize). The C++ side gets a real NCCL process group at world size 1
   (--solo-when-alone false), as PyTorch always has one. Overhead: DDP step / no-sync step - 1,
   the median of the rounds' ratios. The target for the C++ side is below 3 %.
2. NCCL all-reduce of float32 device buffers, --min-mib to --max-mib MiB doubling:
   worker/bench/bench_allreduce.cpp (ddprun::all_reduce) against allreduce_python_worker.py
   (torch.distributed.all_reduce), a real NCCL process group at every world size. Time: mean of
   --iters all-reduces after 5 untimed, the device synchronized around them; the median over
   rounds. Bandwidth: bus bandwidth 2(n-1)/n * size / time for n ranks, as nccl-tests reports
   it; at n = 1 that factor is 0, so the table gives algorithm bandwidth, size / time, instead
   and says so.

Rounds alternate the C++ and Python runs, as in ddp.py, because a machine's speed drifts
between runs.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

from benchlib import BENCH_DIR, torch_pair

MODELS = ("mlp", "many_small")
NO_GPU = "no GPU: not measured"


def launch(build, nproc, program):
    """Runs `program` on `nproc` ranks under ddprun; returns rank 0's stdout."""
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    args = [os.path.join(build, "launcher", "ddprun"), f"--nproc_per_node={nproc}"] + program
    p = subprocess.run(args, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"bench/gpu.py: {' '.join(args)} failed ({p.returncode}):\n{p.stdout}{p.stderr}")
    return p.stdout


def step_ms(build, python, nproc, lang, mode, model, steps):
    program = [os.path.join(build, "worker", "bench_ddp"), "--solo-when-alone", "false"] \
        if lang == "cpp" else [python, os.path.join(BENCH_DIR, "ddp_python_worker.py")]
    out = launch(build, nproc, program + ["--device", "cuda", "--mode", mode, "--model", model,
                                          "--steps", str(steps)])
    m = re.search(r"median_ms=([0-9.]+)", out)
    if not m:
        sys.exit(f"bench/gpu.py: no step time in:\n{out}")
    return float(m.group(1))


def ddp_overhead(build, python, args):
    print(f"\n1. DDP step time over no gradient sync, world size {args.nproc}, NCCL, ms per step "
          f"(median of {args.rounds} rounds of {args.steps} steps)")
    if args.gpus == 0:
        print(NO_GPU)
        return
    ms = {}
    for r in range(args.rounds):
        for model in MODELS:
            for lang in ("cpp", "py"):
                for mode in ("ddp", "nosync"):
                    ms.setdefault((model, lang, mode), []).append(
                        step_ms(build, python, args.nproc, lang, mode, model, args.steps))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    print(f"{'model':12} {'C++ DDP':>8} {'no sync':>8} {'overhead':>9} {'Py DDP':>8} "
          f"{'no sync':>8} {'overhead':>9}")
    for model in MODELS:
        cells = []
        for lang in ("cpp", "py"):
            ddp, nosync = ms[model, lang, "ddp"], ms[model, lang, "nosync"]
            overhead = statistics.median(d / n - 1 for d, n in zip(ddp, nosync))
            cells.append(f"{statistics.median(ddp):8.3f} {statistics.median(nosync):8.3f} "
                         f"{overhead * 100:8.1f}%")
        print(f"{model:12} {' '.join(cells)}")
    print("(overhead: median of the rounds' DDP / no-sync - 1; target for C++: below 3 %)")


def allreduce_us(build, program, args):
    out = launch(build, args.nproc, program + ["--min-mib", str(args.min_mib), "--max-mib",
                                               str(args.max_mib), "--iters", str(args.iters)])
    times = {int(b): float(t) for b, t in re.findall(r"allreduce bytes=(\d+) .*time_us=([0-9.]+)",
                                                      out)}
    if not times:
        sys.exit(f"bench/gpu.py: no all-reduce times in:\n{out}")
    return times


def allreduce_bandwidth(build, python, args):
    n = args.nproc
    kind = "bus bandwidth 2(n-1)/n*size/time" if n > 1 else \
        "algorithm bandwidth size/time (bus bandwidth is 0 at world size 1)"
    print(f"\n2. NCCL all-reduce of float32 device buffers, world size {n}: time (us, median of "
          f"{args.rounds} rounds of the mean of {args.iters}) and {kind}, GB/s")
    if args.gpus == 0:
        print(NO_GPU)
        return
    cpp = [os.path.join(build, "worker", "bench_allreduce")]
    py = [python, os.path.join(BENCH_DIR, "allreduce_python_worker.py")]
    runs = {"cpp": [], "py": []}
    for r in range(args.rounds):
        runs["cpp"].append(allreduce_us(build, cpp, args))
        runs["py"].append(allreduce_us(build, py, args))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    factor = 2 * (n - 1) / n if n > 1 else 1.0
    print(f"{'size':>9} {'C++ us':>10} {'C++ GB/s':>9} {'Py us':>10} {'Py GB/s':>9} "
          f"{'C++/Py time':>12}")
    for size in sorted(runs["cpp"][0]):
        t = {lang: statistics.median(run[size] for run in runs[lang]) for lang in runs}
        gbs = {lang: factor * size / (t[lang] * 1e-6) / 1e9 for lang in t}
        print(f"{size >> 20:>5} MiB {t['cpp']:10.1f} {gbs['cpp']:9.1f} {t['py']:10.1f} "
              f"{gbs['py']:9.1f} {t['cpp'] / t['py']:12.2f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=100, help="timed DDP steps per run")
    ap.add_argument("--rounds", type=int, default=5, help="runs of every configuration")
    ap.add_argument("--nproc", type=int, default=1, help="ranks, one GPU each")
    ap.add_argument("--min-mib", type=int, default=1, help="smallest all-reduce buffer (MiB)")
    ap.add_argument("--max-mib", type=int, default=1024, help="largest all-reduce buffer (MiB)")
    ap.add_argument("--iters", type=int, default=20, help="timed all-reduces per size and run")
    args = ap.parse_args()
    build, python = torch_pair("2")
    probe = subprocess.run([python, "-c", "import torch; print(torch.__version__, "
                            "torch.cuda.device_count(), torch.version.cuda)"],
                           check=True, capture_output=True, text=True).stdout.split()
    version, args.gpus, cuda = probe[0], int(probe[1]), probe[2]
    print(f"torch {version} (CUDA {cuda}, python {python}) against libtorch of {build}; "
          f"{args.gpus} GPUs visible")
    if args.gpus:
        for program in ("bench_ddp", "bench_allreduce"):
            if not os.access(os.path.join(build, "worker", program), os.X_OK):
                sys.exit(f"bench/gpu.py: no {build}/worker/{program}; scripts/build.sh --torch2")
        if args.nproc > args.gpus:
            sys.exit(f"bench/gpu.py: --nproc {args.nproc} needs {args.nproc} GPUs; {args.gpus} visible")
        name = subprocess.run([python, "-c", "import torch; print(torch.cuda.get_device_name())"],
                              check=True, capture_output=True, text=True).stdout.strip()
        print(f"GPU: {name}")
    ddp_overhead(build, python, args)
    allreduce_bandwidth(build, python, args)


if __name__ == "__main__":
    main()
