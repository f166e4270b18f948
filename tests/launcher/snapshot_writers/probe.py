"""What the test adds to each writer's script, apart from the checkpoint code (which is the
writer's own, with DDPRUN_SNAPSHOT_DIR as its folder): a RESULT line per finished step with a digest
of the parameters, the line saying where a run resumed, and the faults; and the model, data and
step of the plain DDP loops (torch_save.py, dcp.py), which differ only in how they save.

SNAPSHOT_WRITERS_KILL="RANK:STEP": on the first attempt (TORCHELASTIC_RESTART_COUNT=0), rank RANK
SIGKILLs itself once step STEP is done (its optimizer step taken, and any checkpoint of that step
saved). A worker's failure (tests/launcher/snapshot_writers_test.sh).

SNAPSHOT_WRITERS_PAUSE="STEP:FILE": every rank, once step STEP is done, unless FILE exists, says
so (paused_after_step=STEP and its pid) and sleeps until it is stopped: the test kills a node while
the job stands at a known step, and makes FILE first so that the next round goes on past STEP. A
node's loss (tests/elastic/snapshot_writers_nodes_test.sh).

Neither set, the run is the uninterrupted reference."""
import hashlib
import os
import signal
import time

import torch
import torch.nn.functional as F


def checksum(module):
    """A digest of the exact bytes of every parameter and buffer."""
    h = hashlib.sha256()
    for name, value in sorted(module.state_dict().items()):
        h.update(name.encode())
        h.update(value.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def result(**fields):
    rank = os.environ.get("RANK", "?")
    print("RESULT rank=" + rank + " " + " ".join(f"{k}={v}" for k, v in fields.items()), flush=True)


def resumed(step, module, **fields):
    """Where this attempt starts: step 0 when no checkpoint was found."""
    result(attempt=os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"), resumed_at=step, checksum=checksum(module), **fields)


def step_done(step, module):
    result(step=step, checksum=checksum(module))
    kill = os.environ.get("SNAPSHOT_WRITERS_KILL")
    if kill and os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0":
        rank, at = kill.split(":")
        if os.environ["RANK"] == rank and step == int(at):
            result(killed_after_step=step)
            os.kill(os.getpid(), signal.SIGKILL)
    pause = os.environ.get("SNAPSHOT_WRITERS_PAUSE")
    if pause:
        at, until = pause.split(":", 1)
        if step == int(at) and not os.path.exists(until):
            result(paused_after_step=step, pid=os.getpid())
            while True:
                time.sleep(0.05)


# The plain DDP loops' model, data and step.

def network():
    """The model, the same in every run."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def batch(step, rank):
    """The data of one step on one rank: the same in every run."""
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(16, 8, generator=g)
    return x, x.sum(1, keepdim=True) + 0.1 * torch.randn(16, 1, generator=g)


def train_step(model, optimizer, step, rank):
    """One step of MODEL (DDP) on this rank's batch of STEP."""
    x, y = batch(step, rank)
    optimizer.zero_grad()
    F.mse_loss(model(x), y).backward()
    optimizer.step()
