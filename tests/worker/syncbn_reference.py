# What tests/worker/syncbn_test.sh expects of `syncbn_driver OUT STEPS sync`, computed by PyTorch
# in one process: the same model, weights and batches, with the two ranks' batches (3 and 5
# samples) concatenated into one and the loss averaged over the ranks' losses. That is what
# SyncBatchNorm under DDP is defined to compute: every BatchNorm sees the global batch, and
# DDP's gradient is the mean of the ranks' gradients. PyTorch's own torch.nn.SyncBatchNorm
# cannot be the reference: it runs on GPUs only (its kernels, torch.batch_norm_stats and the
# like, have no CPU implementation in 1.13 or 2.x), and these tests run on CPUs.
# Writes OUT/state (parameters then buffers, %.17g, one a line), OUT/eval and OUT/empty_peer.
#   python syncbn_reference.py OUT STEPS
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_formulas import init_weights, write_values  # noqa: E402

out, steps = sys.argv[1], int(sys.argv[2])
nn = torch.nn
net = nn.Sequential(
    nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU()),
    nn.Flatten(), nn.Linear(100, 6),
    nn.BatchNorm1d(6, affine=False, momentum=None), nn.Tanh(),
    nn.Linear(6, 3), nn.BatchNorm1d(3, momentum=0.3, track_running_stats=False))
net.double()
init_weights(net, torch.float64)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
world = 2
batch = [3 + 2 * r for r in range(world)]
for s in range(steps):
    xs, ys = [], []
    for r in range(world):
        xs.append(torch.cos(torch.arange(batch[r] * 75, dtype=torch.float64) * 0.37 + (r * 1.3 + s * 0.11))
                  .reshape(batch[r], 3, 5, 5))
        ys.append(torch.sin(torch.arange(batch[r] * 3, dtype=torch.float64) * 0.21 + (r * 0.9 + s * 0.05))
                  .reshape(batch[r], 3))
    opt.zero_grad()
    outs = torch.split(net(torch.cat(xs)), batch)
    loss = sum(nn.functional.mse_loss(o, y) for o, y in zip(outs, ys)) / world
    loss.backward()
    opt.step()


write_values(f"{out}/state", list(net.parameters()) + list(net.buffers()), digits=17)
net.eval()
with torch.no_grad():
    probe = torch.cos(torch.arange(150, dtype=torch.float64) * 0.5).reshape(2, 3, 5, 5)
    write_values(f"{out}/eval", [net(probe)], digits=17)
    # Training mode on rank 0's batch alone: the driver's rank 1 brings an empty one.
    net.train()
    write_values(f"{out}/empty_peer", [net(probe)], digits=17)
