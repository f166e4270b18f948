"""Progress of a Python worker, counted for ddprun without a change to the worker's code.

Armed by ddprun's sitecustomize. When the program imports torch, it registers PyTorch's global
hooks: a forward pre-hook on every module (training and validation alike) and, where PyTorch has
it (2.x), a post-hook on every optimizer step. Each hook call is progress; at most every 100 ms
it touches DDPRUN_HEARTBEAT_FILE (one utime), the file ddprun's hang detection watches
(--hang_timeout), as the C++ worker library does. Only the worker's own process beats: a forked
child (a DataLoader worker) inherits the hooks but not the right to beat. Without
DDPRUN_HEARTBEAT_FILE it does nothing, and it never imports torch itself.
"""
import importlib.util
import os
import sys
import time

INTERVAL = 0.1  # seconds between two beats, at most

_file = None
_owner = None
_next_beat = 0.0


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


def _on_torch(torch):
    torch.nn.modules.module.register_module_forward_pre_hook(_beat)
    # torch.optim deletes its submodules' names (1.13): the module itself is in sys.modules.
    step_hook = getattr(sys.modules.get("torch.optim.optimizer"), "register_optimizer_step_post_hook", None)
    if step_hook is not None:
        step_hook(_beat)


class _TorchImport:
    """A meta path finder that lets the import of torch happen as usual, then calls _on_torch."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_hook(module):
            exec_module(module)
            try:
                _on_torch(module)
            except Exception as error:  # a PyTorch without these hooks: no progress, no harm
                sys.stderr.write(f"ddprun: progress of this Python worker is not counted: {error!r}\n")

        spec.loader.exec_module = exec_then_hook
        return spec


def arm():
    global _file, _owner
    _file = os.environ.get("DDPRUN_HEARTBEAT_FILE")
    if not _file:
        return
    _owner = os.getpid()
    if "torch" in sys.modules:
        _on_torch(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, _TorchImport())
