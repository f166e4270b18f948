"""A Lightning Trainer, DDP on CPU (strategy="ddp", devices=2) under ddprun: Lightning finds the
launcher's environment (TorchElasticEnvironment) and uses ddprun's two processes rather than
starting its own. ModelCheckpoint saves every SAVE_EVERY steps (and last.ckpt); fit() resumes
from last.ckpt when there is one (ckpt_path="last"). The only change for ddprun: the checkpoints'
folder is DDPRUN_SNAPSHOT_DIR.
Usage: lightning_ckpt.py STEPS SAVE_EVERY"""
import os
import sys
import warnings

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import probe  # noqa: E402

warnings.filterwarnings("ignore")


class Regression(L.LightningModule):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))

    def training_step(self, batch, index):
        x, y = batch
        return F.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


class Probe(Callback):
    """The test's lines (probe.py): where fit() starts, and each step's parameters."""

    def on_train_start(self, trainer, module):
        env = trainer.strategy.cluster_environment
        probe.resumed(trainer.global_step, module.net, global_rank=trainer.global_rank, world=trainer.world_size,
                      environment=type(env).__name__, launcher=open(f"/proc/{os.getppid()}/comm").read().strip())

    def on_train_batch_end(self, trainer, module, outputs, batch, index):
        probe.step_done(trainer.global_step, module.net)


def main():
    steps, save_every = int(sys.argv[1]), int(sys.argv[2])
    # One batch of 16 samples on each rank (the sampler Lightning adds keeps each rank's half: no
    # shuffle), so every step sees the same data, wherever in its epoch a resumed run starts.
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(32, 8, generator=g)
    data = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=16)
    checkpoints = ModelCheckpoint(dirpath=os.environ["DDPRUN_SNAPSHOT_DIR"], every_n_train_steps=save_every, save_last=True)
    trainer = L.Trainer(strategy="ddp", accelerator="cpu", devices=2, max_steps=steps, callbacks=[Probe(), checkpoints],
                        logger=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Regression(), data, ckpt_path="last")


if __name__ == "__main__":
    main()
