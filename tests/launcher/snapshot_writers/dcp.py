"""A DDP training loop (gloo, CPU) that saves with torch.distributed.checkpoint every SAVE_EVERY
steps, one folder per save (every rank writes its shard; rank 0 writes .metadata last), and
resumes at start from the newest folder that has its .metadata. The only change for ddprun: the
folders are in DDPRUN_SNAPSHOT_DIR.
Usage: dcp.py STEPS SAVE_EVERY"""
import gc
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import probe  # noqa: E402


def newest_complete(folder):
    """The newest step_<n> folder whose save finished (DCP writes .metadata last), or None."""
    steps = [int(name[5:]) for name in os.listdir(folder)
             if name.startswith("step_") and os.path.exists(os.path.join(folder, name, ".metadata"))]
    return max(steps, default=None)


def main():
    steps, save_every = int(sys.argv[1]), int(sys.argv[2])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    net = probe.network()
    model = DDP(net)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)

    folder = os.environ["DDPRUN_SNAPSHOT_DIR"]
    start = 0
    last = newest_complete(folder)
    if last is not None:
        model_state, optimizer_state = get_state_dict(model, optimizer)
        state = {"model": model_state, "optimizer": optimizer_state, "step": 0}
        dcp.load(state, storage_reader=FileSystemReader(os.path.join(folder, f"step_{last}")))
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
        start = state["step"]
    probe.resumed(start, net, folder=f"step_{last}" if last is not None else None)

    for step in range(start + 1, steps + 1):
        probe.train_step(model, optimizer, step, rank)
        if step % save_every == 0:
            model_state, optimizer_state = get_state_dict(model, optimizer)
            dcp.save({"model": model_state, "optimizer": optimizer_state, "step": step},
                     storage_writer=FileSystemWriter(os.path.join(folder, f"step_{step}")))
        probe.step_done(step, net)
    # DDP's reducer must not be what drops the last reference to the gloo process group: its
    # destructor, run with the GIL held, waits for gloo's threads, one of which may need the GIL to
    # free the tensors of DCP's last broadcast (pytorch/pytorch#56297; 1 exit in 5 hung on torch
    # 2.11). So the model goes first, and destroy_process_group() drops the group without the GIL.
    del model
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
