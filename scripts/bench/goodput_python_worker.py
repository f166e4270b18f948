"""One rank of goodput.py: a DDP training script as users write it (gloo, CPU). It resumes from the
latest checkpoint in DIR (DIR/ckpt-<step>.pt), trains a small MLP with Adam on synthetic batches,
and rank 0 saves a checkpoint every --save_every steps (written to a temporary name, then renamed:
a kill mid-save leaves the last one whole) and keeps the last two. Rank 0 appends "STEP TIME
RESTART" to DIR/steps after each step (TIME: time.monotonic(), the system's CLOCK_MONOTONIC, which
the driver reads too; RESTART: TORCHELASTIC_RESTART_COUNT), flushed, so that the driver knows the
steps without the launcher's output. It trains until it is stopped.

  torchrun --nproc_per_node=2 goodput_python_worker.py DIR [--save_every 50]   (or ddprun: a launcher sets its rank)
"""
import argparse
import glob
import os
import re
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

WIDTH = 512  # 4 layers, 0.8 M parameters: a step of about 25 ms with 2 ranks on 2 cores here
BATCH = 96


def checkpoints(d):
    """The checkpoints in `d`, oldest first, as (step, path)."""
    found = []
    for path in glob.glob(os.path.join(d, "ckpt-*.pt")):
        match = re.fullmatch(r"ckpt-(\d+)\.pt", os.path.basename(path))
        if match:
            found.append((int(match.group(1)), path))
    return sorted(found)


def save(d, step, model, optimizer):
    path = os.path.join(d, f"ckpt-{step}.pt")
    tmp = f"{path}.tmp.{os.getpid()}"
    torch.save({"step": step, "model": model.module.state_dict(), "optimizer": optimizer.state_dict()}, tmp)
    os.replace(tmp, path)
    for _, old in checkpoints(d)[:-2]:
        os.remove(old)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("dir")
    parser.add_argument("--save_every", type=int, default=50)
    args = parser.parse_args()
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    layers = []
    for _ in range(3):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()]
    net = torch.nn.Sequential(*layers, torch.nn.Linear(WIDTH, 10))
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
    step = 0
    saved = checkpoints(args.dir)
    if saved:
        state = torch.load(saved[-1][1], map_location="cpu")
        net.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = state["step"]
    model = DistributedDataParallel(net)
    steps = open(os.path.join(args.dir, "steps"), "a") if rank == 0 else None
    while True:
        step += 1
        data = torch.Generator().manual_seed(step * dist.get_world_size() + rank)
        x = torch.randn(BATCH, WIDTH, generator=data)
        y = torch.randint(0, 10, (BATCH,), generator=data)
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        if rank == 0:
            if step % args.save_every == 0:
                save(args.dir, step, model, optimizer)
            steps.write(f"{step} {time.monotonic():.6f} {restart}\n")
            steps.flush()


if __name__ == "__main__":
    main()
