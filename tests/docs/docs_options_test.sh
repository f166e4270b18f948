#!/usr/bin/env bash
# docs/reference/options.md is what `ddprun --help-markdown` makes from the option table, and
# --help names every option the page names: an option added to the table without regenerating the
# page fails here, with the command that regenerates it.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
page=$DDPRUN_SOURCE_DIR/docs/reference/options.md
"$DDPRUN" --help-markdown >"$T/options.md"
if ! diff -u "$page" "$T/options.md" >"$T/diff"; then
  cat "$T/diff" >&2
  fail "docs/reference/options.md differs from ddprun's option table; regenerate it: build/launcher/ddprun --help-markdown > docs/reference/options.md"
fi
ok "docs/reference/options.md is what the option table makes"

"$DDPRUN" --help >"$T/help"
grep -oE '^```\{option\} .*' "$page" | sed -E 's/^```\{option\} //' | tr ',' '\n' | awk '{print $1}' >"$T/names"
(( $(wc -l <"$T/names") > 50 )) || fail "too few options on the page: $(wc -l <"$T/names")"
while read -r name; do
  grep -qE -- "(^|[ ,])$name([ ,]|\$)" "$T/help" || fail "ddprun --help does not name $name, which the options page does"
done <"$T/names"
grep -E '^  -' "$T/help" | grep -oE -- '--[a-z_-]+' | sort -u >"$T/help_names"
while read -r name; do
  grep -qx -- "$name" "$T/names" || fail "ddprun --help names $name, which the options page does not"
done <"$T/help_names"
ok "--help and the options page name the same $(wc -l <"$T/names") option spellings"

# --help-markdown is a whole command line: nothing else with it.
set +e
"$DDPRUN" --help-markdown extra >"$T/out" 2>&1
rc=$?
set -e
expect_eq "$rc" 64 "--help-markdown with an argument: exit code"
