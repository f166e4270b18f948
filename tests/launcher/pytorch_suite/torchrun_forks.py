#!/usr/bin/env python3
"""torchrun, imported once: each request becomes a fork that runs torch.distributed.run.main(ARGS),
as PyTorch's test_run.py calls launch.main(args), instead of a `torchrun` process that imports torch
again (seconds each on a loaded machine). Run by the venv's Python; suite.py talks to it.

Requests on stdin, one JSON object a line: {"id", "args", "env", "out", "err", "timeout"}. For each,
a child in a session of its own: the environment replaced by "env", stdout and stderr on the files
"out" and "err", then main(args); its exit status is torchrun's: 0, SystemExit's code, or 1 with the
traceback for an exception (as the torchrun script exits on ChildFailedError or a ValueError). On
stdout, one line per request when its child ends: {"id", "rc"}, rc "timeout" (the session killed)
past "timeout" seconds.
"""
import json
import os
import select
import signal
import sys
import time
import traceback

import torch.distributed.run as torchrun


def child(request):
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    for fd, path in ((1, request["out"]), (2, request["err"])):
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(f, fd)
        os.close(f)
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = ["torchrun"] + request["args"]
    rc = 0
    try:
        torchrun.main(request["args"])
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        traceback.print_exc()
        rc = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)


def main():
    running = {}  # pid -> (id, deadline)
    stdin_open = True
    pending = b""
    while stdin_open or running:
        now = time.monotonic()
        for pid, (rid, deadline) in list(running.items()):
            if now > deadline:
                os.killpg(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                del running[pid]
                print(json.dumps({"id": rid, "rc": "timeout"}), flush=True)
        while running:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            rid, _ = running.pop(pid)
            print(json.dumps({"id": rid, "rc": os.waitstatus_to_exitcode(status)}), flush=True)
        if not stdin_open:
            time.sleep(0.05)
            continue
        ready, _, _ = select.select([0], [], [], 0.05)
        if not ready:
            continue
        data = os.read(0, 65536)
        if not data:
            stdin_open = False
            continue
        pending += data
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            request = json.loads(line)
            pid = os.fork()
            if pid == 0:
                child(request)
            running[pid] = (request["id"], time.monotonic() + request["timeout"])


if __name__ == "__main__":
    main()
