"""A script with signal handlers of its own: SIGTERM saves and exits 3, SIGINT is Python's default.
Rank 0 fails once both ranks are set up; ddprun then stops rank 1 with SIGTERM, whose handler runs."""
import os
import signal
import sys
import time

import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import result  # noqa: E402


def on_term(signum, frame):
    result(signal=signal.Signals(signum).name, handler="saving")
    sys.exit(3)


if __name__ == "__main__":
    result(sigint_default=signal.getsignal(signal.SIGINT) is signal.default_int_handler,
           sigterm=str(signal.getsignal(signal.SIGTERM)), sigpipe=str(signal.getsignal(signal.SIGPIPE)))
    signal.signal(signal.SIGTERM, on_term)
    dist.init_process_group("gloo")
    dist.barrier()
    if dist.get_rank() == 0:
        sys.exit(5)
    while True:
        time.sleep(0.1)
