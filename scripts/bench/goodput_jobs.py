"""The jobs of goodput.py and the processes it watches: one node of NPROC workers (Single), or two
nodes of one worker each and a hot spare, each node in a mount namespace of its own (Nodes: --kill
node, root only); finding a run's workers, waiting for them, and sweeping what a launcher left."""
import collections
import os
import shutil
import signal
import socket
import subprocess
import time


# tests/elastic/nodes.sh's nsnode: a mount namespace with a private /dev/shm and /var/tmp.
NSNODE = ["unshare", "-m", "--propagation", "private", "sh", "-c",
          'mount -t tmpfs -o mode=1777 none /dev/shm && mount -t tmpfs -o mode=1777 none /var/tmp && exec "$@"', "nsnode"]


def processes():
    """{pid: (parent pid, start time in clock ticks, state)} of every process, from /proc."""
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()  # after the command, which may hold spaces
            except OSError:
                continue  # gone meanwhile
            table[int(name)] = (int(fields[1]), int(fields[19]), fields[0])
    return table


def arguments(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode(errors="replace").split("\0")
    except OSError:
        return []


def descendants(root):
    """{pid: start time} of the living processes below `root`."""
    table = processes()
    children = collections.defaultdict(list)
    for pid, (parent, _, _) in table.items():
        children[parent].append(pid)
    found, todo = {}, list(children[root])
    while todo:
        pid = todo.pop()
        if table[pid][2] != "Z":
            found[pid] = table[pid][1]
        todo += children[pid]
    return found


def workers(tree, d):
    """The pids of `tree` that are workers of the run in folder `d`: the folder is their argument
    (ddprun's warm interpreter, also a descendant, names the script but not the folder)."""
    return sorted(pid for pid in tree if d in arguments(pid))


def wait(alive, deadline, ready=lambda: None):
    """Polls `ready` every 10 ms until it returns something (returned), `deadline` (monotonic)
    passes or `alive()` is false (then None)."""
    while alive():
        found = ready()
        if found:
            return found
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.01)
    return None


def sweep(seen, d, grace=5):
    """SIGKILLs what is left of a run `grace` seconds after its launchers exited (ddprun's orphan
    guard, for one, exits just after it): the processes seen below them (the same pid and start
    time) and any process naming its folder; returns their arguments."""
    deadline = time.monotonic() + grace
    while True:
        left = [pid for pid, (_, start, state) in processes().items()
                if state != "Z" and (seen.get(pid) == start or d in arguments(pid))]
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    named = []
    for pid in left:
        named.append(" ".join(arguments(pid)).strip())
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return named


def remove_snapshot_dirs(d):
    """Removes the snapshot folders the workers of the run in `d` named (on this machine's
    /dev/shm; a node's own /dev/shm went with its mount namespace)."""
    path = os.path.join(d, "snapshot_dirs")
    if os.path.exists(path):
        with open(path) as f:
            for folder in set(f.read().split()):
                if os.path.basename(folder).startswith("ddprun-snapshots."):
                    shutil.rmtree(folder, ignore_errors=True)


def listening(port):
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.2", port)) == 0


class Single:
    """One launcher of NPROC workers (--kill worker)."""

    def __init__(self, command, env, d, log):
        self.d = d
        self.proc = subprocess.Popen(command(d), env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs = [self.proc]

    def alive(self):
        return self.proc.poll() is None

    def exited(self):
        return None if self.alive() else f"the launcher exited {self.proc.returncode}"

    def trees(self):
        return [descendants(self.proc.pid)]

    def kill(self, fresh, pick):
        """SIGKILLs the picked worker of `fresh`; the pid, or None where it was gone."""
        victim = fresh[int(pick * len(fresh))]
        try:
            os.kill(victim, signal.SIGKILL)  # a zombie at worst: the launcher reaps it
        except ProcessLookupError:
            return None  # it exited by itself: its round is over, the kill goes to the next
        return victim


class Nodes:
    """Two nodes of one worker and, for ddprun, a hot spare (--kill node); a new node after each
    kill. node(i, d) is node i's command (i = 0 hosts the rendezvous, at 127.0.0.2)."""

    def __init__(self, node, spare, env, d, port):
        self.node, self.env, self.d = node, env, d
        self.procs, self.killed, self.refused = [], set(), set()
        self.start()
        deadline = time.monotonic() + 60
        while not listening(port) and self.procs[0].poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)  # the host first: it hosts the store
        self.start()
        if spare:
            self.start()

    def start(self):
        i = len(self.procs)
        with open(os.path.join(self.d, f"launcher.log.{i}"), "wb") as log:  # each node's output
            self.procs.append(subprocess.Popen(NSNODE + self.node(i, self.d), env=self.env, stdout=log,
                                               stderr=subprocess.STDOUT, start_new_session=True))

    def alive(self):
        return self.procs[0].poll() is None

    def exited(self):
        self.restart_refused()
        gone = [f"node {i} exited {p.returncode}" for i, p in enumerate(self.procs)
                if i not in self.killed | self.refused and p.poll() is not None]
        return "; ".join(gone) or None

    def trees(self):
        self.restart_refused()
        return [descendants(p.pid) for i, p in enumerate(self.procs) if i not in self.killed | self.refused]

    def restart_refused(self):
        """A node started just after a kill can reach the host before the host has counted the
        killed node lost (its closed connection): the host then refuses it, a node too many
        (ddprun exits 69, "already has its 2 nodes and 1 spare"). A scheduler would start it
        again; so does this, and counts it."""
        for i, p in enumerate(self.procs):
            if i in self.killed | self.refused or p.poll() != 69:
                continue
            with open(os.path.join(self.d, f"launcher.log.{i}"), errors="replace") as f:
                if "already has its" in f.read():
                    self.refused.add(i)
                    self.start()

    def kill(self, fresh, pick):
        """SIGKILLs every process of the node (not the host) that runs a worker of `fresh` (the
        launcher first, then what was below it), then starts a new node; the launcher's pid."""
        for i, p in enumerate(self.procs):
            if i == 0 or i in self.killed | self.refused:
                continue
            below = descendants(p.pid)
            if not set(fresh) & set(below):
                continue
            self.killed.add(i)
            p.kill()
            for pid in below:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            p.wait()
            self.start()
            return p.pid
        return None
