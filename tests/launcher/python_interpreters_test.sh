#!/usr/bin/env bash
# Python workers on the interpreters users have, not only Debian's: ddprun's bootstrap
# (launcher/python_bootstrap/) leaves no trace, and zero-code progress, the culprit's name and the hung
# worker's Python stacks work on each.
#  1. Traces: a probe prints what a program sees of its interpreter (argv, __file__, sys.path,
#     PYTHONPATH, the sitecustomize and usercustomize that ran, flags) and writes to stderr; under
#     ddprun its output, less the rank prefix, equals its output alone, on Debian's python3 (which
#     has a sitecustomize), a python.org-style build without one (pyenv's, every version
#     installed, else one made here from Debian's), a venv of each, python3 as PATH finds it,
#     with a user's sitecustomize first on PYTHONPATH, and with a usercustomize; with -I, -E and
#     -S (the bootstrap cannot load) too, and ddprun says once what is lost.
#  2. Hangs, py-spy hidden: an unmodified torch.distributed script whose rank 1 never reaches an
#     all_reduce is found hung from the collectives the bootstrap counted, rank 1 is named, and its
#     Python stack comes from its faulthandler: on Debian's python3 (torch 1.13), a venv of it, the
#     python.org-style build (a user's PYTHONPATH brings torch) and a venv of it (torch 2.x of the
#     venv scripts/install-deps.sh --torch2 makes, where the build's minor version matches).
#  3. py-spy stays first where it works; where it fails, faulthandler answers.
#  4. -I: no bootstrap, so a worker that beats by itself is found hung, with native stacks only
#     without py-spy (said once), Python's with it.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
source "$DDPRUN_SOURCE_DIR/scripts/torch2-env.sh"
unset PYTHONPATH PYTHON_EXEC PYTHONUSERBASE PYTHONNOUSERSITE PYTHONSTARTUP PYTHONHOME
export T
debian=/usr/bin/python3
no_py_spy_path=/usr/bin:/bin  # py-spy is in /usr/local/bin (install-deps.sh) and in the torch2 venv

