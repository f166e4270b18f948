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
worker seen is gone, or 120 s after STOP_FILE. The thread that polls the workers takes a real-time
priority (SCHED_FIFO) where it may (root): on a loaded machine its wake-up, and so each death's
time, is then not late; it sleeps in poll() but for that.
"""

import glob
import json
import os
import select
import sys
import threading
import time


def zombie(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def new_lines(path, offsets):
    """The complete lines added to `path` since the last call (a line still being written waits)."""
    try:
        if os.stat(path).st_size == offsets.get(path, 0):
            return  # unchanged: most files of a long run, at every pass
    except OSError:
        return
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


class Watch:
    """The workers' pidfds, polled by a thread of their own that does nothing else: it takes the
    time as soon as poll() returns, while the main thread reads the files (a long run has hundreds
    of them: a pass takes milliseconds, by which a death seen between passes would be late)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.alive = {}  # pidfd -> (records file, (node, pid), rank, restart)
        self.watched = set()  # (node, pid) of the workers watched now
        self.wake_r, self.wake_w = os.pipe()
        self.poller = select.poll()
        self.poller.register(self.wake_r, select.POLLIN)
        threading.Thread(target=self.run, daemon=True).start()

    def gone(self, fd, when):
        with self.lock:
            path, key, rank, restart = self.alive.pop(fd)
            self.watched.discard(key)
        self.poller.unregister(fd)
        os.close(fd)
        with open(path, "a") as f:
            f.write(json.dumps({"what": "gone", "rank": rank, "pid": key[1], "restart": restart,
                                "real": when[0], "mono": when[1]}) + "\n")

    def add(self, run, node, pid, rank, restart):
        with self.lock:
            if (node, pid) in self.watched:
                return
            self.watched.add((node, pid))
        try:
            fd = os.pidfd_open(pid)
        except OSError:  # already reaped: seen dead now
            fd = os.open("/dev/null", os.O_RDONLY)
        with self.lock:
            self.alive[fd] = (os.path.join(run, "rec." + node), (node, pid), rank, restart)
        os.write(self.wake_w, b"%d\n" % fd)  # the poll thread registers it (and sees it dead if it is)

    def run(self):
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))  # this thread only
        except OSError:
            pass  # not root: an ordinary thread
        pending = b""
        while True:
            ready = self.poller.poll()
            when = (time.time(), time.monotonic())
            for fd, _ in ready:
                if fd != self.wake_r:
                    self.gone(fd, when)
            if any(fd == self.wake_r for fd, _ in ready):
                pending += os.read(self.wake_r, 4096)
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    fd = int(line)
                    self.poller.register(fd, select.POLLIN)
                    with self.lock:
                        pid = self.alive[fd][1][1]
                    if zombie(pid):  # dead before its pidfd was polled: seen now, an upper bound
                        self.gone(fd, (time.time(), time.monotonic()))

    def count(self):
        with self.lock:
            return len(self.alive)


def main():
    run, stop_file = sys.argv[1], sys.argv[2]
    only = sys.argv[3] if len(sys.argv) > 3 else "*"
    sys.setswitchinterval(0.0001)  # the poll thread gets the interpreter at once when it wakes
    offsets = {}
    watch = Watch()
    stop_deadline = None
    while True:
        for path in glob.glob(os.path.join(run, only + ".events")):
            node = os.path.basename(path)[: -len(".events")]
            for e in new_lines(path, offsets):
                if e.get("event") == "worker_started":
                    watch.add(run, node, e["pid"], e["rank"], None)
        for path in glob.glob(os.path.join(run, "rec." + only)):
            node = os.path.basename(path)[len("rec."):]
            for r in new_lines(path, offsets):
                if r.get("what") == "start":
                    watch.add(run, node, r["pid"], r["rank"], r["restart"])
        if not os.path.exists(os.path.join(run, "observer.ready")):
            open(os.path.join(run, "observer.ready"), "w").close()
        if stop_deadline is None and os.path.exists(stop_file):
            stop_deadline = time.time() + 120
        if stop_deadline is not None and (watch.count() == 0 or time.time() > stop_deadline):
            return 0 if watch.count() == 0 else 1
        time.sleep(0.005)


if __name__ == "__main__":
    sys.exit(main())
