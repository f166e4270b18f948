"""Pieces shared by the benchmark scripts of scripts/bench/ (launcher.py, rendezvous.py, ddp.py,
gpu.py, hangs.py)."""
import os
import signal
import socket
import subprocess

# This folder (the Python workers are run from it) and the repository it is in.
BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(BENCH_DIR))
PYTHON_113 = "/usr/bin/python3"  # Debian's python3-torch 1.13

TORCHRUN = [PYTHON_113, "-m", "torch.distributed.run"]
# Debian's torchrun 1.13 fails under Python 3.11 without these (see shared notes); they redirect
# nothing for up to 9 workers. Its default --monitor_interval is 5 s; 0.1 s is the newer default.
TORCHRUN_FIXES = ["--redirects", "9:1", "--tee", "9:1", "--monitor_interval", "0.1"]

TORCH_VERSIONS = ("1.13", "2")


def torch2_python():
    """The PyTorch 2.x virtual environment's python, located as scripts/torch2-env.sh does
    (DDPRUN_TORCH2_VENV, else ~/.cache/ddprun/venv-<pinned version>)."""
    env_sh = os.path.join(ROOT, "scripts", "torch2-env.sh")
    return subprocess.run(["bash", "-c", 'source "$1" && echo "$TORCH2_PYTHON"', "-", env_sh],
                          check=True, capture_output=True, text=True).stdout.strip()


def torch_pair(version):
    """(build folder, python) whose libtorch and torch are the same PyTorch: "1.13" is build/
    (DDPRUN_BUILD_DIR) and Debian's python3; "2" is build-torch2/ (DDPRUN_TORCH2_BUILD_DIR) and
    the venv's python. Exits with a message naming the missing piece."""
    if version == "1.13":
        build = os.environ.get("DDPRUN_BUILD_DIR", os.path.join(ROOT, "build"))
        python, how = PYTHON_113, "scripts/install-deps.sh"
    else:
        build = os.environ.get("DDPRUN_TORCH2_BUILD_DIR", os.path.join(ROOT, "build-torch2"))
        python, how = torch2_python(), "scripts/install-deps.sh --torch2"
    if not os.access(python, os.X_OK):
        raise SystemExit(f"no {python} for torch {version}; run {how}")
    return build, python

# A worker that stamps the wall-clock time of its main() in DIR/start.<restart>.<rank>; in the
# first attempt rank $CRASH_RANK (default 0) stamps DIR/crash.0.x and fails after 0.2 s, the
# others wait to be stopped. Without a launcher it stamps DIR/bare.x.x: its own start-up.
C_WORKER = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
static void stamp(const char* dir, const char* what, const char* rc, const char* rank) {
  struct timespec ts; clock_gettime(CLOCK_REALTIME, &ts);
  char path[4096]; snprintf(path, sizeof path, "%s/%s.%s.%s", dir, what, rc, rank);
  FILE* f = fopen(path, "w"); fprintf(f, "%ld.%09ld\n", (long)ts.tv_sec, ts.tv_nsec); fclose(f);
}
int main(int argc, char** argv) {
  const char* rc = getenv("TORCHELASTIC_RESTART_COUNT");
  const char* rank = getenv("RANK");
  if (rc == NULL) { stamp(argv[1], "bare", "x", "x"); return 0; }
  stamp(argv[1], "start", rc, rank);
  const char* crash = getenv("CRASH_RANK");  /* the rank that fails in the first attempt */
  if (rc[0] == '0') {
    if (strcmp(rank, crash ? crash : "0") == 0) { usleep(200000); stamp(argv[1], "crash", rc, "x"); return 1; }
    pause();
  }
  return 0;
}
"""


def torchrun(version):
    """(torchrun command, options every run adds) for "1.13" or "2". torchrun 2.x needs no
    workaround and already defaults to --monitor-interval 0.1, so it runs with its defaults."""
    if version == "1.13":
        return TORCHRUN, TORCHRUN_FIXES
    return [torch2_python(), "-m", "torch.distributed.run"], []


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]



def terminate_all(procs):
    """SIGTERM to the launchers still running, then waits for every one (a launcher stops its
    workers before it exits)."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        p.wait(timeout=60)


def stop_launcher(proc, grace=30):
    """Stops a launcher started in its own session (Popen's start_new_session=True): SIGTERM, so
    that it stops its workers, then after `grace` seconds SIGKILL; and SIGKILL to whatever is left
    in its process group (torchrun leaves its workers running when it is SIGKILLed). Workers that
    a launcher put in process groups of their own are its to stop."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def read_stamp(path):
    with open(path) as f:
        return float(f.read())


def written_stamps(d, prefix="start.0."):
    """The stamps C_WORKER has finished writing in `d` among the files named `prefix`*: a file
    just created is still empty."""
    stamps = []
    for f in os.listdir(d):
        if f.startswith(prefix):
            try:
                stamps.append(read_stamp(os.path.join(d, f)))
            except ValueError:
                pass  # created, not yet written
    return stamps


# N children of /bin/true started with posix_spawn, then waited for: what any launcher must do
# at least, the floor for launcher.py's table 1 and phases.py.
BARE_SPAWN = r"""
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
extern char** environ;
int main(int argc, char** argv) {
  int n = atoi(argv[1]);
  char* args[] = {argv[2], NULL};
  for (int i = 0; i < n; ++i) {
    pid_t pid;
    if (posix_spawn(&pid, argv[2], NULL, NULL, args, environ) != 0) return 1;
  }
  while (wait(NULL) > 0) {}
  return 0;
}
"""


def compile_c(tmp, name, source):
    """Builds the C program `source` as `tmp`/`name` with gcc -O2; returns its path."""
    src = os.path.join(tmp, name + ".c")
    program = os.path.join(tmp, name)
    with open(src, "w") as f:
        f.write(source)
    subprocess.run(["gcc", "-O2", "-o", program, src], check=True)
    return program


def compile_worker(tmp):
    """Builds the timestamping C worker (C_WORKER) in `tmp`; returns its path."""
    return compile_c(tmp, "worker", C_WORKER)


def compile_bare_spawn(tmp):
    """Builds BARE_SPAWN in `tmp`; returns its path."""
    return compile_c(tmp, "bare_spawn", BARE_SPAWN)
