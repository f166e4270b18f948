"""What the client scripts share: a fixed data set, a small model, its training loop, and how
results are printed.

Every line a client prints that starts with RESULT must be the same, bit for bit, whether its
worker started cold or was forked from ddprun's warm interpreter (warm_clients_test.sh)."""
import hashlib
import os

import torch
import torch.nn.functional as F


def dataset(n=64, features=8, seed=1234):
    """The same tensors in every process: drawn from a generator of their own, not the global one."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=g)
    y = x @ torch.arange(1.0, features + 1).unsqueeze(1) + 0.1 * torch.randn(n, 1, generator=g)
    return torch.utils.data.TensorDataset(x, y)


def model(features=8):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(features, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def checksum(module):
    """A digest of the parameters' exact bytes."""
    h = hashlib.sha256()
    for p in module.state_dict().values():
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def train(net, optimizer, data, backward, epochs=2):
    """The clients' loop: mean squared error, `backward` the framework's (accelerator.backward,
    fabric.backward); each step's loss printed as a result."""
    for epoch in range(epochs):
        for step, (x, y) in enumerate(data):
            optimizer.zero_grad()
            loss = F.mse_loss(net(x), y)
            backward(loss)
            optimizer.step()
            result(epoch=epoch, step=step, loss=loss.item())


def result(**fields):
    rank = os.environ.get("RANK", "?")
    print("RESULT rank=" + rank + " " + " ".join(f"{k}={v!r}" for k, v in fields.items()), flush=True)
