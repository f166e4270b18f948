"""One rank of goodput.py: a DDP training script as users write it (gloo, CPU). It resumes from the
latest checkpoint in its checkpoint folder (ckpt-<step>.pt), trains an MLP with Adam on synthetic
batches, and rank 0 saves a checkpoint every --save_every steps (written to a temporary name, then
renamed: a kill mid-save leaves the last one whole) and keeps the last two.

The checkpoint folder: DIR (--save_to dir, on the disk of the driver's temporary folder) or
DDPRUN_SNAPSHOT_DIR (--save_to snapshots, ddprun's folder in memory; docs/guides/snapshots.md).
--gasp adds a dying gasp (ddprun --snapshot_signal=SIGUSR1): on SIGUSR1 every surviving rank saves
the last step whose update it applied (its ranks hold the same state; the one that exists saves)
and exits 0; a collective that fails because a peer died is caught and the worker waits for the
signal. The handler never saves a half-applied step: a SIGUSR1 that comes during optimizer.step()
is saved just after it.

What the driver reads, all in DIR and flushed line by line:
  steps   rank 0, after each step: "STEP TIME ROUND RESTART" (TIME: time.monotonic(), the system's
          CLOCK_MONOTONIC, which the driver reads too; ROUND: how many rank-0 processes started
          before this one, from DIR/rounds, which every launcher's rounds count alike, on every
          node; RESTART: TORCHELASTIC_RESTART_COUNT)
  rounds  a line from each rank 0 at its first line (before it imports torch)
  saves   "every STEP SECONDS" for each regular save (rank 0), "gasp STEP SECONDS" for each gasp's
          save: the time the training stood still for it
  snapshot_dirs  the DDPRUN_SNAPSHOT_DIR of each worker (--save_to snapshots), for the driver to
          remove after the run (ddprun keeps it after a stop by a signal)
It trains until it is stopped.

  torchrun --nproc_per_node=2 goodput_python_worker.py DIR [--save_every 50] [--save_to dir|snapshots] [--gasp]
"""
import os
import sys
import time

if os.environ.get("RANK") == "0":  # the round's start, before the imports of a second or more
    with open(os.path.join(sys.argv[1], "rounds"), "a") as f:
        f.write(f"{os.getpid()} {os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}\n")

import argparse  # noqa: E402
import glob  # noqa: E402
import re  # noqa: E402
import signal  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

# 4 layers of 576 (1.0 M parameters), for a step of about 25 ms with 2 ranks on the 2 cores here
# (512 wide, 1.27 times less work, stepped in 17 to 22 ms); a checkpoint (parameters and Adam's
# two moments) of 12 MB.
WIDTH = 576
BATCH = 96


def checkpoints(d):
    """The checkpoints in `d`, oldest first, as (step, path)."""
    found = []
    for path in glob.glob(os.path.join(d, "ckpt-*.pt")):
        match = re.fullmatch(r"ckpt-(\d+)\.pt", os.path.basename(path))
        if match:
            found.append((int(match.group(1)), path))
    return sorted(found)


def save(d, step, net, optimizer, tag="tmp"):
    path = os.path.join(d, f"ckpt-{step}.pt")
    tmp = f"{path}.{tag}.{os.getpid()}"
    torch.save({"step": step, "model": net.state_dict(), "optimizer": optimizer.state_dict()}, tmp)
    os.replace(tmp, path)


def append(path, line):
    with open(path, "a") as f:
        f.write(line + "\n")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("dir")
    parser.add_argument("--save_every", type=int, default=50)
    parser.add_argument("--save_to", choices=("dir", "snapshots"), default="dir")
    parser.add_argument("--gasp", action="store_true")
    args = parser.parse_args()
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    if args.save_to == "snapshots":
        folder = os.environ["DDPRUN_SNAPSHOT_DIR"]
        append(os.path.join(args.dir, "snapshot_dirs"), folder)
    else:
        folder = args.dir
    if os.environ.get("RANK") == "0":
        with open(os.path.join(args.dir, "rounds")) as f:
            round_ = sum(1 for _ in f) - 1
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    layers = []
    for _ in range(3):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()]
    net = torch.nn.Sequential(*layers, torch.nn.Linear(WIDTH, 10))
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
    step = 0
    saved = checkpoints(folder)
    if saved:
        state = torch.load(saved[-1][1], map_location="cpu")
        net.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = state["step"]
    model = DistributedDataParallel(net)
    saves = os.path.join(args.dir, "saves")

    # The dying gasp: `done` is the last step whose update was applied; none is being applied
    # unless `applying`.
    gasp = {"done": step, "applying": False, "asked": False}

    def gasp_save():
        began = time.monotonic()
        save(folder, gasp["done"], net, optimizer, tag="gasp")
        append(saves, f"gasp {gasp['done']} {time.monotonic() - began:.6f}")
        os._exit(0)  # saved: ddprun need not wait out the grace

    def on_signal(signum, frame):
        gasp["asked"] = True
        if not gasp["applying"]:
            gasp_save()
    if args.gasp:
        signal.signal(signal.SIGUSR1, on_signal)
    steps = open(os.path.join(args.dir, "steps"), "a") if rank == 0 else None
    try:
        while True:
            step += 1
            data = torch.Generator().manual_seed(step * dist.get_world_size() + rank)
            x = torch.randn(BATCH, WIDTH, generator=data)
            y = torch.randint(0, 10, (BATCH,), generator=data)
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            gasp["applying"] = True
            optimizer.step()
            gasp["done"], gasp["applying"] = step, False
            if gasp["asked"]:
                gasp_save()
            if rank == 0:
                if step % args.save_every == 0:
                    began = time.monotonic()
                    save(folder, step, net, optimizer)
                    for _, old in checkpoints(folder)[:-2]:
                        os.remove(old)
                    append(saves, f"every {step} {time.monotonic() - began:.6f}")
                steps.write(f"{step} {time.monotonic():.6f} {round_} {restart}\n")
                steps.flush()
    except RuntimeError:
        if not args.gasp:
            raise
        # A peer died under a collective: the gasp's signal comes (or came: a handler whose signal
        # arrived while the collective blocked runs at the loop's next bytecode; signal.pause()
        # would wait for a second signal, as it checks for pending ones only after pausing).
        while True:
            time.sleep(0.1)


if __name__ == "__main__":
    main()
