#!/usr/bin/env python3
"""Sees workers die, for split_brain_check.py (issue 43). Standard library only.

usage: worker_observer.py RECORDS_GLOB STOP_FILE

Follows the worker record files that match RECORDS_GLOB (rec.* of a test's run) as they grow, and
for each worker that wrote a "start" record appends a "gone" record to its file at the moment it
ends (a pidfd of it becomes readable, which it does when the process becomes a zombie; one that
is already gone when its record is read is written then): evidence of its end that does not come from the worker
(a SIGKILLed worker writes nothing) or from its ddprun (a ddprun stopped or killed logs nothing, or
logs it late). Ends once STOP_FILE exists and every worker seen is gone, or 120 s after STOP_FILE.
"""

import glob
import json
import os
import select
import sys
import time


def zombie(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def main():
    pattern, stop_file = sys.argv[1], sys.argv[2]
    offsets = {}  # file -> bytes read
    alive = {}    # pidfd -> (file, start record)
    poller = select.poll()
    stop_deadline = None

    def gone(fd):
        path, r = alive.pop(fd)
        poller.unregister(fd)
        os.close(fd)
        with open(path, "a") as f:
            f.write(json.dumps({"what": "gone", "rank": r["rank"], "pid": r["pid"], "restart": r["restart"],
                                "real": time.time(), "mono": time.monotonic()}) + "\n")

    while True:
        for path in glob.glob(pattern):
            with open(path, "rb") as f:
                f.seek(offsets.get(path, 0))
                data = f.read()
            end = data.rfind(b"\n") + 1  # a line still being written is read next time
            offsets[path] = offsets.get(path, 0) + end
            for line in data[:end].splitlines():
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                if r.get("what") == "start":
                    try:
                        fd = os.pidfd_open(r["pid"])
                    except OSError:  # already reaped
                        fd = os.open("/dev/null", os.O_RDONLY)
                    alive[fd] = (path, r)
                    poller.register(fd, select.POLLIN)
                    if zombie(r["pid"]):
                        gone(fd)
        for fd, _ in poller.poll(5):
            gone(fd)
        if stop_deadline is None and os.path.exists(stop_file):
            stop_deadline = time.time() + 120
        if stop_deadline is not None and (not alive or time.time() > stop_deadline):
            return 0 if not alive else 1


if __name__ == "__main__":
    sys.exit(main())
