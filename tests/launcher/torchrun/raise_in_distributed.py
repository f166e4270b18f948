"""Rank 1 raises after init_process_group: PyTorch 2.x's excepthook prefixes its traceback with
[rank1]: itself (torch/distributed/distributed_c10d.py)."""
import os

import torch.distributed as dist

dist.init_process_group("gloo")
if dist.get_rank() == 1:
    raise RuntimeError("boom in distributed code")
