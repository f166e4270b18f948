"""snapshot_figures.py's copy part (see its docstring): the nodes of a copy on loopback or in
network namespaces, ddprun's copies timed with each node's memory sampled, the raw TCP baselines on
the same link; and the helpers both files use."""
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import BENCH_DIR, free_port, stop_launcher  # noqa: E402
from goodput_jobs import NSNODE, arguments, descendants, sweep  # noqa: E402

WORKER = os.path.join(BENCH_DIR, "snapshot_figures_worker.py")
SECRET = "snapshot-figures-secret"
GB = 1e9


def load():
    return os.getloadavg()[0]


def med(values, fmt="{:.2f}", best=min):
    if not values:
        return "-"
    return f"{fmt.format(statistics.median(values))} ({fmt.format(best(values))})"


def machine():
    model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    mem = next(int(line.split()[1]) for line in open("/proc/meminfo") if line.startswith("MemTotal"))
    return f"{model}, {os.cpu_count()} cores, {mem / 2**20:.1f} GiB, kernel {platform.release()}"


def wait_for(what, timeout, alive=lambda: True, step=0.005):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and alive():
        found = what()
        if found:
            return found
        time.sleep(step)
    return None


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None



# ---- the network namespaces -----------------------------------------------------------------------

class Netns:
    """Hosts 1..n in network namespaces of their own (127.1.0.I on eth0, a veth whose peer is on
    a bridge in a namespace of its own), as tests/elastic/netfault.sh makes them."""

    def __init__(self, n):
        self.prefix = f"sf{os.getpid()}"
        self.n = n
        sw = self.prefix + "sw"
        self.ip("netns", "add", sw)
        self.ip("-n", sw, "link", "set", "lo", "up")
        self.ip("-n", sw, "link", "add", "br0", "type", "bridge")
        self.ip("-n", sw, "link", "set", "br0", "up")
        for i in range(1, n + 1):
            ns, port = self.ns(i), f"{self.prefix}p{i}"
            self.ip("netns", "add", ns)
            self.ip("-n", ns, "link", "set", "lo", "up")
            self.ip("link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", port, "netns", sw)
            self.ip("-n", sw, "link", "set", port, "master", "br0", "up")
            subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.conf.all.route_localnet=1",
                            "net.ipv4.conf.eth0.route_localnet=1"], check=True)
            self.ip("-n", ns, "route", "del", "local", "127.0.0.0/8", "dev", "lo", "table", "local")
            self.ip("-n", ns, "route", "add", "local", "127.0.0.0/16", "dev", "lo", "table", "local")
            self.ip("-n", ns, "addr", "add", f"{self.addr(i)}/16", "dev", "eth0")
            self.ip("-n", ns, "link", "set", "eth0", "up")

    @staticmethod
    def ip(*a):
        subprocess.run(["ip", *a], check=True)

    def ns(self, i):
        return f"{self.prefix}h{i}"

    @staticmethod
    def addr(i):
        return f"127.1.0.{i}"

    def exec(self, i):
        return ["ip", "netns", "exec", self.ns(i)]

    def down(self):
        for name in [self.ns(i) for i in range(1, self.n + 1)] + [self.prefix + "sw"]:
            subprocess.run(["ip", "netns", "pids", name], capture_output=True)
            subprocess.run(["ip", "netns", "del", name], capture_output=True)


# ---- copy ---------------------------------------------------------------------------------------

def link_bytes(pid, dev):
    """The bytes sent on interface `dev` of process `pid`'s network namespace."""
    with open(f"/proc/{pid}/net/dev") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name.strip() == dev:
                return int(rest.split()[8])
    return 0


def cpu(pid):
    """Process `pid`'s CPU seconds (user + system), its threads' included."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS"))
    except (OSError, StopIteration):
        return 0


def shm_used(pid):
    try:
        st = os.statvfs(f"/proc/{pid}/root/dev/shm")
        return (st.f_blocks - st.f_bfree) * st.f_frsize
    except OSError:
        return 0


class Sampler(threading.Thread):
    """Every 10 ms: each node's ddprun VmRSS and its /dev/shm's use; the peaks."""

    def __init__(self, pids):
        super().__init__(daemon=True)
        self.pids, self.stop = pids, threading.Event()
        self.before = [(rss(p), shm_used(p)) for p in pids]
        self.peak = list(self.before)

    def run(self):
        while not self.stop.wait(0.01):
            for i, p in enumerate(self.pids):
                r, s = rss(p), shm_used(p)
                self.peak[i] = (max(self.peak[i][0], r), max(self.peak[i][1], s))


def listening(pid, port):
    """Whether something listens on `port` in process `pid`'s network namespace."""
    lines = []
    for table in ("tcp", "tcp6"):
        with open(f"/proc/{pid}/net/{table}") as f:
            lines += list(f)[1:]
    return any(line.split()[3] == "0A" and int(line.split()[1].rsplit(":", 1)[1], 16) == port for line in lines)


