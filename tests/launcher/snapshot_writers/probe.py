"""What the test adds to each writer's script, apart from the checkpoint code (which is the
writer's own, with DDPRUN_SNAPSHOT_DIR as its folder): a RESULT line per finished step with a digest
of the parameters, the line saying where a run resumed, and the fault.

SNAPSHOT_WRITERS_KILL="RANK:STEP": on the first attempt (TORCHELASTIC_RESTART_COUNT=0), rank RANK
SIGKILLs itself once step STEP is done (its optimizer step taken, and any checkpoint of that step
saved). Unset, the run is the uninterrupted reference."""
import hashlib
import os
import signal


def checksum(module):
    """A digest of the exact bytes of every parameter and buffer."""
    h = hashlib.sha256()
    for name, value in sorted(module.state_dict().items()):
        h.update(name.encode())
        h.update(value.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def result(**fields):
    rank = os.environ.get("RANK", "?")
    print("RESULT rank=" + rank + " " + " ".join(f"{k}={v}" for k, v in fields.items()), flush=True)


def resumed(step, module, **fields):
    """Where this attempt starts: step 0 when no checkpoint was found."""
    result(attempt=os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"), resumed_at=step, checksum=checksum(module), **fields)


def step_done(step, module):
    result(step=step, checksum=checksum(module))
    kill = os.environ.get("SNAPSHOT_WRITERS_KILL")
    if not kill or os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0":
        return
    rank, at = kill.split(":")
    if os.environ["RANK"] == rank and step == int(at):
        result(killed_after_step=step)
        os.kill(os.getpid(), signal.SIGKILL)
