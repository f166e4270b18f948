#!/usr/bin/env python3
"""PyTorch's own launcher tests (test/distributed/launcher/test_run.py, PyTorch 2.11 and main),
replayed as command lines against ddprun and, where the venv has it, torchrun 2.11 (issue 59).

Each row of CASES is one command line of a test_run.py case: the same arguments and PET_*
variables, a worker of this folder that honours the contract of PyTorch's bin/ script it stands
for, and the case's own assertion, checked for both launchers. A known, documented difference is
its own column (EXIT_64), so any other difference fails the test. Written for ddprun: no code of
PyTorch's is copied.

Usage: suite.py LAUNCHER [CASE...] (all cases by default; --list: the table and what is not
ported). LAUNCHER is the path of ddprun or of torchrun (which one is told by its name). Environment:
T (a scratch folder), PYTHON_EXEC (the workers' interpreter, with torch), JOBS (runs at once,
default 4). The runs go in parallel, so each torchrun run that would listen on its default
MASTER_PORT 29500 (one node, static rendezvous: two at once collide) gets a free one as
PET_MASTER_PORT; ddprun runs get exactly the case's command line (one node, it takes a free port).
"""
import concurrent.futures
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# The outcomes (what each case asserts):
#   files N   exit 0, and the run's folder holds exactly the files 0..N-1 (one per global rank)
#   refused   the command line is refused before any worker starts (torchrun: a ValueError or
#             RuntimeError, exit 1); the folder stays empty
#   failed    the worker's RuntimeError fails the run (torchrun: ChildFailedError, exit 1)
#   runs      exit 0 ("nothing to validate, just make sure it runs")
#   out TEXT  exit 0, and the first line of {out} is TEXT
#   stdout RE exit 0, and the files 0..nproc-1, and each rank's line matches RE (with {i}) on stdout
COMMON = ["--monitor-interval=1", "--start-method=spawn"]
SCRIPT = [f"{HERE}/touch_rank.py", "--touch-file-dir={dir}"]
SH = [f"{HERE}/touch_rank.sh", "{dir}"]
ELASTIC = ["--rdzv-backend=c10d", "--rdzv-endpoint=localhost:{port}"]
LAUNCHED = [f"{HERE}/elastic_launched.py", "--out-file={out}"]
BASH = ["--nnodes=1", "--nproc-per-node=4", "--rdzv-id={id}"] + COMMON + ["--no-python"]

# The known differences, each in docs/torchrun.md ("What differs"): {launcher: what it does instead}.
# A refused command line exits 64 (EX_USAGE) with one line on ddprun, where torchrun's Python
# exception (a traceback) exits 1.
EXIT_64 = {"ddprun": {"exit": 64}}

