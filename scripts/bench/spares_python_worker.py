#!/usr/bin/python3
"""A torch.distributed worker for scripts/bench/spares.py's torchrun rows: stamps the wall-clock
time its script starts in DIR/start.<restart>.<rank> (the C worker's format, benchlib.C_WORKER),
joins a gloo process group (then stamps DIR/ready.<restart>.<rank>) and all-reduces one number
every 50 ms, so that a peer's loss ends
it (the all-reduce raises: exit 1) and its launcher's restart policy takes over.

  spares_python_worker.py DIR
"""
import os
import sys
import time

with open(os.path.join(sys.argv[1], f"start.{os.environ['TORCHELASTIC_RESTART_COUNT']}.{os.environ['RANK']}"), "w") as f:
    f.write(f"{time.time():.9f}\n")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

dist.init_process_group("gloo")
value = torch.zeros(1)
dist.all_reduce(value)
with open(os.path.join(sys.argv[1], f"ready.{os.environ['TORCHELASTIC_RESTART_COUNT']}.{os.environ['RANK']}"), "w") as f:
    f.write(f"{time.time():.9f}\n")
while True:
    dist.all_reduce(value)
    time.sleep(0.05)