def ddprun_pid(pid, ddprun):
    """The ddprun process at or below `pid` (ip netns exec, unshare and sh exec it, or fork it):
    the first started whose program is `ddprun`."""
    found = [(0, pid)] if arguments(pid)[:1] == [ddprun] else []
    found += sorted((start, p) for p, start in descendants(pid).items() if arguments(p)[:1] == [ddprun])
    return found[0][1] if found else pid


class CopyJob:
    """n ddprun nodes of one repl worker each, on loopback (net None) or in `net`'s namespaces."""

    def __init__(self, args, n, net, replicate, d):
        self.d, self.n, self.net = d, n, net
        port = free_port()
        host = net.addr(1) if net else "127.0.0.2"
        env = dict(os.environ, OMP_NUM_THREADS="1")
        env.pop("DDPRUN_RDZV_SECRET", None)
        if replicate:
            env["DDPRUN_RDZV_SECRET"] = SECRET
        self.procs = []
        for i in range(n):
            addr = net.addr(i + 1) if net else f"127.0.0.{i + 2}"
            command = (net.exec(i + 1) if net else []) + NSNODE + [
                args.ddprun, f"--local_addr={addr}", f"--nnodes={n}", "--nproc_per_node=1", "--rdzv_backend=c10d",
                f"--rdzv_endpoint={host}:{port}", f"--rdzv_id=snapfig-{os.getpid()}-{port}",
                "--rdzv_conf=join_timeout=60", sys.executable, WORKER, "repl", d, str(args.mib), str(args.copies)]
            with open(os.path.join(d, f"node.log.{i}"), "wb") as log:
                self.procs.append(subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT,
                                                   start_new_session=True))
            if i == 0:  # the host first: it hosts the store
                wait_for(lambda: self.listening(port), 60, self.alive, 0.02)
        ready = wait_for(lambda: all(os.path.exists(os.path.join(d, f"node.{r}")) for r in range(n)), 120, self.alive)
        if not ready:
            raise RuntimeError(self.failure("the workers did not start"))
        self.pids = [ddprun_pid(p.pid, args.ddprun) for p in self.procs]
        self.rank_node = {}
        for r in range(n):
            wpid = read_json(os.path.join(d, f"node.{r}"))["pid"]
            self.rank_node[r] = next(i for i, p in enumerate(self.pids) if wpid in descendants(p))

    def listening(self, port):
        return listening(self.procs[0].pid, port)

    def alive(self):
        return all(p.poll() is None for p in self.procs)

    def failure(self, why):
        logs = "".join(open(os.path.join(self.d, f"node.log.{i}"), errors="replace").read()[-1500:]
                       for i in range(len(self.procs)))
        return f"{why}:\n{logs}"

    def link_bytes(self):
        if self.net:
            return sum(link_bytes(p, "eth0") for p in self.pids)
        return link_bytes(self.pids[0], "lo")

    def copy(self, k, replicate):
        """Copy k: {"write", "arrive": {rank: seconds after the commit}, "bytes", "rss", "shm"}."""
        before = self.link_bytes()
        cpu_before = [cpu(p) for p in self.pids]
        sampler = Sampler(self.pids)
        sampler.start()
        open(os.path.join(self.d, f"go.{k}"), "w").close()
        commit = wait_for(lambda: read_json(os.path.join(self.d, f"commit.{k}")), 120, self.alive)
        if not commit:
            raise RuntimeError(self.failure(f"copy {k} was not committed"))
        arrive = {}
        if replicate:
            for r in range(1, self.n):
                got = wait_for(lambda: read_json(os.path.join(self.d, f"arrive.{k}.{r}")), 300, self.alive)
                if not got:
                    raise RuntimeError(self.failure(f"copy {k} did not reach rank {r}"))
                arrive[r] = got["t"] - commit["t"]
        else:
            time.sleep(1)
        sampler.stop.set()
        sampler.join()
        node0 = self.rank_node[0]
        return {"write": commit["t"] - commit["start"], "arrive": arrive, "bytes": self.link_bytes() - before,
                "rss": [(sampler.peak[i][0] - sampler.before[i][0], sampler.before[i][0]) for i in range(self.n)],
                "shm": [sampler.peak[i][1] for i in range(self.n)], "origin": node0,
                "cpu": [cpu(p) - c for p, c in zip(self.pids, cpu_before)]}

    def stop(self):
        open(os.path.join(self.d, "stop"), "w").close()
        seen = {}
        for p in self.procs:
            seen.update(descendants(p.pid))
        for p in self.procs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                stop_launcher(p)
        sweep(seen, self.d)


