#!/usr/bin/python3
"""Start-up cost: `ddprun --version` against a C++ hello world, and against torchrun's.

    scripts/bench/startup.py [--runs 200] [--ddprun build/launcher/ddprun ...] [--torchrun PATH]

Every library the launcher links is loaded by every start of every user's job, whether the run
uses it or not; this measures what that costs. Each command is run --runs times, interleaved
(one of each in turn, so that a change of load on the machine falls on all of them alike), and
the median wall time of each is printed with its ratio to the hello world's (the median of the
ratios of runs one after the other), its CPU time (user + system, from wait4: what the machine's
load does not inflate) and the libraries the dynamic loader maps for it (`ldd`). Give several
--ddprun to compare builds (e.g. one configured with -DDDPRUN_ETCD=OFF). The hello world is
compiled here with the system's c++ -O2.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def libraries(path):
    try:
        out = subprocess.run(["ldd", path], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "?"
    return str(sum(1 for line in out.splitlines() if line.strip()))


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--ddprun", action="append",
                        help="a ddprun to measure (repeatable); default build/launcher/ddprun")
    parser.add_argument("--torchrun", help="also measure `torchrun --help`'s start (a path; e.g. the venv's)")
    args = parser.parse_args()
    ddpruns = args.ddprun or [os.path.join(os.environ.get("DDPRUN_BUILD_DIR", os.path.join(root, "build")),
                                           "launcher", "ddprun")]
    for d in ddpruns:
        if not os.access(d, os.X_OK):
            sys.exit(f"startup: no {d}; build it first (scripts/build.sh)")
    cxx = shutil.which("c++") or sys.exit("startup: no c++ to build the hello world with")
    with tempfile.TemporaryDirectory() as tmp:
        hello = os.path.join(tmp, "hello")
        source = hello + ".cpp"
        with open(source, "w") as f:
            f.write('#include <cstdio>\nint main() { std::puts("hello"); }\n')
        subprocess.run([cxx, "-O2", source, "-o", hello], check=True)
        commands = [("C++ hello world", [hello])]
        commands += [(f"{d} --version", [d, "--version"]) for d in ddpruns]
        if args.torchrun:
            commands.append((f"{args.torchrun} --help", [args.torchrun, "--help"]))
        times = {name: [] for name, _ in commands}
        cpu = {name: [] for name, _ in commands}
        for _ in range(args.runs):
            for name, command in commands:
                start = time.perf_counter()
                child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                _, status, usage = os.wait4(child.pid, 0)
                times[name].append(time.perf_counter() - start)
                child.returncode = os.waitstatus_to_exitcode(status)
                if child.returncode != 0:
                    sys.exit(f"startup: {' '.join(command)} exited {child.returncode}")
                cpu[name].append(usage.ru_utime + usage.ru_stime)
        hello = times[commands[0][0]]
        print(f"median of {args.runs} runs, interleaved; load average {os.getloadavg()[0]:.1f}")
        print("| command | median | / hello world (median of the pairs) | CPU (user + system) | libraries mapped |")
        print("|---|---|---|---|---|")
        for name, command in commands:
            ratio = statistics.median(t / h for t, h in zip(times[name], hello))
            print(f"| `{name}` | {statistics.median(times[name]) * 1000:.2f} ms | {ratio:.2f}x "
                  f"| {statistics.median(cpu[name]) * 1000:.2f} ms | {libraries(command[0])} |")


if __name__ == "__main__":
    main()