# (case (test_run.py's name, /step for a second command line of one case), arguments, PET_* and
#  other variables, outcome[, known difference])
CASES = [
    ("test_launch_user_script_python",
     ["--nnodes=1", "--nproc-per-node=4", "--rdzv-id={id}"] + COMMON + SCRIPT, {}, ("files", 4)),
    ("test_launch_user_script_python_caffe2_bc",
     ["--nnodes=1", "--nproc-per-node=4"] + COMMON
     + ["--master-addr=localhost", "--master-port={port}", "--node-rank=0"] + SCRIPT, {}, ("files", 4)),
    ("test_launch_user_script_bash/module", BASH + ["--module"] + SH, {}, ("refused",), EXIT_64),
    ("test_launch_user_script_bash", BASH + SH, {}, ("files", 4)),
    ("test_launch_user_script_default_nproc/module",
     ["--nnodes=1", "--rdzv-id={id}"] + COMMON + ["--no-python", "--module"] + SH, {}, ("refused",), EXIT_64),
    ("test_launch_user_script_default_nproc",
     ["--nnodes=1", "--rdzv-id={id}"] + COMMON + ["--no-python"] + SH, {}, ("files", 1)),
    ("test_launch_with_env_vars/module", SH,
     {"PET_NNODES": "1", "PET_NPROC_PER_NODE": "4", "PET_RDZV_ID": "{id}", "PET_MONITOR_INTERVAL": "1",
      "PET_START_METHOD": "spawn", "PET_NO_PYTHON": "1", "PET_MODULE": "1"}, ("refused",), EXIT_64),
    ("test_launch_with_env_vars", SH,
     {"PET_NNODES": "1", "PET_NPROC_PER_NODE": "4", "PET_RDZV_ID": "{id}", "PET_MONITOR_INTERVAL": "1",
      "PET_START_METHOD": "spawn", "PET_NO_PYTHON": "1", "PET_MODULE": "0"}, ("files", 4)),
    # The case mocks torch.accelerator.is_available() to False: here run only where no GPU is
    # visible (CI), where auto is os.cpu_count() workers in torchrun 2.11.
    ("test_nproc_launch_auto_configurations",
     ["--nnodes=1", "--nproc-per-node=auto", "--rdzv-id={id}"] + COMMON + ["--no-python"] + SH, {},
     ("files", os.cpu_count())),
    ("test_nproc_launch_number_configurations",
     ["--nnodes=1", "--nproc-per-node=4", "--rdzv-id={id}"] + COMMON + ["--no-python"] + SH, {}, ("files", 4)),
    ("test_nproc_launch_unknown_configurations",
     ["--nnodes=1", "--nproc-per-node=unknown", "--rdzv-id={id}"] + COMMON + ["--no-python"] + SH, {},
     ("refused",), EXIT_64),
    ("test_launch_elastic",
     ["--nnodes=1:2", "--nproc-per-node=4"] + ELASTIC
     + ["--rdzv-conf='join_timeout=5,last_call_timeout=1,timeout=5'", "--rdzv-id={id}"] + COMMON + SCRIPT,
     {}, ("files", 4)),
    ("test_launch_elastic_worker_raise_exception",
     ["--nnodes=1:2", "--nproc-per-node=4"] + ELASTIC
     + ["--rdzv-conf='join_timeout=5,last_call_timeout=1,timeout=5'", "--rdzv-id={id}", "--monitor-interval=1",
        "--max-restarts=0", "--start-method=spawn", f"{HERE}/touch_rank.py", "--fail"], {}, ("failed",)),
    ("test_launch_standalone",
     ["--nnodes=1", "--nproc-per-node=4", "--standalone"] + COMMON + SCRIPT, {}, ("files", 4)),
    ("test_launch_run_path",
     ["--run-path", "--nnodes=1", "--nproc-per-node=4"] + COMMON + SCRIPT, {}, ("files", 4)),
    # Two launchers at once with this command line (the case starts one more in a process).
    ("test_launch_elastic_multiple_agents",
     ["--nnodes=1:2", "--nproc-per-node=4"] + ELASTIC + ["--rdzv_conf=timeout=5", "--rdzv-id={id}"]
     + COMMON + SCRIPT, {}, ("files", 8)),
    # The case calls parse_min_max_nnodes("2:20:30") (a RuntimeError): the same value on the
    # command line.
    ("test_min_max_nodes_parse",
     ["--nnodes=2:20:30", "--nproc-per-node=1", "--no-python"] + SH, {}, ("refused",), EXIT_64),
    ("test_is_torchelastic_launched",
     ["--run-path", "--nnodes=1", "--nproc-per-node=1", "--monitor-interval=1"] + LAUNCHED, {}, ("out", "True")),
    # The case mocks the entry points so that --logs_specs=default loads DefaultLogsSpecs, which
    # torchrun 2.11's own entry point does anyway: the command line as it is.
    ("test_is_torchelastic_launched_with_logs_spec_defined",
     ["--run-path", "--nnodes=1", "--nproc-per-node=1", "--monitor-interval=1", "--logs_specs=default"]
     + LAUNCHED, {}, ("out", "True")),
    ("test_logs_logs_spec_entrypoint_must_be_defined",
     ["--run-path", "--nnodes=1", "--nproc-per-node=1", "--monitor-interval=1", "--logs_specs=DOESNOT_EXIST",
      f"{HERE}/elastic_launched.py"], {}, ("refused",), EXIT_64),
    ("test_init_method_tcp_with_torchelastic",
     ["--run-path", "--nnodes=1", "--nproc-per-node=4", "--master-addr=localhost", "--master-port={port}",
      "--monitor-interval=1", f"{HERE}/init_method.py", "--init-method=tcp://localhost:{port}"], {}, ("runs",)),
    ("test_init_method_env_with_torchelastic",
     ["--run-path", "--nnodes=1", "--nproc-per-node=4", "--master-addr=localhost", "--master-port={port}",
      "--monitor-interval=1", f"{HERE}/init_method.py", "--init-method=env://"], {}, ("runs",)),
    ("test_capture_logs_using_default_logs_specs",
     ["--nnodes=1", "--nproc-per-node=4", "--rdzv-id={id}", "--redirect=3", "--tee=3"] + COMMON
     + ["--no-python"] + SH, {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "[rank${rank}]: "},
     ("stdout", r"[rank{i}]: creating ")),
]

