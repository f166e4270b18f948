"""What ddprun does at the start of every Python worker, for the worker's own environment: one
copy for both ways a worker starts, cold (sitecustomize.py, before the program) and forked from
the warm interpreter (_ddprun_zygote.py, after its fork). Standard library only, and Python 3.6
or later.
"""
import os


def restore_pythonpath(here):
    """PYTHONPATH as the user had it: ddprun put the bootstrap's folder `here` first, alone when
    there was none (so that the worker's own children start without it)."""
    parts = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if parts and os.path.abspath(parts[0] or ".") == here:
        rest = os.pathsep.join(parts[1:])
        if rest:
            os.environ["PYTHONPATH"] = rest
        else:
            os.environ.pop("PYTHONPATH", None)


def nccl_async_error_handling(torch_version):
    """PyTorch before 2.2 reads NCCL_ASYNC_ERROR_HANDLING only; 2.2 and later read
    TORCH_NCCL_ASYNC_ERROR_HANDLING, which ddprun sets, and warn about the old name, which ddprun
    therefore leaves to this check (config/include/ddprun/worker_env.hpp). `torch_version`: a
    function that gives the (major, minor) of the worker's torch, or None; called only when the
    answer matters."""
    value = os.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING")
    if value is None or "NCCL_ASYNC_ERROR_HANDLING" in os.environ:
        return
    version = torch_version()
    if version is not None and version < (2, 2):
        os.environ["NCCL_ASYNC_ERROR_HANDLING"] = value


def register_stacks():
    """Python's faulthandler writes every thread's Python stack to DDPRUN_PYTHON_STACKS_FILE when
    ddprun sends DDPRUN_PYTHON_STACKS_SIGNAL: the stacks of a hung worker where py-spy is absent
    or cannot attach (launcher/hangs/python_stacks.hpp). From a C signal handler, without the
    GIL: a worker stuck in C code, holding the GIL or not, answers too. The file is opened for
    appending, unbuffered, and kept open by faulthandler; nothing is written until ddprun asks."""
    path = os.environ.get("DDPRUN_PYTHON_STACKS_FILE")
    signal_number = os.environ.get("DDPRUN_PYTHON_STACKS_SIGNAL")
    if not path or not signal_number:
        return
    import faulthandler
    faulthandler.register(int(signal_number), file=open(path, "ab", buffering=0), all_threads=True)
