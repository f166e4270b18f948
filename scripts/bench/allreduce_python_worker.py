#!/usr/bin/python3
"""torch.distributed's NCCL all-reduce on device buffers, for scripts/bench/gpu.py: the loop of
worker/bench/bench_allreduce.cpp in Python, run under ddprun (or torchrun) like it.

For buffers of --min-mib to --max-mib MiB (doubling, float32 zeros on the GPU LOCAL_RANK) every
rank runs --warmup all-reduces, synchronizes the device, runs --iters all-reduces and
synchronizes again; rank 0 prints "allreduce bytes=<b> iters=<n> time_us=<t>", t the mean time
of one all-reduce. World size 1 is a real NCCL process group of one rank.
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--min-mib", type=int, default=1)
    ap.add_argument("--max-mib", type=int, default=1024)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit(f"bench/allreduce_python_worker.py: torch {torch.__version__} sees no GPU")
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    torch.cuda.set_device(device)
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    if rank == 0:
        print(f"backend=nccl world={dist.get_world_size()} device={device}", flush=True)
    mib = args.min_mib
    while mib <= args.max_mib:
        size = mib << 20
        buffer = torch.zeros(size // 4, dtype=torch.float32, device=device)
        for _ in range(args.warmup):
            dist.all_reduce(buffer)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(args.iters):
            dist.all_reduce(buffer)
        torch.cuda.synchronize()
        us = (time.perf_counter() - t0) * 1e6 / args.iters
        if rank == 0:
            print(f"allreduce bytes={size} iters={args.iters} time_us={us:.2f}", flush=True)
        del buffer
        mib *= 2
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
