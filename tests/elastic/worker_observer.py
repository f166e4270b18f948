#!/usr/bin/env python3
"""Sees workers die, for split_brain_check.py (issue 43). Standard library only.

usage: worker_observer.py RUN_DIR STOP_FILE [NODE]   (NODE: that node's files only)

Writes RUN_DIR/observer.ready once it watches: start the nodes after that, since a worker first
seen already dead is recorded gone only when seen (an upper bound, late by the observer's lag).

Follows a run's files as they grow: each node NAME's event log (NAME.events: ddprun's
worker_started) and its workers' records (rec.NAME: their own "start"). For each worker seen
starting in either, it appends a "gone" record to rec.NAME at the moment the worker ends (a pidfd of
it becomes readable, which it does when the process becomes a zombie; one already gone when it is
first seen is written then). That is evidence of its end that comes neither from the worker (a
SIGKILLed worker writes nothing, and one killed at once never wrote its own start) nor from its
ddprun (a ddprun stopped or killed logs it late, or never). Ends once STOP_FILE exists and every
worker seen is gone, or 120 s after STOP_FILE.
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


def new_lines(path, offsets):
    """The complete lines added to `path` since the last call (a line still being written waits)."""
    with open(path, "rb") as f:
        f.seek(offsets.get(path, 0))
        data = f.read()
    end = data.rfind(b"\n") + 1
    offsets[path] = offsets.get(path, 0) + end
    for line in data[:end].splitlines():
        try:
            yield json.loads(line)
        except ValueError:
            continue


def main():
    run, stop_file = sys.argv[1], sys.argv[2]
    only = sys.argv[3] if len(sys.argv) > 3 else "*"
    offsets = {}
    alive = {}     # pidfd -> (records file, (node, pid), rank, restart)
    watched = set()  # (node, pid) of the workers watched now
    poller = select.poll()
    stop_deadline = None

    def gone(fd):
        path, key, rank, restart = alive.pop(fd)
        watched.discard(key)
        poller.unregister(fd)
        os.close(fd)
        with open(path, "a") as f:
            f.write(json.dumps({"what": "gone", "rank": rank, "pid": key[1], "restart": restart,
                                "real": time.time(), "mono": time.monotonic()}) + "\n")

    def watch(node, pid, rank, restart):
        if (node, pid) in watched:
            return
        try:
            fd = os.pidfd_open(pid)
        except OSError:  # already reaped
            fd = os.open("/dev/null", os.O_RDONLY)
        watched.add((node, pid))
        alive[fd] = (os.path.join(run, "rec." + node), (node, pid), rank, restart)
        poller.register(fd, select.POLLIN)
        if zombie(pid):
            gone(fd)

    while True:
        for path in glob.glob(os.path.join(run, only + ".events")):
            node = os.path.basename(path)[: -len(".events")]
            for e in new_lines(path, offsets):
                if e.get("event") == "worker_started":
                    watch(node, e["pid"], e["rank"], None)
        for path in glob.glob(os.path.join(run, "rec." + only)):
            node = os.path.basename(path)[len("rec."):]
            for r in new_lines(path, offsets):
                if r.get("what") == "start":
                    watch(node, r["pid"], r["rank"], r["restart"])
        for fd, _ in poller.poll(5):
            gone(fd)
        if not os.path.exists(os.path.join(run, "observer.ready")):
            open(os.path.join(run, "observer.ready"), "w").close()
        if stop_deadline is None and os.path.exists(stop_file):
            stop_deadline = time.time() + 120
        if stop_deadline is not None and (not alive or time.time() > stop_deadline):
            return 0 if not alive else 1


if __name__ == "__main__":
    sys.exit(main())
