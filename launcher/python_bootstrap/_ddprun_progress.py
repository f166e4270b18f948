"""Progress of a Python worker, counted for ddprun without a change to the worker's code.

Armed by ddprun's sitecustomize. When the program imports torch, it counts as progress each
forward pass of a DistributedDataParallel (or FSDP) model, each optimizer step, and each
collective of torch.distributed that a rank enters; at most every 100 ms it touches
DDPRUN_HEARTBEAT_FILE (one utime), the file ddprun's hang detection watches (--hang_timeout), as
the C++ worker library does. Only the worker's own process beats: a forked
child (a DataLoader worker) inherits the hooks but not the right to beat. Without
DDPRUN_HEARTBEAT_FILE it does nothing, and it never imports torch itself.

It also keeps the file's progress record (config/include/ddprun/progress_record.hpp): the
number of optimizer steps, and the collectives entered (how many, the last one's name, whether
the rank is inside it), so that ddprun shows steps and, when a job hangs, which rank did not
reach the collective the others wait in. DDP's own gradient all-reduce, which runs in C++ inside
backward, counts as a collective too: a backward pass after a synchronising forward of a DDP
model is "ddp_backward", as the C++ worker library names it. The record is written through an
mmap of the file: no system call, nobody woken; ddprun reads it at each beat and when it finds
a hang.
"""
import functools
import importlib
import importlib.util
import mmap
import os
import sys
import time

INTERVAL = 0.1  # seconds between two beats, at most
RECORD_BYTES = 128  # kProgressRecordBytes

_file = None
_owner = None
_next_beat = 0.0
_handles = []  # of the hooks registered
_record = None  # the mmap of the file's record, once the first step or collective came (False: none)
_steps = 0
_collectives = 0
_inside = False
_op = ""
_in_digit = None  # the offset of the `in` digit of the record in the file; None: it has none


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


def _open_record():
    """Sizes the heartbeat file for the record and maps it; False when it cannot (the round is
    over, or no space). Done at the first step or collective, not at start-up: sizing the file
    is a write, which ddprun counts as a beat, and starting is not progress."""
    try:
        fd = os.open(_file, os.O_RDWR | os.O_CLOEXEC)
        try:
            os.ftruncate(fd, RECORD_BYTES)
            return mmap.mmap(fd, RECORD_BYTES)
        finally:
            os.close(fd)
    except (OSError, ValueError):
        return False


def _write_record():
    global _record, _in_digit
    if os.getpid() != _owner:
        return  # a forked child (a DataLoader worker) shares the mapping, not the record
    if _record is None:
        _record = _open_record()
    if not _record:
        return
    line = f"step={_steps}" if _steps else ""  # no step yet: unknown, not "step 0"
    in_digit = None
    if _collectives:
        line += f" coll={_collectives} in="
        in_digit = len(line)
        line += f"{int(_inside)} op={_op}"
    if len(line) < RECORD_BYTES:
        _record[:] = (line.ljust(RECORD_BYTES - 1) + "\n").encode()
        _in_digit = in_digit


def _left_collective():
    """The rank left its collective: in the record only the `in` digit changes, one byte
    written (in a training loop a whole record costs some 3 us: cold code; this is most of the
    cost of a collective or a DDP backward pass to the module)."""
    global _inside
    _inside = False
    if _in_digit is not None and _record and os.getpid() == _owner:
        _record[_in_digit] = ord("0")


def _step(*_):
    global _steps
    _steps += 1
    _write_record()
    _beat()


# The collectives of torch.distributed: entering one is progress (a rank that waits in one
# beat when it entered; the rank that never came did not).
COLLECTIVES = ("all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "all_to_all",
               "all_to_all_single", "barrier", "broadcast", "broadcast_object_list", "gather", "gather_object",
               "monitored_barrier", "reduce", "reduce_scatter", "reduce_scatter_tensor", "scatter",
               "scatter_object_list", "send", "recv", "isend", "irecv")


def _stepping(function):
    """`function` (1.13's Optimizer._optimizer_step_code), counting a step after each call."""

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        result = function(*args, **kwargs)
        _step()
        return result

    wrapper._ddprun_beats = True
    return wrapper


def _enter(name, function, args, kwargs):
    """Calls `function` as the rank's next collective, `name`: entering it is progress, and the
    record says the rank is inside it until it returns or raises."""
    global _collectives, _inside, _op
    _collectives += 1
    _inside, _op = True, name
    _write_record()
    _beat()
    try:
        return function(*args, **kwargs)
    finally:
        _left_collective()