# Cases of test_run.py that are not ported, and why (printed by --list).
NOT_PORTED = {
    "test_nproc_gpu_launch_configurations": "mocks torch.cuda/torch.accelerator to fake 3 GPUs inside torchrun's "
    "process; ddprun counts GPUs with nvidia-smi and /proc/driver/nvidia, which no Python mock reaches",
    "test_nproc_xpu_launch_configurations": "mocks torch.xpu/torch.accelerator to fake 3 XPUs; ddprun has no XPU support",
    "test_launch_elastic_agent_raise_exception": "mocks LocalElasticAgent.run to raise; ddprun has no Python agent",
    "test_launch_shutdown": "mocks LocalElasticAgent and the rendezvous handler to count shutdown() calls; "
    "internals a native launcher does not have",
    "test_virtual_local_rank": "needs two GPUs (torch.compile'd code per device); CI has none "
    "(tests/launcher/torchrun_compat_test.sh compares --virtual-local-rank's environment instead)",
    "test_launch_elastic_worker_raise_exception (its events.record mock)": "ported, but not its assertion that "
    "torchrun's events.record() was called once (a mock of torchrun's internals)",
    "launch_test.py": "tests torch.distributed.launch (deprecated; --use-env, --local-rank given as an argument), "
    "which ddprun does not stand for, and PyTorch itself does not run it ('not currently used')",
}

# "test_is_not_torchelastic_launched" runs the worker with no launcher: the control that
# elastic_launched.py says False outside a launcher, so that its True above means something.
CONTROL = ("test_is_not_torchelastic_launched", ("out", "False"))

_ports_lock = threading.Lock()
_ports = set()


def free_port():
    """A port that binds now, below the ephemeral range (as tests/lib.sh's free_tcp_port): one the
    kernel hands out as a connection's source port could be taken before the launcher binds it."""
    ceiling = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    with _ports_lock:
        while True:
            port = random.randrange(10000, ceiling)
            if port in _ports:
                continue
            with socket.socket() as s:
                try:
                    s.bind(("", port))
                except OSError:
                    continue
            _ports.add(port)
            return port


def base_env():
    env = {k: v for k, v in os.environ.items() if not k.startswith("PET_")}
    env.pop("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", None)
    env["TEST_SENTINEL_PARENT"] = "FOOBAR"  # test_run.py's setUp; touch_rank.py needs it
    return env


