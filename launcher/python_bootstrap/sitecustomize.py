"""ddprun's bootstrap for Python workers (launcher/python_bootstrap/README.md).

ddprun puts this file's folder first on the PYTHONPATH of a Python worker, so that Python's
`site` imports this module at start-up, before the user's program. It then leaves the worker as
it would have been without ddprun: it takes its folder out of sys.path and PYTHONPATH (so the
worker's own children start without it), runs the `sitecustomize` that it shadows (Debian's, a
virtual environment's or the user's; an error there is reported by `site` as it would be), or,
where the interpreter has none, leaves none. On the way it arms _ddprun_progress, which counts
progress once the program imports torch, and registers faulthandler, which writes the worker's
Python stacks when ddprun asks. Standard library only, and Python 3.6 or later.
"""
import os
import sys


def _leave_no_trace():
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    for p in [p for p in sys.path_importer_cache if os.path.abspath(p or ".") == here]:
        del sys.path_importer_cache[p]
    return here


def _load(here, name):
    """One of the bootstrap's modules, by its file: its folder is off sys.path by now."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, os.path.join(here, name + ".py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _torch_version():
    """The (major, minor) of the torch this interpreter would import, or None: read from its
    version.py, which find_spec locates without importing torch (a torch import takes seconds)."""
    import importlib.util
    import re
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        try:
            with open(os.path.join(folder, "version.py"), encoding="utf-8") as f:
                found = re.search(r"^__version__\s*=\s*['\"](\d+)\.(\d+)", f.read(), re.M)
        except OSError:
            continue
        if found:
            return int(found.group(1)), int(found.group(2))
    return None


def _next_sitecustomize():
    """Imports the sitecustomize this one shadows (Debian's, a virtual environment's, the
    user's) under its own name, or, when there is none, leaves `site` as it would have been
    without ddprun: no `sitecustomize` in sys.modules, and nothing said.

    `site` imports sitecustomize and catches an ImportError for that name silently: the
    interpreters without one of their own (python.org's, pyenv's, conda's) rely on that. The
    import machinery takes the module out of sys.modules after it runs, by its name: this one
    leaves the next one there, or raises that ImportError (its work is done: the progress
    module and faulthandler keep what they need), which the machinery answers by removing this
    module and `site` by saying nothing."""
    del sys.modules["sitecustomize"]
    try:
        import sitecustomize  # noqa: F401  (the next on sys.path, now that ours is off it)
    except ImportError as error:
        if error.name != "sitecustomize":
            raise  # site reports it: "Error in sitecustomize; ..."
        raise ImportError("no sitecustomize besides ddprun's", name="sitecustomize") from None


_here = _leave_no_trace()
_start = _load(_here, "_ddprun_worker_start")  # what a forked worker does too (_ddprun_zygote.py)
_start.restore_pythonpath(_here)
try:
    _start.nccl_async_error_handling(_torch_version)
except Exception as _error:
    sys.stderr.write(f"ddprun: NCCL_ASYNC_ERROR_HANDLING is not set for this worker's torch: {_error!r}\n")
try:
    _load(_here, "_ddprun_progress").arm()
except Exception as _error:  # never stop the user's program for ddprun's sake
    sys.stderr.write(f"ddprun: progress of this Python worker is not counted: {_error!r}\n")
try:
    _start.register_stacks()
except Exception as _error:
    sys.stderr.write(f"ddprun: this Python worker's stacks need py-spy: faulthandler: {_error!r}\n")
if "DDPRUN_ZYGOTE_ENV_ROOM" in os.environ:
    # The warm interpreter (_ddprun_zygote.py): the sitecustomize this one shadows, and the
    # usercustomize that `site` would run next, run in each forked worker instead, with the
    # worker's environment and output, as in a cold worker. `site` reads ENABLE_USER_SITE once
    # this returns; the warm interpreter sets it back.
    import site
    _start.deferred_usercustomize = bool(site.ENABLE_USER_SITE)
    site.ENABLE_USER_SITE = False
    del sys.modules["sitecustomize"], _here, _start
    raise ImportError("deferred to the forked workers", name="sitecustomize")
del _here, _start
_next_sitecustomize()
