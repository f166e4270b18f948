"""PyTorch's "multi-GPU training with DDP" tutorial (multinode_torchrun.py), on CPU and gloo: a
Trainer that saves a snapshot each epoch and resumes from it. Rank 1 SIGKILLs itself at the start
of epoch 2 of the first attempt; the restarted job resumes from the snapshot of epoch 1.
Usage: tutorial.py SNAPSHOT_PATH EPOCHS"""
import os
import signal
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import checksum, dataset, model, result  # noqa: E402


class Trainer:
    def __init__(self, snapshot_path):
        self.model = model()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.epochs_run = 0
        self.snapshot_path = snapshot_path
        if os.path.exists(snapshot_path):
            snapshot = torch.load(snapshot_path)
            self.model.load_state_dict(snapshot["MODEL_STATE"])
            self.optimizer.load_state_dict(snapshot["OPTIMIZER_STATE"])
            self.epochs_run = snapshot["EPOCHS_RUN"]
            result(resumed_at=self.epochs_run)
        self.model = DDP(self.model)
        self.data = DataLoader(dataset(), batch_size=8, shuffle=False, sampler=DistributedSampler(dataset()))

    def _save_snapshot(self, epoch):
        snapshot = {"MODEL_STATE": self.model.module.state_dict(),
                    "OPTIMIZER_STATE": self.optimizer.state_dict(), "EPOCHS_RUN": epoch + 1}
        torch.save(snapshot, self.snapshot_path + ".part")
        os.replace(self.snapshot_path + ".part", self.snapshot_path)

    def train(self, max_epochs):
        for epoch in range(self.epochs_run, max_epochs):
            if epoch == 2 and os.environ["RANK"] == "1" and os.environ["TORCHELASTIC_RESTART_COUNT"] == "0":
                os.kill(os.getpid(), signal.SIGKILL)
            self.data.sampler.set_epoch(epoch)
            losses = []
            for x, y in self.data:
                self.optimizer.zero_grad()
                loss = F.mse_loss(self.model(x), y)
                loss.backward()
                self.optimizer.step()
                losses.append(loss.item())
            result(epoch=epoch, losses=losses)
            dist.barrier()  # the snapshot of an epoch is written once every rank finished it
            if os.environ["RANK"] == "0":
                self._save_snapshot(epoch)
            dist.barrier()


def main():
    dist.init_process_group("gloo")
    trainer = Trainer(sys.argv[1])
    trainer.train(int(sys.argv[2]))
    result(checksum=checksum(trainer.model.module))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
