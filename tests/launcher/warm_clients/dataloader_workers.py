"""A DataLoader with worker processes (each item says whether a worker process loaded it), started by fork, spawn and forkserver. A spawned or
forkserver worker is a new interpreter (sys.executable) that imports this script again as
__mp_main__, from __main__.__file__ and sys.path: what a worker forked from the warm interpreter
must give it as a cold one does. Each item carries the seed torch gave the worker that loaded it."""
import os
import sys

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import result  # noqa: E402


class Numbered(Dataset):
    def __init__(self, main_pid):
        self.main_pid = main_pid

    def __len__(self):
        return 32

    def __getitem__(self, index):
        info = torch.utils.data.get_worker_info()
        return torch.tensor([float(index)]), info.seed if info else -1, os.getpid() != self.main_pid


def note_worker(worker_id):
    assert torch.initial_seed() == torch.utils.data.get_worker_info().seed


if __name__ == "__main__":
    dist.init_process_group("gloo")
    for context in ("fork", "spawn", "forkserver"):
        loader = DataLoader(Numbered(os.getpid()), batch_size=4, shuffle=True, num_workers=2, multiprocessing_context=context,
                            generator=torch.Generator().manual_seed(7 + dist.get_rank()), worker_init_fn=note_worker)
        batches = [(x.flatten().tolist(), sorted(set(seed.tolist())), bool(elsewhere.all())) for x, seed, elsewhere in loader]
        result(context=context, batches=batches)
    dist.barrier()
    dist.destroy_process_group()
