# What the Python references (hooks_, powersgd_, join_ and syncbn_reference.py) share with the C++
# drivers they are compared with: the weights, the batches, the training step and the parameter
# files, each written once here as the drivers write it in C++.
import torch
import torch.nn.functional as F


def init_weights(net, dtype=torch.float32):
    """Parameter k of `net`, element i: sin(0.7 i + k) / 2."""
    with torch.no_grad():
        for k, p in enumerate(net.parameters()):
            p.copy_((torch.sin(torch.arange(p.numel(), dtype=dtype) * 0.7 + k) * 0.5).reshape(p.shape))


def batch(r, s, inputs, outputs):
    """Rank r's batch at step s: 4 samples of `inputs` features, with targets of `outputs`."""
    x = torch.cos(torch.arange(4 * inputs, dtype=torch.float32) * 0.37 + (r * 1.3 + s * 0.11)).reshape(4, inputs)
    y = torch.sin(torch.arange(4 * outputs, dtype=torch.float32) * 0.21 + (r * 0.9 + s * 0.05)).reshape(4, outputs)
    return x, y


def step(ddp, opt, r, s, inputs, outputs):
    """One step of `opt` on rank r's batch s, the mean squared error's gradient through `ddp`."""
    x, y = batch(r, s, inputs, outputs)
    opt.zero_grad()
    F.mse_loss(ddp(x), y).backward()
    opt.step()


def write_values(path, tensors, digits=9):
    """Every element of `tensors`, in order, one a line with `digits` significant digits (9
    round-trips a float, 17 a double)."""
    with open(path, "w") as f:
        for t in tensors:
            for v in t.detach().double().flatten().tolist():
                f.write(f"{v:.{digits}g}\n")