# has_sitecustomize PYTHON: whether the interpreter has a sitecustomize of its own.
has_sitecustomize() { "$1" -s -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("sitecustomize") is None)'; }
minor() { "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])'; }

# The python.org-style builds: pyenv's (what `python3` is on this project's machines), every 3.x
# installed; without pyenv, one made here: Debian's interpreter with a standard library of
# links that leaves out its sitecustomize (the interpreter finds its prefix beside itself).
plain=()
for p in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.*/bin/python3; do
  [[ -x $p ]] && ! has_sitecustomize "$p" && plain+=("$p")
done
if (( ${#plain[@]} == 0 )); then
  v=$(minor "$debian")
  mkdir -p "$T/plain/bin" "$T/plain/lib/python$v"
  cp "$(readlink -f "$debian")" "$T/plain/bin/python3"
  for f in /usr/lib/python"$v"/*; do
    [[ $(basename "$f") == sitecustomize.py ]] || ln -s "$f" "$T/plain/lib/python$v/"
  done
  plain=("$T/plain/bin/python3")
  echo "no pyenv: a python.org-style $v made from Debian's, without its sitecustomize"
fi
has_sitecustomize "$debian" || fail "$debian has no sitecustomize: the Debian row would test nothing of its own"
has_sitecustomize "${plain[0]}" && fail "${plain[0]} has a sitecustomize"
# The one the torch rows use: the minor version of the torch2 venv's wheels, where there is one.
torch2_minor=$([[ -x $TORCH2_PYTHON ]] && minor "$TORCH2_PYTHON" || echo none)
main_plain=${plain[0]}
for p in "${plain[@]}"; do [[ $(minor "$p") == "$torch2_minor" ]] && main_plain=$p; done
echo "python.org-style: ${plain[*]}; the torch rows use $main_plain"

# venv NAME PYTHON: a virtual environment of PYTHON (no pip: quick), its python echoed.
venv() { "$2" -m venv --without-pip "$T/$1" && echo "$T/$1/bin/python"; }
debian_venv=$(venv venv-debian "$debian")
plain_venv=$(venv venv-plain "$main_plain")

# 1. Traces.
cat >"$T/probe.py" <<'PY'
import json, os, sys
site, user = sys.modules.get("sitecustomize"), sys.modules.get("usercustomize")
print(json.dumps({
    "argv": sys.argv, "file": __file__, "path": sys.path, "PYTHONPATH": os.environ.get("PYTHONPATH"),
    "sitecustomize": getattr(site, "__file__", None), "usercustomize": getattr(user, "__file__", None),
    "flags": [sys.flags.isolated, sys.flags.ignore_environment, sys.flags.no_site, sys.flags.no_user_site],
    "ddprun in the path importer cache": [p for p in sys.path_importer_cache if "ddprun/python" in str(p)],
}, indent=1))
print("a line on stderr", file=sys.stderr)
PY
mkdir -p "$T/user"
echo 'print("the user sitecustomize ran")' >"$T/user/sitecustomize.py"

# same NAME PYTHON [ENV...] -- [INTERPRETER OPTIONS...]: the probe alone and under ddprun
# (PYTHON_EXEC=PYTHON ddprun probe.py; with options, ddprun PYTHON OPTIONS probe.py), with ENV;
# their stdout and stderr must be equal, less the rank prefix and ddprun's own lines, which are
# kept in $T/NAME.said.
same() {
  local name=$1 python=$2 vars=() options=(); shift 2
  while (( $# )) && [[ $1 != -- ]]; do vars+=("$1"); shift; done
  (( $# )) && shift
  options=("$@")
  local alone=(env "${vars[@]}" "$python" -u "${options[@]}" "$T/probe.py" a b)
  local under=(env "${vars[@]}" PYTHON_EXEC="$python" "$DDPRUN" --nproc_per_node=1 "$T/probe.py" a b)
  (( ${#options[@]} )) && under=(env "${vars[@]}" "$DDPRUN" --nproc_per_node=1 "$python" -u "${options[@]}" "$T/probe.py" a b)
  (cd "$T" && "${alone[@]}") >"$T/$name.alone.out" 2>"$T/$name.alone.err" || fail "[$name] the probe alone failed: $(cat "$T/$name.alone.err")"
  (cd "$T" && "${under[@]}") >"$T/$name.out" 2>"$T/$name.err" || fail "[$name] the probe under ddprun failed: $(cat "$T/$name.err")"
  grep '^ddprun' "$T/$name.err" >"$T/$name.said" || true
  sed 's/^\[rank0\]: //' "$T/$name.out" >"$T/$name.worker.out"
  grep -v '^ddprun' "$T/$name.err" | sed 's/^\[rank0\]: //' >"$T/$name.worker.err" || true
  diff -u "$T/$name.alone.out" "$T/$name.worker.out" >&2 || fail "[$name] stdout under ddprun differs from stdout alone"
  diff -u "$T/$name.alone.err" "$T/$name.worker.err" >&2 || fail "[$name] stderr under ddprun differs from stderr alone"
  echo "  $name: the same ($(basename "$python"), ${vars[*]:-no variables}${options[*]:+, options ${options[*]}})"
}
userbase() {  # PYTHON: a PYTHONUSERBASE whose site-packages has a usercustomize, for PYTHON
  local base=$T/userbase-$(minor "$1") packages
  packages=$(PYTHONUSERBASE=$base "$1" -s -c 'import site; print(site.getusersitepackages())')
  mkdir -p "$packages"
  echo 'print("the usercustomize ran")' >"$packages/usercustomize.py"
  echo "$base"
}

same debian "$debian"
same debian-venv "$debian_venv"
same debian-user-sitecustomize "$debian" PYTHONPATH="$T/user"
same debian-usercustomize "$debian" PYTHONUSERBASE="$(userbase "$debian")"
expect_in "$T/debian-usercustomize.out" "the usercustomize ran"
for p in "${plain[@]}"; do
  v=$(minor "$p")
  same "plain-$v" "$p"
  same "plain-$v-user-sitecustomize" "$p" PYTHONPATH="$T/user"
  expect_in "$T/plain-$v-user-sitecustomize.out" "the user sitecustomize ran"
  same "plain-$v-usercustomize" "$p" PYTHONUSERBASE="$(userbase "$p")"
  expect_in "$T/plain-$v-usercustomize.out" "the usercustomize ran"
done
same plain-venv "$plain_venv"
same plain-venv-user-sitecustomize "$plain_venv" PYTHONPATH="$T/user"
# python3 as PATH finds it, as a user who sets nothing has it (pyenv's shim on this project's machines).
(cd "$T" && python3 -u "$T/probe.py" a b) >"$T/path.alone.out" 2>"$T/path.alone.err"
(cd "$T" && "$DDPRUN" --nproc_per_node=1 "$T/probe.py" a b) >"$T/path.out" 2>"$T/path.err"
expect_not_in "$T/path.err" "Error in sitecustomize"
diff -u "$T/path.alone.out" <(sed 's/^\[rank0\]: //' "$T/path.out") >&2 || fail "[path: $(command -v python3)] stdout differs"
for row in debian debian-venv plain-venv; do expect_not_in "$T/$row.err" "Error in sitecustomize|KeyError"; done
for o in I E S; do
  for p in "$debian" "$main_plain"; do
    name=option-$o-$([[ $p == "$debian" ]] && echo debian || echo plain)
    same "$name" "$p" -- "-$o"
    expect_eq "$(grep -c "python -$o (.*): ddprun's bootstrap does not load in these workers" "$T/$name.said")" 1 \
      "[$name] lines saying what -$o loses ($(cat "$T/$name.said"))"
  done
done
# With PET_WARM_START=on (the suite run with warm start), an interpreter without torch has no warm
# interpreter, and one line says so: the only line allowed.
no_warm="^ddprun: warm start is off for this run: the warm interpreter failed: importing torch, torch.distributed: ModuleNotFoundError: No module named 'torch'; the workers start cold$"
for row in debian debian-venv plain-venv; do
  expect_eq "$(grep -cv "$no_warm" "$T/$row.said")" 0 "[$row] ddprun's own lines: $(cat "$T/$row.said")"
done
ok "the probe sees and prints the same under ddprun as alone: ${#plain[@]} python.org-style builds and Debian's, venvs, a user's sitecustomize and usercustomize, -I/-E/-S (said once each)"

# 2. Hangs with py-spy hidden: progress, the culprit, faulthandler's stacks.
probe=$DDPRUN_TESTS_DIR/worker/progress_probe.py
torch2_site=none
[[ -x $TORCH2_PYTHON ]] && torch2_site=$("$TORCH2_PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# hang NAME PYTHON [ENV...]: the collective script under PYTHON, py-spy hidden; rank 1 named,
# its Python stack from faulthandler.
hang() {
  local name=$1 python=$2; shift 2
  mkdir -p "$T/$name"
  set +e
  (cd "$T" && env PATH="$no_py_spy_path" DDPRUN_PY_SPY= PYTHON_EXEC="$python" "$@" \
    "$DDPRUN" --nproc_per_node=2 --hang_timeout=5 --log_dir="$T/$name.logs" "$probe" collective "$T/$name") \
    >"$T/$name.out" 2>"$T/$name.err"
  RC=$?
  set -e
  expect_eq "$RC" 124 "[$name] exit code of the hung script ($(cat "$T/$name.err"))"
  expect_in "$T/$name.err" "^ddprun: rank 1 hung: rank 0 waits in all_reduce #[0-9]+; rank 1 has not entered it"
  expect_in "$T/$name.err" "root cause: rank 1 \(local rank 1\) on .*: hung \(exit code 124\)"
  expect_in "$T/$name.err" "^        stuck_before_all_reduce \(.*progress_probe.py:[0-9]+\)"
  expect_not_in "$T/$name.err" "no Python stacks|Error in sitecustomize"
  local stacks
  stacks=$(run_dir "$T/$name.logs")/attempt_0/rank_1/stacks.txt
  expect_in "$stacks" "^== faulthandler of [0-9]+ \(signal [0-9]+, every thread\) ==$"
  expect_in "$stacks" "^Current thread 0x[0-9a-f]+ \(most recent call first\):$"
  expect_not_in "$stacks" "py-spy' dump"
  wait_for 20 no_leftovers
  echo "  $name: rank 1 named, its Python stack from faulthandler"
}
torch_rows=()
if "$debian" -c 'import torch.distributed' 2>/dev/null; then
  hang hang-debian "$debian"; torch_rows+=(debian)
  echo "$torch2_site" >"$(dirname "$(dirname "$debian_venv")")/lib/python$(minor "$debian")/site-packages/torch2.pth"
  [[ -d $torch2_site ]] && { hang hang-debian-venv "$debian_venv"; torch_rows+=(debian-venv); }
fi
if [[ -d $torch2_site && $(minor "$main_plain") == "$torch2_minor" ]]; then
  hang hang-plain "$main_plain" PYTHONPATH="$torch2_site"; torch_rows+=("plain $(minor "$main_plain") with PYTHONPATH")
  echo "$torch2_site" >"$T/venv-plain/lib/python$torch2_minor/site-packages/torch2.pth"
  hang hang-plain-venv "$plain_venv"; torch_rows+=("a venv of plain $torch2_minor")
fi
(( ${#torch_rows[@]} >= 2 )) || skip "torch on fewer than two interpreters (${torch_rows[*]:-none}): install python3-torch and run scripts/install-deps.sh --torch2"
ok "py-spy hidden, hung collective script found from counted progress, rank 1 named, its Python stack from faulthandler: ${torch_rows[*]}"

# 3. py-spy first where it works; where it fails (here: a py-spy that cannot attach), faulthandler.
py_spy=$(PATH=/usr/local/bin:$PATH:$TORCH2_VENV/bin command -v py-spy || true)
if [[ -n $py_spy ]]; then
  mkdir -p "$T/spy"
  (cd "$T" && PATH="$no_py_spy_path" DDPRUN_PY_SPY="$py_spy" PYTHON_EXEC="$debian_venv" \
    "$DDPRUN" --nproc_per_node=2 --hang_timeout=5 --log_dir="$T/spy.logs" "$probe" collective "$T/spy") >"$T/spy.out" 2>"$T/spy.err" || true
  expect_in "$T/spy.err" "^        stuck_before_all_reduce \(.*progress_probe.py:[0-9]+\)"
  expect_in "$(run_dir "$T/spy.logs")/attempt_0/rank_1/stacks.txt" "py-spy' dump --pid"
  expect_not_in "$(run_dir "$T/spy.logs")/attempt_0/rank_1/stacks.txt" "^== faulthandler"
  wait_for 20 no_leftovers
  spy_said="py-spy's stacks where it works"
else
  spy_said="(no py-spy here: its first place not checked)"
fi
worker failing-py-spy <<'SH'
#!/bin/sh
echo "Error: Permission denied (os error 13)" >&2
exit 1
SH
mkdir -p "$T/failing"
(cd "$T" && PATH="$no_py_spy_path" DDPRUN_PY_SPY="$T/failing-py-spy" PYTHON_EXEC="$debian_venv" \
  "$DDPRUN" --nproc_per_node=2 --hang_timeout=5 --log_dir="$T/failing.logs" "$probe" collective "$T/failing") >"$T/failing.out" 2>"$T/failing.err" || true
expect_in "$T/failing.err" "^        stuck_before_all_reduce \(.*progress_probe.py:[0-9]+\)"
stacks=$(run_dir "$T/failing.logs")/attempt_0/rank_1/stacks.txt
expect_in "$stacks" "Permission denied"
expect_in "$stacks" "^== faulthandler of "
wait_for 20 no_leftovers
ok "$spy_said; faulthandler's where py-spy fails"

# 4. python -I: no bootstrap. A worker that beats by itself is found hung; without py-spy its
# stacks are native only (said once), with py-spy Python's. In $T, so that a worker left behind
# is found by its command line.
cp "$DDPRUN_TESTS_DIR/launcher/stuck_in_python.py" "$T/beats.py"
for p in "$debian" "$main_plain"; do
  name=isolated-$([[ $p == "$debian" ]] && echo debian || echo plain)
  set +e
  (cd "$T" && PATH="$no_py_spy_path" DDPRUN_PY_SPY= "$DDPRUN" --nproc_per_node=2 --hang_timeout=2 "$p" -I "$T/beats.py") \
    >"$T/$name.out" 2>"$T/$name.err"
  RC=$?
  set -e
  expect_eq "$RC" 124 "[$name] exit code ($(cat "$T/$name.err"))"
  expect_eq "$(grep -c "python -I (isolated mode, which ignores PYTHONPATH): ddprun's bootstrap does not load" "$T/$name.err")" 1 "[$name] said once"
  expect_eq "$(grep -c "^ddprun: no Python stacks: py-spy is not in PATH" "$T/$name.err")" 1 "[$name] no Python stacks, said once"
  expect_not_in "$T/$name.err" "stuck_in_python"
  wait_for 20 no_leftovers
  if [[ -n $py_spy ]]; then
    (cd "$T" && PATH="$no_py_spy_path" DDPRUN_PY_SPY="$py_spy" "$DDPRUN" --nproc_per_node=2 --hang_timeout=2 "$p" -I "$T/beats.py") \
      >"$T/$name.spy.out" 2>"$T/$name.spy.err" || true
    expect_in "$T/$name.spy.err" "^        stuck_in_python \(.*beats.py:[0-9]+\)"
    wait_for 20 no_leftovers
  fi
done
[[ -n $py_spy ]] && with_spy=", Python frames with it" || with_spy=""
ok "python -I: said once; a self-beating worker found hung; native stacks without py-spy$with_spy"
