"""A stand-in for a training script, for the manual's examples: no PyTorch needed.

Each rank prints who it is from torchrun's environment, then "step N" lines, and can be told to
fail or hang the way real jobs do, so that the manual shows what ddprun prints then.
  --steps N          steps to run (default 3)
  --fail-rank R      rank R raises an exception at its last step
  --hang-rank R      rank R stops making progress at its last step (sleeps)
  --kill-rank R      rank R is SIGKILLed at its last step (as the out-of-memory killer does)
  --stderr-rank R    rank R writes the line given by --stderr-line and exits 1
With one of these, the other ranks go on stepping twice a second until ddprun stops them, so
that what ddprun prints does not depend on which rank happens to finish first.
"""
import argparse
import os
import signal
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=3)
parser.add_argument("--fail-rank", type=int, default=-1)
parser.add_argument("--hang-rank", type=int, default=-1)
parser.add_argument("--kill-rank", type=int, default=-1)
parser.add_argument("--stderr-rank", type=int, default=-1)
parser.add_argument("--stderr-line", default="")
args = parser.parse_args()

rank = int(os.environ["RANK"])
world_size = int(os.environ["WORLD_SIZE"])
restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
print(f"rank {rank} of {world_size}, local rank {os.environ['LOCAL_RANK']}, restart {restart}", flush=True)
for step in range(1, args.steps + 1):
    if step == args.steps:
        if rank == args.fail_rank:
            raise RuntimeError(f"rank {rank} failed at step {step}")
        if rank == args.hang_rank:
            time.sleep(3600)
        if rank == args.kill_rank:
            os.kill(os.getpid(), signal.SIGKILL)
        if rank == args.stderr_rank:
            print(args.stderr_line, file=sys.stderr, flush=True)
            sys.exit(1)
    print(f"step {step}", flush=True)
faulty = {args.fail_rank, args.hang_rank, args.kill_rank, args.stderr_rank} - {-1}
step = args.steps
while faulty:
    time.sleep(0.5)
    step += 1
    print(f"step {step}", flush=True)
