#!/usr/bin/env bash
# --warm_start=on (launcher/process/zygote.hpp): a Python worker forked from the warm interpreter
# sees what a cold one sees (argv, __file__, sys.path, __main__, its environment, signal
# dispositions, descriptors, process group, command line, random state, torch's generator), for
# a script and for -m; a worker's SIGKILL restarts the job and its end is told as a cold one's;
# a zygote killed makes the next start cold, with one line, and is replaced; SIGKILL of ddprun
# leaves nothing behind. On Debian's python3 (torch 1.13) and the torch 2.x venv where there is one.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
source "$DDPRUN_SOURCE_DIR/scripts/torch2-env.sh"
unset PYTHONPATH TORCH_DISABLE_SHARE_RDZV_TCP_STORE
mkdir -p "$T/sub"
cp "$DDPRUN_TESTS_DIR/launcher/warm_start_probe.py" "$T/sub/probe.py"
cd "$T"

# dead PID: the process is gone, or a zombie (its parent, ddprun, exited without reaping it).
dead() { local stat; stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0; [[ ${stat##*) } == Z* ]]; }

# compare COLD_DIR WARM_DIR ATTEMPT: every rank's probe of the warm run is the cold run's, but for
# what is drawn at random and what names the run's own folders and port.
compare() {
  "$PYTHON_EXEC" - "$@" <<'PY'
import json, re, sys
cold_dir, warm_dir, attempt = sys.argv[1:4]
def load(d, rank):
    return json.load(open(f"{d}/probe.{rank}.{attempt}"))
def masked(environ):
    environ = dict(environ)
    environ.pop("MASTER_PORT")
    environ.pop("PET_WARM_START", None)  # the option as each run was given it
    return {k: re.sub(r"ddprun\.[0-9]+\.[0-9]+\.[^/]*", "PRIVATE", v) for k, v in environ.items()}
warm = [load(warm_dir, r) for r in (0, 1)]
drawn = [{k: w[k] for k in ("random", "numpy", "torch_seed")} for w in warm]
for rank in (0, 1):
    c, w = load(cold_dir, rank), warm[rank]
    assert not c["preloaded"], f"rank {rank}: the cold worker had torch before its first line"
    assert w["preloaded"], f"rank {rank}: the worker was not forked from the warm interpreter"
    ce, we = masked(c.pop("environ")), masked(w.pop("environ"))
    assert ce == we, f"rank {rank}: environments differ: cold {set(ce.items()) - set(we.items())}, warm {set(we.items()) - set(ce.items())}"
    # A cold worker inherits what ddprun inherited without close-on-exec (a test harness's
    # descriptors); a forked one has 0, 1, 2 and what ddprun's bootstrap opens (faulthandler's file).
    cold_fds, warm_fds = c.pop("fds"), w.pop("fds")
    assert set(warm_fds) <= {"0", "1", "2", "3"}, f"rank {rank}: the forked worker has descriptors {warm_fds}"
    assert {k: cold_fds.get(k) for k in warm_fds} == warm_fds, f"rank {rank}: cold {cold_fds}, warm {warm_fds}"
    for key in ("preloaded", "random", "numpy", "torch_seed", "torch_rand"):
        c.pop(key), w.pop(key)
    for key in c:
        assert c[key] == w[key], f"rank {rank} {key}: cold {c[key]!r}, warm {w[key]!r}"
# What a cold start draws from the OS, each forked worker draws anew: Python's random, NumPy's,
# and torch's default generator, which torch seeds from the OS at import.
assert drawn[0]["random"] != drawn[1]["random"], "Python's random is the same in both forked workers"
assert drawn[0]["torch_seed"] != drawn[1]["torch_seed"], "torch's default generator has one seed in both forked workers"
if drawn[0]["numpy"] is not None:
    assert drawn[0]["numpy"] != drawn[1]["numpy"], "NumPy's random state is the same in both forked workers"
PY
}

for python in /usr/bin/python3 "$TORCH2_PYTHON"; do
  "$python" -c 'import torch.distributed' 2>/dev/null || { echo "no torch.distributed in $python: skipped"; continue; }
  export PYTHON_EXEC=$python
  v=$("$python" -c 'import torch; print(torch.__version__)')
  # Both runs write to $T/out (their argv is compared), renamed after each.
  rm -rf cold warm out; mkdir out

  # A script, given by a relative path, with arguments; NumPy preloaded so that its reseeding shows.
  run_ddprun cold --warm_start=off --nproc_per_node=2 --rdzv_id=same sub/probe.py "$T/out" x 'y z'
  [[ $RC == 0 ]] || { cat "$T/cold.err"; fail "torch $v: the cold run failed"; }
  mv out cold; mkdir out
  run_ddprun warm --warm_start=on --preload=numpy --nproc_per_node=2 --rdzv_id=same sub/probe.py "$T/out" x 'y z'
  [[ $RC == 0 ]] || { cat "$T/warm.err"; fail "torch $v: the warm run failed"; }
  mv out warm
  expect_not_in "$T/warm.err" "warm start"
  compare cold warm 0 || fail "torch $v: a forked worker differs from a cold one"
  ok "torch $v: a script's forked workers see what cold ones see"

  # -m, from the module's folder; through PET_WARM_START.
  rm -rf cold warm out; mkdir out
  cd sub; PET_WARM_START=off run_ddprun cold --nproc_per_node=2 --rdzv_id=same -m probe "$T/out" m; cd "$T"
  [[ $RC == 0 ]] || { cat "$T/cold.err"; fail "torch $v: the cold -m run failed"; }
  mv out cold; mkdir out
  cd sub; PET_WARM_START=on run_ddprun warm --nproc_per_node=2 --rdzv_id=same -m probe "$T/out" m; cd "$T"
  [[ $RC == 0 ]] || { cat "$T/warm.err"; fail "torch $v: the warm -m run failed"; }
  mv out warm
  compare cold warm 0 || fail "torch $v: a forked -m worker differs from a cold one"
  ok "torch $v: -m's forked workers see what cold ones see"

  # A worker SIGKILLed: restarted (forked again), then the job's end as a cold run tells it.
  rm -rf cold warm out
  for how in cold warm; do
    mkdir out
    flag=$([[ $how == warm ]] && echo --warm_start=on || echo --warm_start=off)
    PROBE_THEN=kill1.0 run_ddprun "$how-restart" $flag --nproc_per_node=2 --max_restarts=1 --rdzv_id=same sub/probe.py "$T/out"
    [[ $RC == 0 ]] || { cat "$T/$how-restart.err"; fail "torch $v ($how): the restart after SIGKILL failed"; }
    expect_in "$T/$how-restart.err" "rank 1 \(local rank 1\) failed: .*SIGKILL"
    mv out "$how"; mkdir out
    PROBE_THEN=kill1.0 run_ddprun "$how-end" $flag --nproc_per_node=2 --rdzv_id=same sub/probe.py "$T/out"
    rm -rf out
    echo "$RC" >"$T/$how-end.rc"
    sed -E 's/[0-9]+\.[0-9]+ ?s\b/N s/g; s/[0-9]+(\.[0-9]+)?%/N%/g; s/pid [0-9]+/pid N/g; s/(at|on) [^ ]+ [0-9:.-]+//g' "$T/$how-end.err" \
      | grep -v "^ddprun: warm start" >"$T/$how-end.summary"
  done
  compare cold warm 1 || fail "torch $v: a worker forked again after a SIGKILL differs from a cold one"
  expect_eq "$(cat "$T/warm-end.rc")" "$(cat "$T/cold-end.rc")" "torch $v: exit code after a SIGKILL, warm against cold"
  diff "$T/cold-end.summary" "$T/warm-end.summary" || fail "torch $v: the summary of a SIGKILLed worker differs"
  ok "torch $v: a SIGKILLed forked worker is restarted, and the job ends as a cold one's (exit $(cat "$T/warm-end.rc"))"
done
[[ -n ${v:-} ]] || skip "no interpreter with torch.distributed"

# The zygote killed while the workers run: the restart starts cold with one line, a new zygote
# is started, and the start after it is forked again.
export PYTHON_EXEC=/usr/bin/python3
"$PYTHON_EXEC" -c 'import torch.distributed' 2>/dev/null || export PYTHON_EXEC=$TORCH2_PYTHON
cat >"$T/sub/kill_zygote.py" <<'PY'
import os, signal, sys, time
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
open(f"{sys.argv[1]}/started.{attempt}", "w").write(str("torch" in sys.modules))
def zygote_of_ddprun(p):
    try:  # a process of the machine's (not this test's) may end between listdir and open
        return (b"_ddprun_zygote.py" in open(f"/proc/{p}/cmdline", "rb").read()
                and open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1] == str(os.getppid()))
    except OSError:
        return False
if attempt == 0:
    zygotes = [p for p in os.listdir("/proc") if p.isdigit() and zygote_of_ddprun(p)]
    assert len(zygotes) == 1, zygotes
    os.kill(int(zygotes[0]), signal.SIGKILL)
    def alive(p):
        try:
            return open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False  # reaped already
    while alive(zygotes[0]):
        time.sleep(0.01)  # until the kernel has it dead: ddprun's SIGCHLD is then on its way
sys.exit(0 if attempt == 2 else 1)
PY
mkdir "$T/z"
run_ddprun zygote --warm_start=on --max_restarts=2 sub/kill_zygote.py "$T/z"
[[ $RC == 0 ]] || { cat "$T/zygote.err"; fail "the job whose zygote was killed failed"; }
expect_eq "$(cat "$T/z/started.0") $(cat "$T/z/started.1") $(cat "$T/z/started.2")" "True False True" \
  "forked (True) or cold (False) in attempts 0, 1, 2"
expect_eq "$(grep -c '^ddprun: warm start' "$T/zygote.err")" 1 "lines about warm start"
expect_in "$T/zygote.err" "^ddprun: warm start: the warm interpreter is gone: it died \(killed by SIGKILL\); a new one is starting; these workers start cold$"
ok "a killed zygote: one cold start with one line, then forked from its replacement"

# --warm_start=auto, the default: the first start is cold; the zygote starts once the workers
# made progress (here a barrier, which ddprun's bootstrap counts), imports at nice 19 where it
# can take that back (as root: CAP_SYS_NICE), and the restart is forked from it at the workers'
# own priority. Nothing is said.
cat >"$T/sub/auto.py" <<'PY'
import os, sys, time
forked = "torch" in sys.modules
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
import torch.distributed as dist
dist.init_process_group("gloo")
dist.barrier()  # progress: the zygote starts now
def zygote_nice():
    for p in os.listdir("/proc"):
        try:  # a process of the machine's (not this test's) may end between listdir and open
            if (b"_ddprun_zygote.py" in open(f"/proc/{p}/cmdline", "rb").read()
                    and open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1] == str(os.getppid())):
                return os.getpriority(os.PRIO_PROCESS, int(p))
        except OSError:
            pass
    return None
nice = None
if attempt == 0 and os.environ["RANK"] == "0":
    # The zygote's nice while it imports, which takes seconds (the restart waits for them).
    deadline = time.monotonic() + 60
    while nice != int(os.environ["NICE_EXPECTED"]) and time.monotonic() < deadline:
        nice = zygote_nice()
        time.sleep(0.01)
with open(f"{sys.argv[1]}/started.{attempt}.{os.environ['RANK']}", "w") as f:
    f.write(f"{forked} {os.getpriority(os.PRIO_PROCESS, 0)} {nice}")
dist.barrier()
sys.exit(3 if attempt == 0 else 0)
PY
# 19 where the zygote may take its priority back (_ddprun_zygote.py: _may_raise_priority_to).
nice_back=$("$PYTHON_EXEC" - <<'PY'
import os, resource
soft = resource.getrlimit(resource.RLIMIT_NICE)[0]
caps = int([l for l in open("/proc/self/status") if l.startswith("CapEff:")][0].split()[1], 16)
print(19 if soft == resource.RLIM_INFINITY or soft >= 20 or caps >> 23 & 1 else os.getpriority(os.PRIO_PROCESS, 0))
PY
)
own=$(nice)  # the workers' nice: ddprun's, which is this test's (a suite run under `nice` too)
mkdir "$T/a"
NICE_EXPECTED=$nice_back run_ddprun auto --nproc_per_node=2 --max_restarts=1 sub/auto.py "$T/a"
[[ $RC == 0 ]] || { cat "$T/auto.err"; fail "the default (auto) run failed"; }
expect_eq "$(cat "$T/a/started.0.0") / $(cat "$T/a/started.0.1" | cut -d' ' -f1,2)" "False $own $nice_back / False $own" \
  "attempt 0: forked, nice, and the zygote's nice while it imported"
expect_eq "$(cut -d' ' -f1,2 "$T/a/started.1.0") / $(cut -d' ' -f1,2 "$T/a/started.1.1")" "True $own / True $own" \
  "attempt 1: forked, nice"
expect_not_in "$T/auto.err" "warm"
ok "the default, auto: a cold first start, the zygote made at nice $nice_back after progress, the restart forked at nice $own"

# A zygote with a thread of its own (here a --preload module that starts one) does not fork: one
# line, and the run goes on cold.
cat >"$T/sub/threaded.py" <<'PY'
import threading, time
threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
PY
cat >"$T/sub/quick.py" <<'PY'
import sys
print("torch" in sys.modules)
sys.exit(int(sys.argv[1]))
PY
PYTHONPATH=$T/sub run_ddprun threaded --warm_start=on --preload=threaded sub/quick.py 0
[[ $RC == 0 ]] || { cat "$T/threaded.err"; fail "the run with a threaded zygote failed"; }
expect_eq "$(cat "$T/threaded.out")" "[rank0]: False" "a worker of a zygote with a thread (forked: True)"
expect_eq "$(grep -c '^ddprun: warm start' "$T/threaded.err")" 1 "lines about warm start"
expect_in "$T/threaded.err" "^ddprun: warm start is off for this run: the warm interpreter failed: the zygote has [0-9]+ threads after its imports; the workers start cold$"
ok "a zygote with a thread does not fork: one line, cold workers"

# Workers that end at once (before ddprun could have read their pid, were it not told first):
# their exit code, as a cold run's.
run_ddprun quick --warm_start=on --nproc_per_node=2 sub/quick.py 3
expect_eq "$RC" 3 "ddprun's exit code when every forked worker exits 3 at once"
expect_eq "$(sort "$T/quick.out" | tr '\n' ' ')" "[rank0]: True [rank1]: True " "what the forked workers printed"
expect_in "$T/quick.err" "failed \(exit code 3\)"
ok "forked workers that exit at once: exit code 3"

# A program that does not compile: the zygote compiles it before its imports and fails, with one
# line; the workers start cold at once and the job ends as a cold one's.
printf 'def f(:\n' >"$T/sub/broken.py"
run_ddprun broken --warm_start=on --max_restarts=3 sub/broken.py
expect_eq "$RC" 1 "ddprun's exit code for a SyntaxError"
expect_eq "$(grep -c '^ddprun: warm start' "$T/broken.err")" 1 "lines about warm start"
expect_in "$T/broken.err" "^ddprun: warm start is off for this run: the warm interpreter failed: sub/broken.py does not compile: SyntaxError: .*; the workers start cold$"
expect_in "$T/broken.err" "root cause: rank 0 .*: syntax_error \(SyntaxError: invalid syntax\) at $T/sub/broken.py:1$"
ok "a program that does not compile: cold workers at once, one line, the cold run's summary"

# Warm start is for Python workers: a program that is not Python starts as always, without a
# line (PET_WARM_START=on may be a site's for every run); an interpreter as PROGRAM, with one.
printf '#!/bin/sh\necho "not Python"\n' >"$T/sub/plain.sh"
chmod +x "$T/sub/plain.sh"
run_ddprun plain --warm_start=on sub/plain.sh
[[ $RC == 0 ]] || { cat "$T/plain.err"; fail "the shell worker's run failed"; }
expect_not_in "$T/plain.err" "warm"
run_ddprun interpreter --warm_start=on --no_python "$PYTHON_EXEC" sub/quick.py 0
expect_eq "$(cat "$T/interpreter.out")" "[rank0]: False" "a worker of an interpreter as PROGRAM (forked: True)"
expect_eq "$(grep -c '^ddprun: --warm_start=on: only a .py PROGRAM or -m MODULE is forked' "$T/interpreter.err")" 1 \
  "lines about warm start for an interpreter as PROGRAM"
ok "not Python: no line; an interpreter as PROGRAM: cold, with one line"

# The workers wait for a zygote that still imports (here a --preload module that waits for a
# file), and a SIGTERM meanwhile stops ddprun at once: no worker started, the zygote gone.
cat >"$T/sub/gate.py" <<'PY'
import os, time
open(os.environ["GATE"] + ".importing", "w").close()
while not os.path.exists(os.environ["GATE"]):
    time.sleep(0.01)
PY
GATE=$T/gate PYTHONPATH=$T/sub "$DDPRUN" --warm_start=on --preload=gate sub/quick.py 0 >"$T/gate.out" 2>"$T/gate.err" &
ddprun_pid=$!
wait_for 120 test -e "$T/gate.importing"
zygote=$(pgrep -P "$ddprun_pid" -f _ddprun_zygote.py) || fail "no zygote below ddprun"
kill -TERM "$ddprun_pid"
set +e; wait "$ddprun_pid"; RC=$?; set -e
expect_eq "$RC" 143 "ddprun's exit code after SIGTERM while the zygote imports"
[[ ! -s $T/gate.out ]] || fail "a worker started while the zygote imported: $(cat "$T/gate.out")"
wait_for 30 dead "$zygote"
ok "the start waits for a zygote that imports; SIGTERM meanwhile stops ddprun at once (exit 143)"

# SIGKILL of ddprun: its forked workers and its zygote go with it.
cat >"$T/sub/sleeper.py" <<'PY'
import os, sys, time
open(f"{sys.argv[1]}/up.{os.environ['RANK']}", "w").write(str(os.getpid()))
time.sleep(600)
PY
mkdir "$T/s"
"$DDPRUN" --warm_start=on --nproc_per_node=2 sub/sleeper.py "$T/s" >"$T/s.out" 2>"$T/s.err" &
ddprun_pid=$!
wait_for 120 test -e "$T/s/up.0" -a -e "$T/s/up.1"
zygote=$(pgrep -P "$ddprun_pid" -f _ddprun_zygote.py) || fail "no zygote below ddprun"
pgrep -f "sub/sleeper.py $T/s" >/dev/null || fail "ps does not show the forked workers' command line"
kill -KILL "$ddprun_pid"
wait "$ddprun_pid" 2>/dev/null || true
wait_for 30 no_leftovers
wait_for 30 dead "$zygote"
ok "SIGKILL of ddprun leaves neither a forked worker nor the zygote"
