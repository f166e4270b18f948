"""Hugging Face accelerate on CPU: Accelerator() reads the launcher's variables and joins with gloo."""
import os
import sys

import torch
import torch.nn.functional as F
from accelerate import Accelerator
from torch.utils.data import DataLoader

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import checksum, dataset, model, result  # noqa: E402

if __name__ == "__main__":
    accelerator = Accelerator(cpu=True)
    net = model()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
    net, optimizer, data = accelerator.prepare(net, optimizer, DataLoader(dataset(), batch_size=8))
    for epoch in range(2):
        for step, (x, y) in enumerate(data):
            optimizer.zero_grad()
            loss = F.mse_loss(net(x), y)
            accelerator.backward(loss)
            optimizer.step()
            result(epoch=epoch, step=step, loss=loss.item())
    result(world=accelerator.num_processes, type=str(accelerator.distributed_type),
           checksum=checksum(accelerator.unwrap_model(net)))
