# What tests/worker/syncbn_test.sh expects of `syncbn_driver OUT STEPS sync`, computed by PyTorch
# in one process: the same model, weights and batches, with the two ranks' batches (3 and 5
# samples) concatenated into one and the loss averaged over the ranks' losses. That is what
# SyncBatchNorm under DDP is defined to compute: every BatchNorm sees the global batch, and
# DDP's gradient is the mean of the ranks' gradients. PyTorch's own torch.nn.SyncBatchNorm
# cannot be the reference: it runs on GPUs only (its kernels, torch.batch_norm_stats and the
# like, have no CPU implementation in 1.13 or 2.x), and these tests run on CPUs.
# Writes OUT/state (parameters then buffers, %.17g, one a line), OUT/eval and OUT/empty_peer.
#   python syncbn_reference.py OUT STEPS
import sys

import torch

out, steps = sys.argv[1], int(sys.argv[2])
nn = torch.nn
net = nn.Sequential(
    nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU()),
    nn.Flatten(), nn.Linear(100, 6),
    nn.BatchNorm1d(6, affine=False, momentum=None), nn.Tanh(),
    nn.Linear(6, 3), nn.BatchNorm1d(3, momentum=0.3, track_running_stats=False))
net.double()
with torch.no_grad():
    for k, p in enumerate(net.parameters()):
        p.copy_((torch.sin(torch.arange(p.numel(), dtype=torch.float64) * 0.7 + k) * 0.5).reshape(p.shape))
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


def write(path, tensors):
    with open(path, "w") as f:
        for t in tensors:
            for v in t.detach().double().flatten().tolist():
                f.write(f"{v:.17g}\n")


write(f"{out}/state", list(net.parameters()) + list(net.buffers()))
net.eval()
with torch.no_grad():
    probe = torch.cos(torch.arange(150, dtype=torch.float64) * 0.5).reshape(2, 3, 5, 5)
    write(f"{out}/eval", [net(probe)])
    # Training mode on rank 0's batch alone: the driver's rank 1 brings an empty one.
    net.train()
    write(f"{out}/empty_peer", [net(probe)])
