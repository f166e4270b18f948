# One rank of PyTorch's own DDP with powerSGD_hook, for tests/worker/powersgd_test.sh: the model,
# weights, batches and buckets of powersgd_driver.cpp, built from the same formulas by the same
# libtorch kernels.
#   python powersgd_reference.py OUT CONFIG STEPS      (under ddprun, gloo)
# CONFIG: comma-separated key=value (see powersgd_driver.cpp). Writes OUT/params.<rank> (%.9g,
# one a line), OUT/stats.<rank> (state.iter and the compression statistics) and OUT/log.<rank>
# (the "Compression stats" lines the hook logged).
import logging
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powerSGD
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_formulas import init_weights, step, write_values  # noqa: E402

out, config, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
c = dict(item.split("=") for item in config.split(","))
dist.init_process_group("gloo")
r = dist.get_rank()

stats_lines = []


class Collect(logging.Handler):
    def emit(self, record):
        message = record.getMessage()
        if message.startswith("Compression stats"):
            stats_lines.append(message)


logger = logging.getLogger(powerSGD.__name__)
logger.setLevel(logging.INFO)
logger.addHandler(Collect())
logger.propagate = False

net = torch.nn.Sequential(
    torch.nn.Linear(10, 12), torch.nn.Tanh(),
    torch.nn.Linear(12, 12), torch.nn.Tanh(),
    torch.nn.Linear(12, 12), torch.nn.Tanh(),
    torch.nn.Linear(12, 2))
init_weights(net)
# cap: every bucket's cap in bytes, the first one's included (PyTorch 1.13 takes the first from
# _DEFAULT_FIRST_BUCKET_BYTES, 2.x from bucket_cap_mb when that is given).
cap = int(c["cap"])
if cap > 0:
    dist._DEFAULT_FIRST_BUCKET_BYTES = cap
    ddp = DistributedDataParallel(net, bucket_cap_mb=cap / 1048576)
else:
    ddp = DistributedDataParallel(net)
state = powerSGD.PowerSGDState(
    process_group=None,
    matrix_approximation_rank=int(c["rank"]),
    start_powerSGD_iter=int(c["start"]),
    min_compression_rate=float(c["rate"]),
    use_error_feedback=c["ef"] == "1",
    warm_start=c["warm"] == "1",
    orthogonalization_epsilon=float(c["eps"]),
    random_seed=int(c["seed"]),
    compression_stats_logging_frequency=int(c["freq"]),
    batch_tensors_with_same_shape=c["batch"] == "1",
)


def hook_in_order(state, bucket):
    # PyTorch's hook chains its all-reduces through future callbacks, so with several buckets the
    # ranks may start them in different orders (a hang on gloo, seen with 1.13 and 2.11);
    # finishing each bucket's chain before the next bucket's hook keeps one order. The
    # operations on the tensors are the same.
    fut = powerSGD.powerSGD_hook(state, bucket)
    fut.wait()
    return fut


ddp.register_comm_hook(state, hook_in_order if c["cap"] != "0" else powerSGD.powerSGD_hook)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
for s in range(steps):
    step(ddp, opt, r, s, 10, 2)
write_values(f"{out}/params.{r}", net.parameters())
_, before, after = state.compression_stats()
with open(f"{out}/stats.{r}", "w") as f:
    f.write(f"iter {state.iter}\nbefore {before}\nafter {after}\n")
with open(f"{out}/log.{r}", "w") as f:
    f.writelines(line + "\n" for line in stats_lines)
dist.barrier()
# As hooks_reference.py: Debian's torch 1.13 with a Python comm hook sometimes aborts in
# interpreter teardown; the results are written.
sys.stdout.flush()
os._exit(0)
