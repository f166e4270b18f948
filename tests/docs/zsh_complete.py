#!/usr/bin/env python3
"""What an interactive zsh lists when TAB is pressed after a command line.

Usage: zsh_complete.py TMPDIR COMPLETION_SCRIPT "COMMAND LINE"
Starts `zsh -f -i` on a pseudo-terminal, loads compinit and the completion script, types the
command line and a TAB (bound to a widget that completes and then prints a marker), then, once
the marker is there, a marker command; prints the matches the completion added, one a
line (compadd is wrapped to record them in TMPDIR/hits, as zsh-capture-completion does, so that
nothing depends on how zsh draws its list). Reads until the marker, no sleeps; exit 1 when zsh
does not answer within 60 s.
"""
import os
import pty
import select
import sys
import time

tmp, script, line = sys.argv[1], sys.argv[2], sys.argv[3]
pid, fd = pty.fork()
if pid == 0:
    os.environ.update({"ZDOTDIR": tmp, "TERM": "dumb", "PS1": "> ", "HOME": tmp})
    os.execvp("zsh", ["zsh", "-f", "-i"])

deadline = time.monotonic() + 60
output = b""


def read_until(marker):
    global output
    while marker not in output:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            sys.stdout.write(output.decode(errors="replace"))
            sys.exit(f"zsh did not print {marker!r} within 60 s")
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            chunk = b""
        if not chunk:
            sys.stdout.write(output.decode(errors="replace"))
            sys.exit("zsh ended early")
        output += chunk
    found = output.index(marker) + len(marker)
    before, output = output[:found], output[found:]
    return before


def send(text):
    os.write(fd, text.encode())


# The markers are computed by the shell, so that zsh's echo of what is typed never matches.
hits = os.path.join(tmp, "hits")
if os.path.exists(hits):
    os.remove(hits)
send(f"unsetopt beep zle_bracketed_paste; autoload -U compinit; compinit -u -d {tmp}/zcompdump; source {script}\n")
# Options -O, -A, -D only fill arrays: not matches offered.
send("compadd() { if [[ ${@[1,(i)(-|--)]} == *-(O|A|D)\\ * ]]; then builtin compadd \"$@\"; return; fi; "
     "local -a found; builtin compadd -A found \"$@\"; (( $#found )) && print -rl -- $found >>" + hits + "; "
     "builtin compadd \"$@\"; }\n")
# TAB completes, then says so: the rest is typed only once the completion has run (input typed
# ahead of a completion can make zsh skip it, which a loaded machine made happen).
send("_complete_and_say() { zle complete-word; print -u2 COMPLETED$((40+2)); }; zle -N _complete_and_say; "
     "bindkey '^I' _complete_and_say; echo READY$((40+2))\n")
read_until(b"READY42")
send(line + "\t")
read_until(b"COMPLETED42")
send("\x15echo DONE$((40+2))\n")  # ^U: the line is dropped, the marker command runs
read_until(b"DONE42")
send("exit\n")
os.waitpid(pid, 0)
if os.path.exists(hits):
    with open(hits) as f:
        sys.stdout.write(f.read())
