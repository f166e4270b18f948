# A Python worker for tests/worker/progress_test.sh: what a program sees of its interpreter.
#   progress_probe.py probe OUT [EXIT]  writes OUT/probe.json: sys.argv, __main__'s file, sys.path,
#       PYTHONPATH, the sitecustomize that ran, ddprun's module (loaded? whose?), the same from
#       DataLoader workers started by fork and by spawn, the losses of three steps of a DDP model
#       (one rank, gloo) compiled by torch.compile (2.x) or not (1.13), then one backward under
#       no_sync(), and the optimizer steps and DDP backward passes ddprun's module counted; then
#       exits with EXIT (or raises, "raise")
#   progress_probe.py train OUT        DDP on gloo, a 200 ms step; rank 1 blocks before the
#       forward of step 5 while rank 0 waits in the all-reduce of that step's backward. No
#       heartbeat code: its progress is what ddprun's module counts.
#   progress_probe.py collective OUT   all_reduce only (no model, no optimizer), every 200 ms;
#       rank 1 blocks before the all_reduce of step 3 while rank 0 waits in it.
#   progress_probe.py steady OUT       DDP on gloo, a 50 ms step, until stopped (a signal: ending
#       on its own, PyTorch 2.11's gloo sometimes aborts a rank in its shutdown, with or without
#       ddprun's module).
import json
import os
import sys
import tempfile
import time

import torch


def seen():
    module = sys.modules.get("_ddprun_progress")
    site = sys.modules.get("sitecustomize")
    return {
        "pid": os.getpid(),
        "progress_module": module is not None,
        "progress_owner": getattr(module, "_owner", None) == os.getpid() if module else False,
        "PYTHONPATH": os.environ.get("PYTHONPATH"),
        "sitecustomize": getattr(site, "__file__", None),
        "user_sitecustomize_ran": getattr(site, "USER_SITECUSTOMIZE", False),
    }


class Seen(torch.utils.data.Dataset):
    def __len__(self):
        return 2

    def __getitem__(self, i):
        return json.dumps(seen())


def compiled_steps():
    """Three steps of a one-rank DDP model, through torch.compile where PyTorch has it (dynamo
    traces the model's forward hooks, ddprun's among them): the losses. Alone (no MASTER_PORT),
    the process group meets in a FileStore: a free port picked here could be taken by another
    program before TCPStore binds it."""
    if "MASTER_PORT" in os.environ:
        torch.distributed.init_process_group("gloo")
    else:
        with tempfile.TemporaryDirectory() as folder:
            store = torch.distributed.FileStore(os.path.join(folder, "store"), 1)
            torch.distributed.init_process_group("gloo", store=store, rank=0, world_size=1)
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    run = torch.compile(model, backend="eager") if hasattr(torch, "compile") else model
    losses = []
    for _ in range(3):
        optimizer.zero_grad()
        loss = run(torch.ones(2, 4)).square().sum()
        loss.backward()
        optimizer.step()
        losses.append(round(loss.item(), 6))
    with model.no_sync():  # a backward that does not synchronise: no collective
        run(torch.ones(2, 4)).sum().backward()
    torch.distributed.destroy_process_group()
    return losses


def probe(out, exit_code="0"):
    report = seen()
    report.update(argv=sys.argv[1:], main=os.path.abspath(sys.modules["__main__"].__file__), sys_path=sys.path)
    for method in ("fork", "spawn"):
        loader = torch.utils.data.DataLoader(Seen(), num_workers=1, multiprocessing_context=method, batch_size=None)
        report["loader_" + method] = [json.loads(item) for item in loader]
    # (Not before raising: torch.distributed 2.x then prefixes the traceback with the rank, which
    # the traceback comparison of progress_test.sh does not expect.)
    report["compiled_losses"] = compiled_steps() if exit_code != "raise" else None
    module = sys.modules.get("_ddprun_progress")
    report["steps_counted"] = getattr(module, "_steps", None)
    report["backward_counted"] = [module._collectives, module._op] if module else None
    with open(os.path.join(out, "probe.json"), "w") as f:
        json.dump(report, f)
    if exit_code == "raise":
        raise ValueError("the probe's own error")
    sys.exit(int(exit_code))


def stuck_before_forward():
    while True:
        time.sleep(3600)


def train(out):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(1000):
        if rank == 1 and step == 5:
            stuck_before_forward()
        optimizer.zero_grad()
        model(torch.randn(4, 8)).sum().backward()
        optimizer.step()
        with open(os.path.join(out, "step.%d" % rank), "w") as f:
            f.write(repr(time.time()))
        time.sleep(0.2)


def stuck_before_all_reduce():
    while True:
        time.sleep(3600)


def collective(out):
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    for step in range(1000):
        if rank == 1 and step == 3:
            stuck_before_all_reduce()
        with open(os.path.join(out, "step.%d" % rank), "w") as f:
            f.write(repr(time.time()))
        dist.all_reduce(torch.ones(4))
        time.sleep(0.2)


def steady(out):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo")
    model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    while True:
        optimizer.zero_grad()
        model(torch.randn(4, 8)).sum().backward()
        optimizer.step()
        time.sleep(0.05)


if __name__ == "__main__":
    {"probe": probe, "train": train, "collective": collective, "steady": steady}[sys.argv[1]](*sys.argv[2:])
