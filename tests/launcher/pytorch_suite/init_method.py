#!/usr/bin/env python3
"""Stands for PyTorch's test/distributed/launcher/bin/test_script_init_method.py (written for
ddprun, not copied): joins a gloo process group with the --init-method given (tcp://HOST:PORT or
env://), RANK and WORLD_SIZE from the environment, all-reduces a one-hot tensor of its rank and
fails unless the sum is the world size; prints "Done". test_run.py asserts only that it runs."""
import os
import sys

import torch
import torch.distributed as dist

method = [a.split("=", 1)[1] for a in sys.argv[1:] if a.split("=", 1)[0] in ("--init-method", "--init_method")]
if len(method) != 1:
    sys.exit(f"init_method.py: expected one --init-method=URL, got {sys.argv[1:]}")
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("gloo", init_method=method[0], rank=rank, world_size=world)
t = torch.zeros(world, dtype=torch.int64)
t[dist.get_rank()] = 1
dist.all_reduce(t)
if int(t.sum()) != dist.get_world_size():
    sys.exit(f"init_method.py: all_reduce gave {t.tolist()}, expected {world} ones")
dist.destroy_process_group()
print("Done")
