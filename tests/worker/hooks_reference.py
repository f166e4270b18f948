# One rank of PyTorch's own DDP with a communication hook, for tests/worker/hooks_test.sh: the
# model, weights and batches of `rank_driver hooks`, built from the same formulas by the same
# libtorch kernels. Writes OUT/params.<rank> in rank_driver's format (%.9g, one a line).
#   python hooks_reference.py OUT HOOK STEPS      (under ddprun, gloo)
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

out, hook, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
dist.init_process_group("gloo")
r = dist.get_rank()
net = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))
with torch.no_grad():
    for k, p in enumerate(net.parameters()):
        p.copy_((torch.sin(torch.arange(p.numel(), dtype=torch.float32) * 0.7 + k) * 0.5).reshape(p.shape))
ddp = DistributedDataParallel(net)
hooks = {
    "allreduce": default_hooks.allreduce_hook,
    "fp16": default_hooks.fp16_compress_hook,
    "bf16": default_hooks.bf16_compress_hook,
    "fp16_wrapper": default_hooks.fp16_compress_wrapper(default_hooks.allreduce_hook),
    "bf16_wrapper": default_hooks.bf16_compress_wrapper(default_hooks.allreduce_hook),
}
if hook != "none":
    ddp.register_comm_hook(None, hooks[hook])
opt = torch.optim.SGD(net.parameters(), lr=0.1)
for s in range(steps):
    x = torch.cos(torch.arange(24, dtype=torch.float32) * 0.37 + (r * 1.3 + s * 0.11)).reshape(4, 6)
    y = torch.sin(torch.arange(12, dtype=torch.float32) * 0.21 + (r * 0.9 + s * 0.05)).reshape(4, 3)
    opt.zero_grad()
    torch.nn.functional.mse_loss(ddp(x), y).backward()
    opt.step()
with open(f"{out}/params.{r}", "w") as f:
    for p in net.parameters():
        for v in p.detach().flatten().tolist():
            f.write(f"{v:.9g}\n")
dist.barrier()
# Debian's torch 1.13 with a Python comm hook aborts in interpreter teardown now and then
# ("terminate called without an active exception", 3 runs in 5): leave without it, the
# parameters are written.
sys.stdout.flush()
os._exit(0)
