"""Pieces shared by the benchmark scripts (bench-launcher.py, bench-rendezvous.py)."""
import os
import socket
import subprocess

TORCHRUN = ["/usr/bin/python3", "-m", "torch.distributed.run"]
# Debian's torchrun 1.13 fails under Python 3.11 without these (see shared notes); they redirect
# nothing for up to 9 workers. Its default --monitor_interval is 5 s; 0.1 s is the newer default.
TORCHRUN_FIXES = ["--redirects", "9:1", "--tee", "9:1", "--monitor_interval", "0.1"]

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


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]



def read_stamp(path):
    with open(path) as f:
        return float(f.read())


def compile_worker(tmp):
    """Builds the timestamping C worker (C_WORKER) in `tmp`; returns its path."""
    src = os.path.join(tmp, "worker.c")
    worker = os.path.join(tmp, "worker")
    with open(src, "w") as f:
        f.write(C_WORKER)
    subprocess.run(["gcc", "-O2", "-o", worker, src], check=True)
    return worker
