"""What a Python worker sees at its start, written as JSON to DIR/probe.RANK.ATTEMPT, for
warm_start_test.sh to compare a worker forked from ddprun's warm interpreter with a cold one.
Usage: warm_start_probe.py DIR [ARGS...] (also as -m warm_start_probe). Taken before anything
else is imported, then torch's default generator and a gloo all-reduce."""
import os
import sys

preloaded = "torch" in sys.modules  # only a forked worker has it before its first line
import json
import random
import signal

out_dir = sys.argv[1]
rank = os.environ["RANK"]
attempt = os.environ["TORCHELASTIC_RESTART_COUNT"]


def disposition(handler):
    if handler is signal.SIG_DFL:
        return "default"
    if handler is signal.SIG_IGN:
        return "ignored"
    if handler is signal.default_int_handler:
        return "python's"
    return "other: " + repr(handler)


def descriptors():
    fds = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue  # listdir's own, closed by now
        fds[name] = target.split(":")[0] if ":" in target else "file"
    return fds


main = sys.modules["__main__"]
seen = {
    "preloaded": preloaded,
    "argv": sys.argv,
    "orig_argv": getattr(sys, "orig_argv", None),
    "file": __file__,
    "name": __name__,
    "spec": repr(getattr(main.__spec__, "name", None)),
    "loader": type(getattr(main, "__loader__", None)).__name__,
    "builtins": type(main.__dict__.get("__builtins__")).__name__,
    "path": sys.path,
    "cwd": os.getcwd(),
    "environ": dict(os.environ),
    # What tools read in /proc/PID/environ: the worker's own variables (but PYTHONPATH, which a cold
    # worker's bootstrap takes ddprun's folder out of after its exec).
    "proc_environ_is_own": sorted(e for e in open("/proc/self/environ", "rb").read().decode().split("\0")
                                  if e and not e.startswith("PYTHONPATH="))
    == sorted(f"{k}={v}" for k, v in os.environ.items() if k != "PYTHONPATH"),
    "signals": {s.name: disposition(signal.getsignal(s)) for s in signal.Signals
                if s not in (signal.SIGKILL, signal.SIGSTOP)},
    "blocked": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
    "fds": descriptors(),
    "threads": len(os.listdir("/proc/self/task")),
    "own_group": os.getpgid(0) == os.getpid(),
    "session_of_parent": os.getsid(0) == os.getsid(os.getppid()),
    "parent": open(f"/proc/{os.getppid()}/comm").read().strip(),
    "cmdline": open("/proc/self/cmdline", "rb").read().rstrip(b"\0").replace(b"\0", b" ").decode(),
    "cgroup": open("/proc/self/cgroup").read().strip().rsplit("/", 1)[-1],
    "unbuffered": (sys.stdout.write_through, sys.stdout.line_buffering, type(sys.stdout.buffer).__name__),
    "random": random.random(),
}
try:
    import numpy
    seen["numpy"] = float(numpy.random.random())
except ImportError:
    seen["numpy"] = None
import torch
import torch.distributed as dist
seen["torch_seed"] = torch.initial_seed()  # torch draws it from the OS at import
seen["torch_rand"] = torch.rand(3).tolist()
dist.init_process_group("gloo")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
seen["allreduce"] = t.item()
with open(os.path.join(out_dir, f"probe.{rank}.{attempt}"), "w") as f:
    json.dump(seen, f)
dist.destroy_process_group()
action = os.environ.get("PROBE_THEN", "")
if action == f"kill{rank}.{attempt}":
    os.kill(os.getpid(), signal.SIGKILL)
if action.startswith("fail") and attempt in action[4:].split(","):
    sys.exit(3)
