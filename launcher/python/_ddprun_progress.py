"""Progress of a Python worker, counted for ddprun without a change to the worker's code.

Armed by ddprun's sitecustomize. When the program imports torch, it counts as progress each
forward pass of a DistributedDataParallel (or FSDP) model, each optimizer step, and each
collective of torch.distributed that a rank enters; at most every 100 ms it touches
DDPRUN_HEARTBEAT_FILE (one utime), the file ddprun's hang detection watches (--hang_timeout), as
the C++ worker library does. Only the worker's own process beats: a forked
child (a DataLoader worker) inherits the hooks but not the right to beat. Without
DDPRUN_HEARTBEAT_FILE it does nothing, and it never imports torch itself.
"""
import functools
import importlib
import importlib.util
import os
import sys
import time

INTERVAL = 0.1  # seconds between two beats, at most

_file = None
_owner = None
_next_beat = 0.0
_handles = []  # of the hooks registered


def _beat(*_):
    global _next_beat
    now = time.monotonic()
    if now < _next_beat:
        return None
    _next_beat = now + INTERVAL
    if os.getpid() == _owner:
        try:
            os.utime(_file)
        except OSError:
            pass  # the round is over: the file went with its folder
    return None


# The collectives of torch.distributed: entering one is progress (a rank that waits in one
# beat when it entered; the rank that never came did not).
COLLECTIVES = ("all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "all_to_all",
               "all_to_all_single", "barrier", "broadcast", "broadcast_object_list", "gather", "gather_object",
               "monitored_barrier", "reduce", "reduce_scatter", "reduce_scatter_tensor", "scatter",
               "scatter_object_list", "send", "recv", "isend", "irecv")


def _beating(function):
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        _beat()
        return function(*args, **kwargs)

    wrapper._ddprun_beats = True
    return wrapper


def _hook_forward(model_class):
    """Each model of `model_class` gets a forward pre-hook that beats: one call a forward pass.
    (A global hook on every module would cost each module call PyTorch's slow path, several
    microseconds: launcher/python/README.md.)"""
    init = model_class.__init__
    if getattr(init, "_ddprun_beats", False):
        return

    @functools.wraps(init)
    def init_then_hook(self, *args, **kwargs):
        init(self, *args, **kwargs)
        _handles.append(self.register_forward_pre_hook(_beat))

    init_then_hook._ddprun_beats = True
    model_class.__init__ = init_then_hook


def _on_torch(torch):
    _hook_forward(torch.nn.parallel.DistributedDataParallel)
    # Every optimizer step: PyTorch 2.x's global hook; 1.13 calls _optimizer_step_code() after
    # each step (for its profiler). torch.optim deletes its submodules' names (1.13): the module
    # itself is in sys.modules.
    step_hook = getattr(sys.modules.get("torch.optim.optimizer"), "register_optimizer_step_post_hook", None)
    if step_hook is not None:
        _handles.append(step_hook(_beat))
    elif hasattr(torch.optim.Optimizer, "_optimizer_step_code"):
        torch.optim.Optimizer._optimizer_step_code = _beating(torch.optim.Optimizer._optimizer_step_code)
    # Collectives, where torch.distributed is built in.
    c10d = sys.modules.get("torch.distributed.distributed_c10d")
    dist = sys.modules.get("torch.distributed")
    if c10d is not None and dist is not None:
        for name in COLLECTIVES:
            original = getattr(c10d, name, None)
            if original is None or getattr(original, "_ddprun_beats", False):
                continue
            wrapper = _beating(original)
            setattr(c10d, name, wrapper)
            if getattr(dist, name, None) is original:
                setattr(dist, name, wrapper)


def _on_fsdp(fsdp):
    _hook_forward(fsdp.FullyShardedDataParallel)


# What to do once a module has been imported (by the program: never imported here).
_AFTER_IMPORT = {"torch": _on_torch, "torch.distributed.fsdp": _on_fsdp}


class _AfterImport:
    """A meta path finder that lets the modules of _AFTER_IMPORT import as usual, then calls
    what it names for each; it leaves sys.meta_path once all have been seen."""

    def __init__(self, pending):
        self.pending = dict(pending)
        self.finding = False

    def find_spec(self, name, path=None, target=None):
        then = self.pending.get(name)
        if then is None or self.finding:
            return None
        self.finding = True
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self.finding = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        del self.pending[name]
        if not self.pending:
            sys.meta_path.remove(self)
        exec_module = spec.loader.exec_module

        def exec_then(module):
            exec_module(module)
            try:
                then(module)
            except Exception as error:  # a PyTorch without these names: no progress, no harm
                sys.stderr.write(f"ddprun: progress of this Python worker is not counted: {error!r}\n")

        spec.loader.exec_module = exec_then
        return spec


def arm():
    global _file, _owner
    _file = os.environ.get("DDPRUN_HEARTBEAT_FILE")
    if not _file:
        return
    _owner = os.getpid()
    pending = {}
    for name, then in _AFTER_IMPORT.items():
        if name in sys.modules:
            then(sys.modules[name])
        else:
            pending[name] = then
    if pending:
        sys.meta_path.insert(0, _AfterImport(pending))
