"""A DDP training loop (gloo, CPU) whose rank 0 saves a checkpoint every SAVE_EVERY steps with
torch.save to a temporary name and os.replace, and which resumes from the newest one at start.
The only change for ddprun: the folder is DDPRUN_SNAPSHOT_DIR.
Usage: torch_save.py STEPS SAVE_EVERY"""
import glob
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import probe  # noqa: E402


def main():
    steps, save_every = int(sys.argv[1]), int(sys.argv[2])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    net = probe.network()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)

    folder = os.environ["DDPRUN_SNAPSHOT_DIR"]
    start = 0
    checkpoints = sorted(glob.glob(os.path.join(folder, "checkpoint_*.pt")))
    if checkpoints:
        state = torch.load(checkpoints[-1], map_location="cpu")
        net.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["step"]
    probe.resumed(start, net, file=os.path.basename(checkpoints[-1]) if checkpoints else None)
    model = DDP(net)

    for step in range(start + 1, steps + 1):
        probe.train_step(model, optimizer, step, rank)
        if rank == 0 and step % save_every == 0:
            path = os.path.join(folder, f"checkpoint_{step:06d}.pt")
            torch.save({"model": net.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, path + ".tmp")
            os.replace(path + ".tmp", path)
        probe.step_done(step, net)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
