"""One rank of scripts/bench/progress.py, under ddprun with --progress=on: a tight DDP training
loop (gloo, one thread) timed in blocks of STEPS steps, alternately with what ddprun's module
added (the DDP model's forward hook; the wrapped torch.autograd.backward, which records DDP's
backward as a collective; the optimizer step hook on 2.x, the wrapped
Optimizer._optimizer_step_code on 1.13) and without it; the blocks alternate so that a drifting
machine affects both alike. Prints the median time per step of each kind and the median of the
differences of adjacent blocks, in microseconds.

  progress_python_worker.py LAYERS WIDTH BATCH STEPS BLOCKS
"""
import statistics
import sys
import time

import torch
import torch.distributed as dist

progress = sys.modules.get("_ddprun_progress")
if progress is None:
    raise SystemExit("run this under ddprun --progress=on (ddprun's module is not loaded)")
layers, width, batch, steps, blocks = (int(a) for a in sys.argv[1:6])
torch.set_num_threads(1)
torch.manual_seed(0)
dist.init_process_group("gloo")
model = torch.nn.parallel.DistributedDataParallel(
    torch.nn.Sequential(*[m for _ in range(layers) for m in (torch.nn.Linear(width, width), torch.nn.ReLU())]))
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(batch, width)
step_hook = getattr(sys.modules["torch.optim.optimizer"], "register_optimizer_step_post_hook", None)
step_code = torch.optim.Optimizer._optimizer_step_code if step_hook is None else None
backward = torch.autograd.backward
if not progress._handles and getattr(step_code, "__wrapped__", None) is None:
    raise SystemExit("ddprun's module registered nothing")
if getattr(backward, "__wrapped__", None) is None:
    raise SystemExit("ddprun's module did not wrap torch.autograd.backward")


def step():
    optimizer.zero_grad()
    model(x).sum().backward()
    optimizer.step()


def hooks(on):
    for handle in progress._handles:
        handle.remove()
    progress._handles.clear()
    if step_code is not None:
        torch.optim.Optimizer._optimizer_step_code = step_code if on else step_code.__wrapped__
    torch.autograd.backward = backward if on else backward.__wrapped__
    if on:
        progress._handles.append(model.register_forward_hook(progress._ddp_forward_done))
        if step_hook is not None:
            progress._handles.append(step_hook(progress._step))


for _ in range(20):
    step()
per_step = {True: [], False: []}
for block in range(2 * blocks):
    on = block % 2 == 0
    hooks(on)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    per_step[on].append((time.perf_counter() - start) / steps * 1e6)
# Each block with the hooks against the block without them right after it: the drift of a
# loaded machine between two adjacent blocks is smaller than between the medians of all.
diffs = [on - off for on, off in zip(per_step[True], per_step[False])]
print("off_us=%.3f on_us=%.3f diff_us=%.3f" % (statistics.median(per_step[False]), statistics.median(per_step[True]),
                                               statistics.median(diffs)))