class TorchrunForks:
    """torchrun_forks.py, started once: torch.distributed.run.main(args) in a fork per run, so that
    torch is imported once, not once per case (about two seconds of CPU each)."""

    def __init__(self, torchrun):
        python = os.path.join(os.path.dirname(torchrun), "python")
        self.proc = subprocess.Popen([python, f"{HERE}/torchrun_forks.py"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        self.lock = threading.Lock()
        self.results = {}
        self.done = {}
        threading.Thread(target=self.read, daemon=True).start()

    def read(self):
        for line in self.proc.stdout:
            reply = json.loads(line)
            with self.lock:
                self.results[reply["id"]] = reply["rc"]
                self.done[reply["id"]].set()
        with self.lock:  # it ended: every run still waiting fails
            for rid, event in self.done.items():
                self.results.setdefault(rid, f"torchrun_forks.py ended ({self.proc.wait()})")
                event.set()

    def run(self, args, env, out_path, err_path, timeout):
        with self.lock:
            rid = len(self.done)
            self.done[rid] = threading.Event()
            self.proc.stdin.write(json.dumps({"id": rid, "args": args, "env": env, "out": out_path,
                                              "err": err_path, "timeout": timeout}) + "\n")
            self.proc.stdin.flush()
        self.done[rid].wait()
        return self.results[rid]


FORKS = None


def run(cmd, env, out_path, err_path, timeout=240):
    if FORKS and os.path.basename(cmd[0]) == "torchrun":
        return FORKS.run(cmd[1:], env, out_path, err_path, timeout)
    with open(out_path, "w") as out, open(err_path, "w") as err:
        p = subprocess.Popen(cmd, env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            return p.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            return "timeout"


def check(launcher, outcome, differs, rcs, folder, out, err):
    """The case's own assertion; returns a list of what failed."""
    kind = outcome[0]
    problems = []
    want = differs.get(launcher, {}).get("exit", 1 if kind in ("refused", "failed") else 0)
    if any(rc != want for rc in rcs):
        problems.append(f"exit {rcs}, expected {want}")
    listing = sorted(os.listdir(folder))
    text_out = open(out).read()
    text_err = open(err).read()
    if kind == "files" or kind == "stdout":
        n = outcome[1] if kind == "files" else 4
        if set(listing) != {str(i) for i in range(n)}:
            problems.append(f"files {listing}, expected 0..{n - 1}")
    if kind == "stdout":
        for i in range(4):
            if outcome[1].replace("{i}", str(i)) not in text_out:
                problems.append(f"stdout lacks {outcome[1].replace('{i}', str(i))!r}")
    if kind == "refused":
        if listing:
            problems.append(f"refused, yet workers ran: {listing}")
        if launcher == "torchrun" and not any(e in text_err for e in ("ValueError", "RuntimeError")):
            problems.append("no ValueError or RuntimeError on stderr")
        if launcher == "ddprun" and not (text_err.startswith("ddprun: error: ") and text_err.count("\n") == 1):
            problems.append("stderr is not one line 'ddprun: error: ...'")
    if kind == "failed":
        if "raising exception since --fail flag was set" not in text_err:
            problems.append("the worker's RuntimeError is not on stderr")
        if launcher == "torchrun" and "ChildFailedError" not in text_err:
            problems.append("no ChildFailedError")
    if kind == "out":
        path = os.path.join(folder, "out")
        got = open(path).readline() if os.path.exists(path) else "(no file)"
        if got != outcome[1]:
            problems.append(f"out file says {got!r}, expected {outcome[1]!r}")
    return problems


def run_case(name, args, env_vars, outcome, differs, launcher, launcher_path, scratch):
    tag = name.replace("/", ".") + "." + launcher
    folder = os.path.join(scratch, tag)  # the case's test_dir
    os.makedirs(folder)
    fill = {"dir": folder, "out": os.path.join(folder, "out"), "port": str(free_port()),
            "id": str(abs(hash(tag)) % 10**12)}
    def filled(text):  # {dir} and the like; ${rank} is the launcher's
        return text if "${" in text else text.format(**fill)
    cmd = [launcher_path] + [filled(a) for a in args]
    env = base_env()
    env.update({k: filled(v) for k, v in env_vars.items()})
    if launcher == "torchrun" and not any(a.startswith(("--master-port", "--rdzv-endpoint", "--standalone"))
                                          for a in args):
        env["PET_MASTER_PORT"] = str(free_port())
    out, err = os.path.join(scratch, tag + ".out"), os.path.join(scratch, tag + ".err")
    start = time.monotonic()
    if name == "test_launch_elastic_multiple_agents":
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            second = pool.submit(run, cmd, env, out + "2", err + "2")
            rcs = [run(cmd, env, out, err), second.result()]
    else:
        rcs = [run(cmd, env, out, err)]
    took = time.monotonic() - start
    problems = check(launcher, outcome, differs, rcs, folder, out, err)
    return name, launcher, problems, took, err


def run_control(scratch):
    folder = os.path.join(scratch, "control")
    os.makedirs(folder)
    out = os.path.join(folder, "out")
    env = {k: v for k, v in base_env().items() if not k.startswith("TORCHELASTIC_")}
    start = time.monotonic()
    rc = run([os.environ["PYTHON_EXEC"], f"{HERE}/elastic_launched.py", f"--out-file={out}"], env,
             os.path.join(scratch, "control.out"), os.path.join(scratch, "control.err"))
    got = open(out).readline() if os.path.exists(out) else "(no file)"
    problems = [] if rc == 0 and got == "False" else [f"exit {rc}, out {got!r}, expected 0 and 'False'"]
    return CONTROL[0], "none", problems, time.monotonic() - start, os.path.join(scratch, "control.err")


def gpu_visible():
    return shutil.which("nvidia-smi") is not None and subprocess.run(
        ["nvidia-smi", "-L"], capture_output=True).stdout.strip() != b""


def main():
    if "--list" in sys.argv:
        for name, args, env, outcome, *differs in CASES:
            print(f"{name}: {outcome}{' differs: %s' % differs[0] if differs else ''}")
        for name, why in NOT_PORTED.items():
            print(f"not ported: {name}: {why}")
        return 0
    path = os.path.abspath(sys.argv[1])
    launcher = "torchrun" if os.path.basename(path) == "torchrun" else "ddprun"
    wanted = set(sys.argv[2:])
    if launcher == "torchrun":
        global FORKS
        FORKS = TorchrunForks(path)
    scratch = os.environ["T"] + "/suite"
    os.makedirs(scratch)
    started = time.monotonic()
    jobs = []
    with concurrent.futures.ThreadPoolExecutor(int(os.environ.get("JOBS", "4"))) as pool:
        for name, args, env_vars, outcome, *differs in CASES:
            if wanted and name not in wanted:
                continue
            if name == "test_nproc_launch_auto_configurations" and gpu_visible():
                print(f"skipped: {name} (a GPU is visible; the case mocks none)")
                continue
            jobs.append(pool.submit(run_case, name, args, env_vars, outcome, differs[0] if differs else {},
                                    launcher, path, scratch))
        if not wanted or CONTROL[0] in wanted:
            jobs.append(pool.submit(run_control, scratch))
        failed = 0
        for job in jobs:
            name, who, problems, took, err = job.result()
            if problems:
                failed += 1
                print(f"FAIL {name} [{who}] ({took:.1f} s): {'; '.join(problems)}")
                with open(err) as f:
                    print("  | " + "\n  | ".join(f.read().splitlines()[-15:]))
            else:
                print(f"ok   {name} [{who}] ({took:.1f} s)")
    if FORKS:
        FORKS.proc.stdin.close()
        FORKS.proc.wait()
    print(f"{launcher}: {len(jobs) - failed} of {len(jobs)} runs as the case asserts, "
          f"in {time.monotonic() - started:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
