# One rank of PyTorch's own DDP for tests/worker/join_test.sh: the models, weights and batches of
# join_driver.cpp, built from the same formulas, run by the same libtorch kernels. Writes
# OUT/params.<rank> in join_driver's format (parameters, then buffers; %.9g, one a line).
#   python join_reference.py uneven OUT STEPS0 STEPS1 initial|active [fp16|bf16|powersgd|static]
#                                                  (Join[, a hook, or static_graph])
#   python join_reference.py throw OUT STEPS0 STEPS1                   (Join, throw_on_early_termination)
#   python join_reference.py static OUT STEPS                          (static_graph)
import os
import sys

import torch
import torch.distributed as dist
import torch.utils.checkpoint
from torch.distributed.algorithms.join import Join
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_formulas import init_weights, step, write_values  # noqa: E402

mode, out = sys.argv[1], sys.argv[2]
dist.init_process_group("gloo")
r = dist.get_rank()


def write_state(net):
    write_values(f"{out}/params.{r}", list(net.parameters()) + list(net.buffers()))


class StaticNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(6, 5)
        self.s = torch.nn.Linear(5, 5)
        self.unused = torch.nn.Linear(5, 5)
        self.head = torch.nn.Linear(5, 3)

    def tail(self, h):
        return self.head(torch.tanh(self.s(h)))

    def forward(self, x):
        h = torch.tanh(self.s(torch.tanh(self.a(x))))
        return torch.utils.checkpoint.checkpoint(self.tail, h, use_reentrant=True)


if mode in ("uneven", "throw"):
    steps = int(sys.argv[3 + r])
    net = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.BatchNorm1d(5), torch.nn.Tanh(), torch.nn.Linear(5, 3))
    init_weights(net)
    option = sys.argv[6] if len(sys.argv) > 6 else ""
    ddp = DistributedDataParallel(net, static_graph=option == "static")
    if option == "powersgd":
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd
        state = powersgd.PowerSGDState(process_group=None, matrix_approximation_rank=1, start_powerSGD_iter=2)
        ddp.register_comm_hook(state, powersgd.powerSGD_hook)
    if option in ("fp16", "bf16"):
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        ddp.register_comm_hook(None, {"fp16": default_hooks.fp16_compress_hook,
                                      "bf16": default_hooks.bf16_compress_hook}[option])
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    throw = mode == "throw"
    divide = sys.argv[5] == "initial" if not throw else True
    where = "finish"
    try:
        with Join([ddp], divide_by_initial_world_size=divide, throw_on_early_termination=throw):
            for s in range(steps):
                where = f"step {s}"
                step(ddp, opt, r, s, 6, 3)
            where = "finish"
        if throw:
            with open(f"{out}/thrown.{r}", "w") as f:
                f.write("no exception\n")
    except RuntimeError as e:
        if not throw:
            raise
        with open(f"{out}/thrown.{r}", "w") as f:
            f.write(f"{where}\n{e}\n")
    write_state(net)
elif mode == "static":
    steps = int(sys.argv[3])
    net = StaticNet()
    init_weights(net)
    try:
        ddp = DistributedDataParallel(net, static_graph=True)
    except TypeError:  # before static_graph= (it is there in 1.13, but kept for older builds)
        ddp = DistributedDataParallel(net)
        ddp._set_static_graph()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for s in range(steps):
        step(ddp, opt, r, s, 6, 3)
    assert net.unused.weight.grad is None, "the parameter no rank used has a gradient"
    write_state(net)
else:
    sys.exit(f"unknown mode {mode}")
dist.barrier()
sys.stdout.flush()
os._exit(0)
