"""One rank of warm_restart.py: a tutorial-shaped gloo DDP script that stamps the wall-clock time
(seconds since the epoch) at its first line in DIR/start.<restart>.<rank>, past init_process_group
in DIR/init.<restart>.<rank> and past its first DDP step in DIR/step.<restart>.<rank>. In the
first attempt it then waits to be killed (the driver SIGKILLs rank 1 and the launcher stops the
other); in the second it exits 0, as in the first with WARM_BENCH_ONCE=1 (warm_first_start.py)."""
import os
import sys
import time


def stamp(what):
    path = os.path.join(sys.argv[1], f"{what}.{os.environ['TORCHELASTIC_RESTART_COUNT']}.{os.environ['RANK']}")
    with open(path + ".tmp", "w") as f:
        f.write(repr(time.time()))
    os.rename(path + ".tmp", path)  # whole when it appears


stamp("start")  # before the imports: what a warm interpreter takes off comes after this

# warm_restart.py --compile: the model goes through torch.compile, its kernels cached in a folder
# of the run's (kept: one for every attempt) or of this attempt's (per-round: none outlives it).
COMPILE = os.environ.get("WARM_BENCH_COMPILE")
if COMPILE:
    folder = "inductor" + ("" if COMPILE == "kept" else "." + os.environ["TORCHELASTIC_RESTART_COUNT"])
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(sys.argv[1], folder)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

dist.init_process_group("gloo")
stamp("init")
model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)))
if COMPILE:
    model = torch.compile(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
loss = model(torch.randn(16, 32)).pow(2).mean()
loss.backward()
optimizer.step()
stamp("step")
if os.environ["TORCHELASTIC_RESTART_COUNT"] == "0" and not os.environ.get("WARM_BENCH_ONCE"):
    path = os.path.join(sys.argv[1], f"pid.{os.environ['RANK']}")
    with open(path + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.rename(path + ".tmp", path)  # whole when it appears
    while True:
        time.sleep(60)
dist.destroy_process_group()
