"""A Lightning Trainer, DDP on CPU: Lightning finds the launcher's environment (TORCHELASTIC_RUN_ID)
and joins the process group ddprun's variables describe."""
import os
import sys
import warnings

import lightning as L
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import checksum, dataset, model, result  # noqa: E402

warnings.filterwarnings("ignore")


class Module(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = model()

    def training_step(self, batch, index):
        x, y = batch
        loss = F.mse_loss(self.net(x), y)
        result(epoch=self.current_epoch, step=index, loss=loss.item())
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


if __name__ == "__main__":
    L.seed_everything(0, verbose=False)
    module = Module()
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=2, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(module, DataLoader(dataset(), batch_size=8))
    result(world=trainer.world_size, global_rank=trainer.global_rank, checksum=checksum(module.net))
