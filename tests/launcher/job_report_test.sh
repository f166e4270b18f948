#!/usr/bin/env bash
# `ddprun report` (issue 58, item 3): a real job with a scripted failure (rank 1 exits 3 once,
# --max_restarts=1) and --event_log, its page written by `ddprun report` and rendered by a real
# headless browser (Debian's chromium): the DOM after rendering shows the failure's rank and kind,
# the number of rounds and the goodput figure of --result_file, nothing of the log as markup, and
# a screenshot of it is no blank page. Also: the log of a killed ddprun with a last line cut short,
# an empty and a foreign file. Skips (after the checks without a browser) where chromium is absent.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"

# Rank 1 of the first attempt says markup in its last words and exits 3 after 20 beats; every
# other worker beats 20 times and succeeds, or, with FOREVER, beats until it is stopped.
worker life <<'SH'
#!/bin/bash
for i in $(seq 1 20); do sleep 0.05; touch "$DDPRUN_HEARTBEAT_FILE"; done
if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ "$RANK" = 1 ]; then
  echo "boom <img src=x onerror=alert(1)> & <b>bold</b>" >&2
  exit 3
fi
while [ -n "${FOREVER:-}" ]; do sleep 0.05; touch "$DDPRUN_HEARTBEAT_FILE"; done
SH

run_ddprun job --nproc_per_node=2 --max_restarts=1 --event_log="$T/events.jsonl" --result_file="$T/result.json" "$T/life"
expect_eq "$RC" 0 "the job's exit code"
expect_in "$T/events.jsonl" '"event":"progress"'

run_ddprun report report "$T/events.jsonl"
expect_eq "$RC" 0 "ddprun report's exit code"
expect_in "$T/report.err" "^ddprun: report of .*events.jsonl \([0-9]+ records, 2 rounds, 1 failures\) in .*/events.html$"
[[ -s "$T/events.html" ]] || fail "no page written"
expect_not_in "$T/events.html" "<img|<b>bold|https?://"
ok "the page of a job restarted once"

# A ddprun killed while its workers run: no exit record, and a last line cut short.
FOREVER=1 "$DDPRUN" --nproc_per_node=1 --event_log="$T/killed.jsonl" "$T/life" >"$T/killed.out" 2>&1 &
ddprun_pid=$!
wait_for 60 grep -q '"event":"progress"' "$T/killed.jsonl"
kill -KILL "$ddprun_pid"
wait "$ddprun_pid" || true
printf '{"time":1,"node":"h","eve' >>"$T/killed.jsonl"
run_ddprun killed-report report "$T/killed.jsonl" -o "$T/killed.html"
expect_eq "$RC" 0 "ddprun report's exit code for a killed job"
expect_in "$T/killed.html" "No exit record of"
expect_in "$T/killed.html" "last line was cut short"
ok "the page of a killed job"

# An empty and a foreign file: one line, exit 64, no page.
: >"$T/empty.jsonl"
printf 'root:x:0:0:root:/root:/bin/bash\n{"not": "a record"}\n' >"$T/foreign.jsonl"
for name in empty foreign; do
  run_ddprun "$name" report "$T/$name.jsonl"
  expect_eq "$RC" 64 "ddprun report's exit code for the $name file"
  expect_eq "$(wc -l <"$T/$name.err")" 1 "lines said for the $name file"
  [[ ! -e "$T/$name.html" ]] || fail "a page was written for the $name file"
done
expect_in "$T/empty.err" "^ddprun: error: report .*empty.jsonl: the file is empty; give the file of --event_log$"
expect_in "$T/foreign.err" "^ddprun: error: report .*foreign.jsonl: not an event log of ddprun"
ok "an empty and a foreign file refused"

