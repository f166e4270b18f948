"""Lightning Fabric on CPU with DDP: fabric.launch() under a launcher starts nothing itself."""
import os
import sys

import torch
from lightning.fabric import Fabric
from torch.utils.data import DataLoader

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import checksum, dataset, model, result, train  # noqa: E402

if __name__ == "__main__":
    fabric = Fabric(accelerator="cpu", devices=2, strategy="ddp")
    fabric.launch()
    fabric.seed_everything(0)
    net = model()
    net, optimizer = fabric.setup(net, torch.optim.SGD(net.parameters(), lr=0.01))
    data = fabric.setup_dataloaders(DataLoader(dataset(), batch_size=8))
    train(net, optimizer, data, fabric.backward)
    result(world=fabric.world_size, checksum=checksum(net.module))
