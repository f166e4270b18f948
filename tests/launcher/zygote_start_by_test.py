"""The warm interpreter's last look at the fence's deadline (start_request.hpp:
StartRequest::start_by, sent as START_BY), with the real _ddprun_zygote.py and this test in ddprun's
place: a worker whose START_BY has passed when it is made is killed (SIGKILL) before the program's
first line; one before it, or without one, runs the program. (ddprun checks the deadline before it
asks, but may be stopped between its check and the fork: the end-to-end case for a spawned worker
is partition_test.sh's stall_fork_b.)

usage: zygote_start_by_test.py PYTHON BOOTSTRAP_FOLDER. Skipped (77) where PYTHON has no torch.
"""
import ctypes
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

python, bootstrap = sys.argv[1], sys.argv[2]
if subprocess.run([python, "-c", "import torch"], capture_output=True).returncode != 0:
    print(f"SKIP: {python} has no torch, which the warm interpreter imports")
    sys.exit(77)

PR_SET_CHILD_SUBREAPER = 36
assert ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0  # as ddprun is

folder = tempfile.mkdtemp(prefix="ddprun-test.zygote.")
program = os.path.join(folder, "program.py")
with open(program, "w") as f:
    f.write("import sys\nopen(sys.argv[1], 'w').close()\n")


def receive(sock):
    head = b""
    while len(head) < 4:
        head += sock.recv(4 - len(head))
    (size,) = struct.unpack("<I", head)
    data = b""
    while len(data) < size:
        data += sock.recv(size - len(data))
    return data.decode()


def fork_request(start_by, marker):
    """As zygote.cpp's encode_fork_request() makes it: KIND, CWD, DDPRUN_PID, CPUS, START_BY, argv,
    environment."""
    environ = [f"{k}={v}" for k, v in os.environ.items()]
    fields = ["script", folder, str(os.getpid()), "", start_by, "2", program, marker, str(len(environ))] + environ
    return "\0".join(fields).encode()


mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
zygote = subprocess.Popen([python, "-u", os.path.join(bootstrap, "_ddprun_zygote.py"), str(theirs.fileno()), "",
                           program, " " * 64], pass_fds=[theirs.fileno()])
theirs.close()
answer = receive(mine)
assert answer == "ready", f"the zygote said {answer!r}"

now = time.monotonic_ns()  # CLOCK_MONOTONIC, as ddprun's steady_clock
cases = [  # (what, START_BY, whether the program runs)
    ("a deadline passed before the fork", str(now), False),
    ("a deadline an hour away", str(now + 3600 * 10**9), True),
    ("no deadline", "", True),
]
failed = []
for n, (what, start_by, runs) in enumerate(cases):
    marker = os.path.join(folder, f"ran.{n}")
    payload = fork_request(start_by, marker)
    socket.send_fds(mine, [struct.pack("<I", len(payload)) + payload], [0, 1, 2])
    answer = receive(mine)
    assert answer.startswith("pid "), f"{what}: the zygote said {answer!r}"
    _, status = os.waitpid(int(answer.split()[1]), 0)
    if runs:
        ok = os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 and os.path.exists(marker)
    else:
        ok = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL and not os.path.exists(marker)
    print(f"{'ok' if ok else 'FAIL'}: {what}: wait status {status:#x}, the program "
          f"{'ran' if os.path.exists(marker) else 'did not run'}")
    if not ok:
        failed.append(what)

mine.close()  # the zygote exits at its socket's end
zygote.wait(timeout=60)
for name in os.listdir(folder):
    os.unlink(os.path.join(folder, name))
os.rmdir(folder)
sys.exit(1 if failed else 0)
