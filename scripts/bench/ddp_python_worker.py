#!/usr/bin/python3
"""PyTorch's Python DDP on the models of worker/bench/bench_ddp.cpp, for scripts/bench/ddp.py
(CPU, gloo) and scripts/bench/gpu.py (--device cuda, NCCL).

Same models (--model mlp: 4 Linear layers of 1024 with ReLU between; many_small: 200 Linear
layers of 64 with ReLU between), batch 64 per rank, MSE loss, SGD(0.01), one intra-op and one
inter-op thread, denormals flushed; run under ddprun (or torchrun) like the C++ one. Rank 0 prints
"threads intra_op=<n> inter_op=<n> openmp=<n> mkl=<n|none> openblas=<n|none>" (what this process
really uses), then "<mode> world=<W> steps=<n> median_ms=<m> mean_ms=<a> cpu_ms=<c>" (c: CPU
time of all the process's threads per step).
"""
import argparse
import ctypes
import os
import re
import statistics
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

# (width, Linear layers) of each model; ReLU between the layers.
MODELS = {"mlp": (1024, 4), "many_small": (64, 200)}
BATCH = 64


def openblas_threads():
    """OpenBLAS's own thread count, if this process loaded OpenBLAS (Debian's 1.13 does)."""
    with open("/proc/self/maps") as f:
        paths = {line.split()[-1] for line in f if "libopenblas" in line}
    for path in sorted(paths):
        try:
            return str(ctypes.CDLL(path).openblas_get_num_threads())
        except (OSError, AttributeError):
            continue
    return "none"


def thread_line():
    """The thread counts this process runs with, in the C++ program's format."""
    info = torch.__config__.parallel_info()

    def reported(name):
        m = re.search(rf"{name}\(\) : (\d+)", info)
        return m.group(1) if m else "none"

    return (f"threads intra_op={torch.get_num_threads()} "
            f"inter_op={torch.get_num_interop_threads()} openmp={reported('omp_get_max_threads')} "
            f"mkl={reported('mkl_get_max_threads')} openblas={openblas_threads()}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["ddp", "nosync", "single"], default="ddp")
    ap.add_argument("--model", choices=list(MODELS), default="mlp")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="cuda: the GPU LOCAL_RANK, NCCL (default: cpu, gloo)")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--gradient-as-bucket-view", choices=["true", "false"], default="false",
                    help="DDP's gradient_as_bucket_view (PyTorch's default: false)")
    args = ap.parse_args()
    # Debian's 1.13 does not pass this on to OpenBLAS, which keeps a thread per core unless
    # OPENBLAS_NUM_THREADS=1 (bench/ddp.py sets it); the thread line shows what took effect.
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    # 200 layers shrink the gradients of the first ones into denormals, whose arithmetic is slow
    # on x86 and would be timed instead of DDP; both sides flush them (no measurable change on mlp).
    torch.set_flush_denormal(True)
    cuda = args.device == "cuda"
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    launched = "WORLD_SIZE" in os.environ
    if launched:
        dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank() if launched else 0
    world = dist.get_world_size() if launched else 1
    torch.manual_seed(0)
    width, layers = MODELS[args.model]
    modules = []
    for i in range(layers):
        if i > 0:
            modules.append(torch.nn.ReLU())
        modules.append(torch.nn.Linear(width, width))
    net = torch.nn.Sequential(*modules).to(device)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    model = net
    if args.mode == "ddp":
        model = DDP(net, device_ids=[local_rank] if cuda else None,
                    gradient_as_bucket_view=args.gradient_as_bucket_view == "true")
    torch.manual_seed(1 + rank)
    x = torch.randn(BATCH, width).to(device)
    y = torch.randn(BATCH, width).to(device)

    def step():
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        if cuda:
            torch.cuda.synchronize()

    for _ in range(args.warmup):
        step()
    if launched:
        dist.barrier()
    ms = []
    cpu0 = time.process_time()
    for _ in range(args.steps):
        t0 = time.perf_counter()
        step()
        ms.append((time.perf_counter() - t0) * 1e3)
    cpu_ms = (time.process_time() - cpu0) * 1e3 / args.steps
    if launched:
        dist.barrier()
    if rank == 0:
        print(thread_line(), flush=True)
        print(f"{args.mode} world={world} steps={args.steps} median_ms={statistics.median(ms):.3f} "
              f"mean_ms={statistics.fmean(ms):.3f} cpu_ms={cpu_ms:.3f}", flush=True)
    if launched:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
