# A Python worker for the hang tests (tests/worker/hangs_test.sh), under ddprun.
#   hang_worker.py collective OUT   gloo all_reduce steps, beating through DDPRUN_HEARTBEAT_FILE
#                                   (os.utime) and writing OUT/lastbeat.<rank>; rank 1 blocks in
#                                   stuck_in_data_loader() at step 3 while rank 0 waits in the
#                                   next all_reduce
#   hang_worker.py file_timer OUT   torchelastic's FileTimerClient on TORCHELASTIC_TIMER_FILE:
#                                   rank 1's "train_step" timer of 2 s expires while it blocks;
#                                   rank 0 holds a 600 s timer and sleeps
import os
import sys
import time

import torch
import torch.distributed as dist


def stuck_in_data_loader():
    while True:
        time.sleep(3600)


def collective(out):
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    beat = os.environ["DDPRUN_HEARTBEAT_FILE"]
    for step in range(1000):
        if rank == 1 and step == 3:
            stuck_in_data_loader()
        os.utime(beat)
        with open(os.path.join(out, "lastbeat.%d" % rank), "w") as f:
            f.write(repr(time.time()))
        t = torch.ones(4)
        dist.all_reduce(t)
        time.sleep(0.1)


def file_timer(out):
    from torch.distributed.elastic.timer.api import configure, expires
    from torch.distributed.elastic.timer.file_based_local_timer import FileTimerClient

    configure(FileTimerClient(os.environ["TORCHELASTIC_TIMER_FILE"]))
    rank = int(os.environ["RANK"])
    with expires(after=2 if rank == 1 else 600, scope="train_step"):
        with open(os.path.join(out, "acquired.%d" % rank), "w") as f:
            f.write(repr(time.time()))
        stuck_in_data_loader()


if __name__ == "__main__":
    {"collective": collective, "file_timer": file_timer}[sys.argv[1]](sys.argv[2])
