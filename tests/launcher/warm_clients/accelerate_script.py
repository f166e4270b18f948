"""Hugging Face accelerate on CPU: Accelerator() reads the launcher's variables and joins with gloo."""
import os
import sys

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import checksum, dataset, model, result, train  # noqa: E402

if __name__ == "__main__":
    accelerator = Accelerator(cpu=True)
    net = model()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
    net, optimizer, data = accelerator.prepare(net, optimizer, DataLoader(dataset(), batch_size=8))
    train(net, optimizer, data, accelerator.backward)
    result(world=accelerator.num_processes, type=str(accelerator.distributed_type),
           checksum=checksum(accelerator.unwrap_model(net)))