def _collective(function, name):
    """`function`, the collective `name` (_enter). Only the outermost counts: all_gather_object
    calls all_gather and broadcast through the wrapped names, and the user called
    all_gather_object."""

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        if _inside:
            return function(*args, **kwargs)
        return _enter(name, function, args, kwargs)

    wrapper._ddprun_beats = True
    return wrapper


# DDP's gradient all-reduce runs in C++ inside backward, out of the wrappers' sight: a backward
# pass after a forward of a DDP model that will synchronise (grad mode on, not under no_sync())
# counts as a collective of its own, "ddp_backward", as the C++ worker library counts it. Set by
# that forward, taken by the next backward.
_ddp_sync_pending = False
_grad_enabled = None  # torch.is_grad_enabled, once torch is imported
_compiling = None  # torch.compiler.is_compiling (2.x), once torch is imported


def _forward_beat(*_):
    """A beat from a model's forward hook. torch.compile traces a compiled model's hooks, and
    would warn that it cannot trace the clock (and break the graph there): a compiled forward
    does not beat; the optimizer step and backward, which run outside the graph, still do."""
    if _compiling is None or not _compiling():
        _beat()


def _ddp_forward_done(model, _inputs, _output):
    """A DDP model's forward hook: a beat, and, as DDP decides it (its _post_forward prepares the
    reducer under the same condition), whether the next backward all-reduces. (Traced by
    torch.compile, the flag's store is replayed after the compiled forward.)"""
    global _ddp_sync_pending
    if _grad_enabled() and getattr(model, "require_backward_grad_sync", True):
        _ddp_sync_pending = True
    _forward_beat()


def _backward(function):
    """torch.autograd.backward (Tensor.backward calls it), `ddp_backward` when a DDP forward made
    the next backward synchronised (above). Nested in a collective, or in another backward
    (reentrant activation checkpointing), it is part of that one."""

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        global _ddp_sync_pending
        if not _ddp_sync_pending or _inside:
            return function(*args, **kwargs)
        _ddp_sync_pending = False
        return _enter("ddp_backward", function, args, kwargs)

    wrapper._ddprun_beats = True
    return wrapper


def _hook_forward(model_class, register, hook):
    """Each model of `model_class` gets `hook` by its method `register` (a forward hook or
    pre-hook), which beats: one call a forward pass. (A global hook on every module would cost each module
    call PyTorch's slow path, several microseconds: launcher/python_bootstrap/README.md.)"""
    init = model_class.__init__
    if getattr(init, "_ddprun_beats", False):
        return

    @functools.wraps(init)
    def init_then_hook(self, *args, **kwargs):
        init(self, *args, **kwargs)
        _handles.append(getattr(self, register)(hook))

    init_then_hook._ddprun_beats = True
    model_class.__init__ = init_then_hook


def _on_torch(torch):
    global _grad_enabled, _compiling
    _grad_enabled = torch.is_grad_enabled
    _compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    _hook_forward(torch.nn.parallel.DistributedDataParallel, "register_forward_hook", _ddp_forward_done)
    if not getattr(torch.autograd.backward, "_ddprun_beats", False):
        torch.autograd.backward = _backward(torch.autograd.backward)
    # Every optimizer step: PyTorch 2.x's global hook; 1.13 calls _optimizer_step_code() after
    # each step (for its profiler). torch.optim deletes its submodules' names (1.13): the module
    # itself is in sys.modules.
    step_hook = getattr(sys.modules.get("torch.optim.optimizer"), "register_optimizer_step_post_hook", None)
    if step_hook is not None:
        _handles.append(step_hook(_step))
    elif hasattr(torch.optim.Optimizer, "_optimizer_step_code"):
        torch.optim.Optimizer._optimizer_step_code = _stepping(torch.optim.Optimizer._optimizer_step_code)
    # Collectives, where torch.distributed is built in.
    c10d = sys.modules.get("torch.distributed.distributed_c10d")
    dist = sys.modules.get("torch.distributed")
    if c10d is not None and dist is not None:
        for name in COLLECTIVES:
            original = getattr(c10d, name, None)
            if original is None or getattr(original, "_ddprun_beats", False):
                continue
            wrapper = _collective(original, name)
            setattr(c10d, name, wrapper)
            if getattr(dist, name, None) is original:
                setattr(dist, name, wrapper)


def _on_fsdp(fsdp):
    _hook_forward(fsdp.FullyShardedDataParallel, "register_forward_pre_hook", _forward_beat)


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
