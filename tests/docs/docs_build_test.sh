#!/usr/bin/env bash
# The manual builds with warnings as errors (sphinx-build -W -n: a broken link or reference, a
# page outside every toctree, a bad directive fail it), as HTML and as the ddprun(1) man page;
# the man page reads without a warning from groff or man; and `cmake --install` (component
# launcher, as the wheel installs it) puts it in share/man/man1 when the build made it.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
command -v sphinx-build >/dev/null ||
  skip "no sphinx-build: scripts/install-deps.sh installs python3-sphinx, python3-myst-parser and furo"
docs=$DDPRUN_SOURCE_DIR/docs

sphinx-build -q -W -n -b html -d "$T/doctrees" "$docs" "$T/html" >"$T/html.log" 2>&1 ||
  { cat "$T/html.log"; fail "sphinx-build -W -n -b html docs: warnings or errors above"; }
[[ -s $T/html/index.html && -s $T/html/troubleshooting.html && -s $T/html/reference/ddprun.html ]] ||
  fail "the HTML manual lacks its index, troubleshooting or reference page"
ok "the HTML manual builds with sphinx-build -W -n"

sphinx-build -q -W -n -b man -d "$T/doctrees" "$docs" "$T/man" >"$T/man.log" 2>&1 ||
  { cat "$T/man.log"; fail "sphinx-build -W -n -b man docs: warnings or errors above"; }
page=$T/man/ddprun.1
[[ -s $page ]] || fail "no ddprun.1 from the man builder"
groff -k -ww -z -t -man "$page" >"$T/groff.log" 2>&1 || true
[[ ! -s $T/groff.log ]] || { cat "$T/groff.log"; fail "groff -k -ww -z -t -man ddprun.1 warned"; }
MANWIDTH=80 man --warnings -l "$page" >"$T/man.txt" 2>"$T/man.err" || { cat "$T/man.err"; fail "man -l ddprun.1 failed"; }
[[ ! -s $T/man.err ]] || { cat "$T/man.err"; fail "man --warnings -l ddprun.1 warned"; }
for heading in NAME SYNOPSIS DESCRIPTION OPTIONS ENVIRONMENT "EXIT STATUS"; do
  grep -q "^$heading" "$T/man.txt" || fail "man -l ddprun.1 has no $heading section"
done
grep -q -- '--nproc_per_node VALUE, --nproc-per-node VALUE' "$T/man.txt" || fail "the man page lacks --nproc_per_node"
ok "ddprun.1 reads without a warning from groff -ww and man --warnings, with every section"

built=$DDPRUN_BUILD_DIR/docs/man/ddprun.1
if [[ -f $built ]]; then
  cmake --install "$DDPRUN_BUILD_DIR" --component launcher --prefix "$T/prefix" >"$T/install.log" 2>&1 ||
    { cat "$T/install.log"; fail "cmake --install --component launcher"; }
  [[ -f $T/prefix/share/man/man1/ddprun.1 && -x $T/prefix/bin/ddprun ]] ||
    fail "cmake --install --component launcher did not install share/man/man1/ddprun.1 beside bin/ddprun"
  MANPATH=$T/prefix/share/man MANWIDTH=80 man ddprun 2>&1 | grep -q -- '--max_restarts' ||
    fail "man ddprun with MANPATH at the installed prefix does not show the page"
  ok "cmake --install --component launcher installs share/man/man1/ddprun.1 (man ddprun finds it)"
else
  echo "note: this build made no man page (configured without Sphinx with MyST): its install is not checked"
fi