browser=$(command -v chromium || command -v chromium-browser || true)
[[ -n "$browser" ]] || skip "no chromium to render the page in (scripts/install-deps.sh installs it)"
# As root, chromium runs only without its sandbox; its profile in the test's folder. Its start on
# a loaded machine can take many seconds: the limit is generous, and nothing waits on a sleep.
chrome() {
  timeout 180 "$browser" --headless --no-sandbox --disable-gpu --no-first-run --user-data-dir="$T/chromium" \
    "$@" "file://$T/events.html" 2>"$T/chromium.err"
}
chrome --dump-dom >"$T/dom.html" || { cat "$T/chromium.err" >&2; fail "chromium --dump-dom failed"; }
# What the rendered page shows: 2 rounds, 1 failure, rank 1's exit_code on the timeline and in
# the table, the result file's goodput, and the worker's markup as text.
# (an upper bound here: no checkpoint was committed to DDPRUN_SNAPSHOT_DIR, the work redone is unknown)
ett=$(python3 -c "
import json, sys
g = json.load(open(sys.argv[1]))['goodput']
print(('at most ' if g['ett_upper_bound'] else '') + f\"{g['ett_percent']:.1f}%\")" "$T/result.json")
python3 - "$T/dom.html" "$ett" <<'PY'
import html.parser, sys
dom, ett = open(sys.argv[1]).read(), sys.argv[2]

class Page(html.parser.HTMLParser):
    """The text of each element with an id, the failures table's rows, and every tag seen."""
    def __init__(self):
        super().__init__()
        self.by_id, self.stack, self.tags, self.rows, self.row, self.labels = {}, [], set(), [], None, []
        self.table = None
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.add(tag)
        if tag == "table": self.table = a.get("id")
        if tag == "tr" and self.table == "failure-table": self.row = []
        if tag == "td" and self.row is not None: self.row.append("")
        self.stack.append((tag, a.get("id"), a.get("class")))
    def handle_endtag(self, tag):
        while self.stack:
            t, _, _ = self.stack.pop()
            if t == tag: break
        if tag == "tr" and self.row: self.rows.append(self.row)
        if tag == "tr": self.row = None
    def handle_data(self, data):
        for _, i, _ in self.stack:
            if i: self.by_id[i] = self.by_id.get(i, "") + data
        if self.row: self.row[-1] += data
        if self.stack and self.stack[-1][0] == "text" and self.stack[-1][2] == "failure": self.labels.append(data)

p = Page()
p.feed(dom)
def expect(what, got, wanted):
    if got != wanted: sys.exit(f"FAIL: {what}: expected {wanted!r}, got {got!r}")
expect("rounds shown", p.by_id.get("rounds"), "2")
expect("failures shown", p.by_id.get("failures"), "1")
expect("outcome shown", p.by_id.get("outcome", "").endswith("exited 0"), True)
ett_ids = [v for k, v in p.by_id.items() if k.startswith("ett-")]
expect("goodput shown", ett_ids, [ett])
expect("failure labels on the timeline", p.labels, ["rank 1 exit_code"])
expect("failure rows", len(p.rows), 1)
at, node, round_, rank, kind, code, cause = p.rows[0]
expect("failure's rank, kind, code and round", (rank, kind, code, round_), ("1", "exit_code", "3", "1"))
if "<img src=x onerror=alert(1)> & <b>bold</b>" not in cause: sys.exit(f"FAIL: the cause as text: {cause!r}")
if "img" in p.tags: sys.exit("FAIL: the worker's markup became an element")
expect("drawings", {"svg", "polyline"} <= p.tags, True)
print(f"ok: rendered: 2 rounds, rank 1 exit_code, goodput {ett}, the cause as text")
PY

# The page's top (its figures, the goodput bar, the timeline): the check decodes it in Python.
chrome --window-size=1100,800 --screenshot="$T/page.png" >/dev/null || { cat "$T/chromium.err" >&2; fail "chromium --screenshot failed"; }
# Not blank: the PNG decoded (zlib, its filters undone), with the colours of the page's parts.
python3 - "$T/page.png" <<'PY'
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
pos, idat, width, height, kind = 8, b"", 0, 0, 0
while pos < len(data):
    n, tag = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    if tag == b"IHDR": width, height, depth, kind = struct.unpack(">IIBB", body[:10])
    if tag == b"IDAT": idat += body
    pos += 12 + n
bpp = {2: 3, 6: 4}[kind]
raw, stride, prev, pixels = zlib.decompress(idat), width * bpp, bytearray(width * bpp), set()
for y in range(height):
    f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
    for i in range(stride):
        a, b = line[i - bpp] if i >= bpp else 0, prev[i]
        c = prev[i - bpp] if i >= bpp else 0
        if f == 1: line[i] = (line[i] + a) & 255
        elif f == 2: line[i] = (line[i] + b) & 255
        elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    prev = line
    pixels.update(bytes(line[i:i + 3]) for i in range(0, stride, bpp * 4))
wanted = {"round": (0x4a, 0x78, 0xc8), "training": (0x3a, 0x9a, 0x4a), "failure": (0xd0, 0x20, 0x20)}
missing = [k for k, rgb in wanted.items() if bytes(rgb) not in pixels]
if len(pixels) < 20 or missing:
    sys.exit(f"FAIL: the screenshot looks blank: {len(pixels)} colours, missing {missing}")
print(f"ok: screenshot {width}x{height}, {len(pixels)} colours")
PY
ok "rendered in $("$browser" --version 2>/dev/null || echo chromium)"
