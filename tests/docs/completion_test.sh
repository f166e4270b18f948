#!/usr/bin/env bash
# `ddprun --completion bash` (and zsh): the option table as a shell completion. In bash: every
# option in both spellings is completed from a prefix; nothing of ddprun's is completed after
# PROGRAM or after --; an option's value (in the next word, or after =) is not taken for PROGRAM.
# zsh: the script loads into a shell with compinit and registers _ddprun for ddprun, and it
# completes in a real interactive zsh (driven through zpty). A bad shell is one line, exit 64.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"

"$DDPRUN" --completion bash >"$T/ddprun.bash"
source "$T/ddprun.bash"
# complete WORDS...: COMPREPLY for the last word, as bash gives it (COMP_WORDBREAKS splits "=").
complete_words() {
  COMP_WORDS=("$@")
  COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
  COMPREPLY=()
  _ddprun
  printf '%s\n' "${COMPREPLY[@]+"${COMPREPLY[@]}"}" | sort
}
expect_eq "$(complete_words ddprun --nproc | tr '\n' ' ')" "--nproc-per-node --nproc_per_node " "ddprun --nproc<TAB>"
expect_eq "$(complete_words ddprun --max-r | tr '\n' ' ')" "--max-restarts " "ddprun --max-r<TAB>"
expect_eq "$(complete_words ddprun -- | grep -c .)" "$(complete_words ddprun -- | sort -u | grep -c .)" "no option offered twice"
# Every spelling --help shows is offered for "-".
complete_words ddprun - >"$T/all"
"$DDPRUN" --help | grep -E '^  -' | grep -oE -- '(^| )--?[a-z][a-z_-]*' | tr -d ' ' | sort -u >"$T/help_names"
while read -r name; do grep -qx -- "$name" "$T/all" || fail "bash completion does not offer $name"; done <"$T/help_names"
ok "bash: $(wc -l <"$T/help_names") option spellings of --help completed from a prefix"

for words in "ddprun ./train --n" "ddprun --nproc_per_node 2 ./train --n" "ddprun --nproc_per_node = 2 ./train --n" \
             "ddprun --standalone ./train --n" "ddprun -m pkg.mod --n" "ddprun -- --n" "ddprun --log_dir x -- ./t --n"; do
  # shellcheck disable=SC2086
  expect_eq "$(complete_words $words)" "" "after PROGRAM: '$words<TAB>'"
done
ok "bash: nothing of ddprun's after PROGRAM or after --"
# shellcheck disable=SC2086
expect_eq "$(complete_words ddprun --nproc_per_node 2 --max_restarts = 3 --stand)" "--standalone" "options after values"
expect_eq "$(complete_words ddprun --rdzv_id job --tee 3 -r 1 --mod)" "--module" "options after values of short options"
mkdir "$T/files" && touch "$T/files/conf.json"
expect_eq "$(cd "$T/files" && complete_words ddprun --config co)" "conf.json" "a --config value: file names"
expect_eq "$(cd "$T/files" && complete_words ddprun --log_dir = co)" "conf.json" "a value after =: file names"
ok "bash: option values are file names, and never taken for PROGRAM"

set +e
"$DDPRUN" --completion fish >"$T/out" 2>"$T/err"
rc=$?
set -e
expect_eq "$rc" 64 "--completion fish: exit code"
expect_eq "$(cat "$T/err")" "ddprun: error: --completion: unknown shell fish: expected bash or zsh" "--completion fish"
[[ ! -s $T/out ]] || fail "--completion fish printed a script"
"$DDPRUN" --completion >"$T/out" 2>"$T/err" && fail "--completion without a shell exited 0"
[[ $(wc -l <"$T/err") == 1 ]] || fail "--completion without a shell: not one line: $(cat "$T/err")"
ok "a bad --completion value: one line, exit 64"

command -v zsh >/dev/null || skip "bash checked; no zsh here to check the zsh completion (scripts/install-deps.sh installs it)"
"$DDPRUN" --completion zsh >"$T/_ddprun"
zsh -n "$T/_ddprun" || fail "the zsh completion is not valid zsh"
ZDOTDIR=$T zsh -f -c "autoload -U compinit && compinit -u -d $T/zcompdump && source $T/_ddprun && [[ \${_comps[ddprun]} == _ddprun ]]" ||
  fail "the zsh completion did not register _ddprun for ddprun"
python3 "$DDPRUN_TESTS_DIR/docs/zsh_complete.py" "$T" "$T/_ddprun" "ddprun --nproc" >"$T/zsh.out" ||
  { cat "$T/zsh.out"; fail "zsh could not be driven"; }
grep -q -- '--nproc_per_node' "$T/zsh.out" && grep -q -- '--nproc-per-node' "$T/zsh.out" ||
  { cat "$T/zsh.out"; fail "zsh: ddprun --nproc<TAB> does not offer both spellings"; }
python3 "$DDPRUN_TESTS_DIR/docs/zsh_complete.py" "$T" "$T/_ddprun" "ddprun ./train --nproc" >"$T/zsh2.out" ||
  { cat "$T/zsh2.out"; fail "zsh could not be driven"; }
! grep -q -- '--nproc_per_node' "$T/zsh2.out" || { cat "$T/zsh2.out"; fail "zsh: options completed after PROGRAM"; }
ok "zsh: the completion loads, offers both spellings, and nothing of ddprun's after PROGRAM"
