#!/usr/bin/python3
"""PyTorch's Python DDP on the model of worker/bench/bench_ddp.cpp, for scripts/bench-ddp.py.

Same model (4 Linear layers of 1024 with ReLU), batch 64 per rank, MSE loss, SGD(0.01), one
thread; run under ddprun (or torchrun) like the C++ one. Rank 0 prints
"<mode> world=<W> steps=<n> median_ms=<m> mean_ms=<a> cpu_ms=<c>" (c: CPU time of all the
process's threads per step).
"""
import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["ddp", "nosync", "single"], default="ddp")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--gradient-as-bucket-view", choices=["true", "false"], default="false",
                    help="DDP's gradient_as_bucket_view (PyTorch's default: false)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    launched = "WORLD_SIZE" in os.environ
    if launched:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if launched else 0
    world = dist.get_world_size() if launched else 1
    torch.manual_seed(0)
    width, batch = 1024, 64
    net = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(),
                              torch.nn.Linear(width, width), torch.nn.ReLU(),
                              torch.nn.Linear(width, width), torch.nn.ReLU(),
                              torch.nn.Linear(width, width))
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    model = net
    if args.mode == "ddp":
        model = DDP(net, gradient_as_bucket_view=args.gradient_as_bucket_view == "true")
    torch.manual_seed(1 + rank)
    x = torch.randn(batch, width)
    y = torch.randn(batch, width)

    def step():
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()

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
        print(f"{args.mode} world={world} steps={args.steps} median_ms={statistics.median(ms):.3f} "
              f"mean_ms={statistics.fmean(ms):.3f} cpu_ms={cpu_ms:.3f}", flush=True)


if __name__ == "__main__":
    main()
