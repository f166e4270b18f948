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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_formulas import init_weights, step, write_values  # noqa: E402

out, hook, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
dist.init_process_group("gloo")
r = dist.get_rank()
net = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))
init_weights(net)
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
    step(ddp, opt, r, s, 6, 3)
write_values(f"{out}/params.{r}", net.parameters())
dist.barrier()
# Debian's torch 1.13 with a Python comm hook aborts in interpreter teardown now and then
# ("terminate called without an active exception", 3 runs in 5): leave without it, the
# parameters are written.
sys.stdout.flush()
os._exit(0)