def baselines(args, net, src, d):
    """One of each raw TCP copy from node 1 to node 2 of `net` (loopback: 127.0.0.2 → .3):
    {name: GB/s}."""
    a_exec, b_exec = (net.exec(1), net.exec(2)) if net else ([], [])
    b_addr = net.addr(2) if net else "127.0.0.3"
    out = {}
    port = free_port()
    server = subprocess.Popen(b_exec + ["iperf3", "-s", "-1", "-B", b_addr, "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: listening(server.pid, port), 30, lambda: server.poll() is None)
        r = subprocess.run(a_exec + ["iperf3", "-c", b_addr, "-p", str(port), "-n", f"{args.mib}M", "-J"],
                           capture_output=True, text=True, timeout=120)
        if r.returncode == 0:
            end = json.loads(r.stdout)["end"]
            out["iperf3"] = end["sum_received"]["bits_per_second"] / 8 / GB
            seconds = end["sum_received"]["seconds"]
            out["iperf3 cpu"] = (end["cpu_utilization_percent"]["host_total"] +
                                 end["cpu_utilization_percent"]["remote_total"]) / 100 * seconds
        else:
            print(f"iperf3 failed: {r.stdout[-300:]} {r.stderr[-300:]}", flush=True)
    finally:
        server.kill()
        server.wait()
    for name, tagged in (("python", "0"), ("python+hmac", "1")):
        for f in ("listening", "recv", "send"):
            if os.path.exists(os.path.join(d, f)):
                os.unlink(os.path.join(d, f))
        dst = f"/dev/shm/snapfig-dst-{os.getpid()}"
        port = free_port()
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        recv = subprocess.Popen(b_exec + [sys.executable, WORKER, "recv", b_addr, str(port), dst, d, tagged])
        wait_for(lambda: os.path.exists(os.path.join(d, "listening")), 30)
        subprocess.run(a_exec + [sys.executable, WORKER, "send", b_addr, str(port), src, d, tagged], check=True)
        recv.wait(timeout=120)
        os.unlink(dst)
        used = resource.getrusage(resource.RUSAGE_CHILDREN)
        out[name + " cpu"] = used.ru_utime + used.ru_stime - children.ru_utime - children.ru_stime
        out[name] = args.mib * 2**20 / (read_json(os.path.join(d, "recv"))["t"] -
                                        read_json(os.path.join(d, "send"))["start"]) / GB
    return out


def run_copy(args):
    src = f"/dev/shm/snapfig-src-{os.getpid()}"
    with open(src, "wb") as f:
        block = os.urandom(64 * 2**20)
        for _ in range(0, args.mib * 2**20, len(block)):
            f.write(block)
    net = None
    try:
        net = Netns(3)
        for link in ("loopback", "netns"):
            setup = net if link == "netns" else None
            for n, replicate in ((2, True), (3, True), (2, False)):
                if link == "netns" and not replicate:
                    continue
                print(f"\n## copy: {args.mib} MiB, {n} nodes, {link} "
                      f"({'veth pairs on a bridge' if setup else 'lo'}), "
                      f"{'replication (DDPRUN_RDZV_SECRET set)' if replicate else 'no replication (no secret)'}; "
                      f"{args.copies} copies; load {load():.2f}", flush=True)
                with tempfile.TemporaryDirectory(prefix="snapshot-figures-") as d:
                    job = CopyJob(args, n, setup, replicate, d)
                    copies, raw = [], []
                    try:
                        for k in range(1, args.copies + 1):
                            copies.append(job.copy(k, replicate))
                            if n == 2 and replicate:
                                raw.append(baselines(args, setup, src, d))
                    finally:
                        job.stop()
                report_copy(args, n, replicate, copies, raw)
    finally:
        if net:
            net.down()
        os.unlink(src)


def report_copy(args, n, replicate, copies, raw):
    size = args.mib * 2**20
    print(f"writing the file on the origin (ckpt.tmp, before its rename): {med([c['write'] for c in copies], '{:.3f} s')}")
    if replicate:
        print("| to | commit → whole by its final name: median (min) | GB/s: median (max) | "
              "CPU seconds a copy (every node's ddprun; the baselines: both ends): median (min) |")
        print("|---|---|---|---|")
        for r in range(1, n):
            t = [c["arrive"][r] for c in copies]
            used = med([sum(c["cpu"]) for c in copies], "{:.2f} s") if r == 1 else ""
            print(f"| rank {r}'s node ({'B' if r == 1 else 'C'}) | {med(t, '{:.3f} s')} | "
                  f"{med([size / x / GB for x in t], best=max)} | {used} |")
        for name in ("iperf3", "python", "python+hmac"):
            v = [b[name] for b in raw if name in b]
            if v:
                print(f"| raw TCP, {name}, node A → B | | {med(v, best=max)} | "
                      f"{med([b[name + ' cpu'] for b in raw if name + ' cpu' in b], '{:.2f} s')} |")
    print(f"bytes on the link a copy: {med([c['bytes'] / size for c in copies], '{:.2f}', max)} × the file")
    print("| node | ddprun VmRSS before | its peak during the copy, over before: median (max) | /dev/shm's peak use |")
    print("|---|---|---|---|")
    for i in range(n):
        role = "origin" if copies[0]["origin"] == i else "receives"
        print(f"| {i} ({role}) | {med([c['rss'][i][1] / 2**20 for c in copies], '{:.1f} MiB')} | "
              f"+{med([c['rss'][i][0] / 2**20 for c in copies], '{:.1f} MiB', max)} | "
              f"{med([c['shm'][i] / 2**20 for c in copies], '{:.0f} MiB', max)} |")
