#!/usr/bin/env python3
"""split_brain_check.py against crafted histories, as a table: each must pass or fail with the
words given, so that the checker is shown to catch a split brain, not only to pass a clean run."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import split_brain_check  # noqa: E402


def ev(t, event, **fields):
    return dict(time=t, event=event, **fields)


def round_started(t, number, group_rank, nodes, ranks):
    return ev(t, "round_started", round=number, group_rank=group_rank, group_world_size=nodes, world_size=ranks)


def rec(what, t, rank, pid):
    return {"what": what, "real": t, "rank": rank, "pid": pid, "restart": 0, "mono": t}


def node(name, group_rank, nodes, ranks, my_ranks, pid0, start, end, number=1, done=True, exit_code=0):
    """One node that runs round NUMBER's MY_RANKS from START to END, and its workers' records."""
    events = [round_started(start, number, group_rank, nodes, ranks)]
    records = []
    for i, r in enumerate(my_ranks):
        events.append(ev(start + 0.01, "worker_started", rank=r, pid=pid0 + i))
        records.append(rec("start", start + 0.02, r, pid0 + i))
        if end is not None:
            records.append(rec("done" if done else "end", end - 0.01, r, pid0 + i))
            events.append(ev(end, "worker_exited", rank=r, pid=pid0 + i))
    if exit_code is not None:
        events.append(ev((end or start) + 0.1, "exit", exit_code=exit_code))
    return [name, events, records]


def rounds(first, *later):
    """One node's history over several rounds, from node() of each: its events, then its records,
    in round order."""
    name, events, records = first[0], list(first[1]), list(first[2])
    for n in later:
        events += n[1]
        records += n[2]
    return [name, events, records]


def clean():
    return [node("a", 0, 2, 4, [0, 1], 100, 10.0, 20.0), node("b", 1, 2, 4, [2, 3], 200, 10.0, 20.0)]


def replaced_by_spare(b_end, b_logged_exit=True):
    """Round 1: a and b; b cut off, its ranks 2 and 3 go to spare c in round 2 (from 30.0)."""
    a = rounds(node("a", 0, 2, 4, [0, 1], 100, 10.0, 29.0, done=False, exit_code=None),
               node("a", 0, 2, 4, [0, 1], 110, 30.0, 40.0, number=2))
    b = node("b", 1, 2, 4, [2, 3], 200, 10.0, b_end, done=False, exit_code=69)
    if not b_logged_exit:
        b[1] = [e for e in b[1] if e["event"] != "worker_exited"]
        b[2] = [r for r in b[2] if r["what"] == "start"]
    c = node("c", 1, 2, 4, [2, 3], 300, 30.0, 40.0, number=2)
    return [a, b, c]


def stalled_launcher(gone_at, reaped_at=45.0):
    """b's ddprun stopped while its workers run: they are killed (seen gone at GONE_AT by an
    observer), and b's ddprun, resumed, logs their exits only at REAPED_AT."""
    nodes = replaced_by_spare(reaped_at)
    for n in nodes:
        if n[0] == "b":
            n[2] = [r for r in n[2] if r["what"] == "start"] + [rec("gone", gone_at, r, 200 + i) for i, r in enumerate([2, 3])]
    return nodes


def stopped_after_fork(gone_at, logged_at):
    """As stalled_launcher, but b's ddprun was stopped between its workers' forks and its
    worker_started records: their time ("forked") is LOGGED_AT, after the observer saw them gone."""
    nodes = stalled_launcher(gone_at, reaped_at=logged_at + 0.1)
    for n in nodes:
        if n[0] == "b":
            for e in n[1]:
                if e["event"] == "worker_started":
                    e["time"] = e["forked"] = logged_at
    return nodes


def drop(nodes, name, what):
    for n in nodes:
        if n[0] == name:
            n[2] = [r for r in n[2] if r["what"] != what]
    return nodes


CASES = [
    # (what, nodes, expect_success, words every error line must contain, in order; [] = passes)
    ("a clean run of 2 nodes", clean(), True, []),
    ("b's workers gone before the spare starts", replaced_by_spare(29.5), True, []),
    ("b's workers outlive the spare's start by 0.5 s", replaced_by_spare(30.5), True,
     ["rank 2 held by two live workers for 0.490 s", "rank 3 held by two live workers for 0.490 s"]),
    ("b's workers never seen ending", replaced_by_spare(29.5, b_logged_exit=False), True,
     ["rank 2 held by two live workers for 9.990 s: b pid 200 (round 1) alive 10.010..never seen ending",
      "rank 3 held by two live workers for 9.990 s: b pid 201 (round 1) alive 10.010..never seen ending"]),
    ("b's workers seen gone before the spare's start, reaped after it", stalled_launcher(29.8), True, []),
    ("b's workers logged started (stopped since their fork) after they were seen gone and the spare started",
     stopped_after_fork(29.8, 35.0), True, []),
    ("b's workers seen gone only after the spare's start", stalled_launcher(30.3), True,
     ["rank 2 held by two live workers for 0.290 s", "rank 3 held by two live workers for 0.290 s"]),
    ("two nodes run the same ranks in one round",
     [node("a", 0, 2, 4, [0, 1], 100, 10.0, 20.0, exit_code=None),
      node("b", 1, 2, 4, [0, 1], 200, 10.0, 20.0, exit_code=None)], False,
     ["rank 0 held by two live workers", "rank 1 held by two live workers", "world size 4, but its nodes started ranks [0, 0, 1, 1]"]),
    ("a round says 3 nodes, 2 started it",
     [node("a", 0, 3, 4, [0, 1], 100, 10.0, 20.0), node("b", 1, 3, 4, [2, 3], 200, 10.0, 20.0)], True,
     ["round 1: group world size 3, but 2 nodes started it"]),
    ("an earlier round that a member never started (lost before its assignment came)",
     [rounds(node("a", 0, 3, 6, [0, 1], 100, 10.0, 19.0, done=False, exit_code=None),
             node("a", 0, 2, 4, [0, 1], 110, 20.0, 30.0, number=2)),
      rounds(node("b", 1, 3, 6, [2, 3], 200, 10.0, 19.0, done=False, exit_code=None),
             node("b", 1, 2, 4, [2, 3], 210, 20.0, 30.0, number=2))], True, []),
    ("a pid used again by another rank in a later round (a long run) is another worker",
     [rounds(node("a", 0, 2, 4, [0, 1], 100, 10.0, 19.0, done=False, exit_code=None),
             node("a", 0, 2, 4, [0, 1], 99, 30.0, 40.0, number=2)),
      rounds(node("b", 1, 2, 4, [2, 3], 200, 10.0, 19.0, done=False, exit_code=None),
             node("b", 1, 2, 4, [2, 3], 210, 30.0, 40.0, number=2))], True, []),
    ("the nodes disagree on the world size",
     [node("a", 0, 2, 4, [0, 1], 100, 10.0, 20.0), node("b", 1, 2, 6, [2, 3], 200, 10.0, 20.0)], True,
     ["round 1: the nodes disagree on its size"]),
    ("a rank of the world was never started",
     [node("a", 0, 2, 5, [0, 1], 100, 10.0, 20.0), node("b", 1, 2, 5, [2, 3], 200, 10.0, 20.0)], False,
     ["round 1: world size 5, but its nodes started ranks [0, 1, 2, 3]", "round 1 (the last): no final record of rank 4"]),
    ("two nodes with one group rank",
     [node("a", 0, 2, 4, [0, 1], 100, 10.0, 20.0), node("b", 0, 2, 4, [2, 3], 200, 10.0, 20.0)], True,
     ["round 1: group ranks [0, 0], not 0 to 1"]),
    ("a successful job without rank 3's final record", drop(clean(), "b", "done"), True,
     ["round 1 (the last): no final record of rank 2, 3"]),
    ("a job expected to succeed that failed",
     [node("a", 0, 2, 4, [0, 1], 100, 10.0, 20.0, exit_code=1), node("b", 1, 2, 4, [2, 3], 200, 10.0, 20.0, exit_code=1)],
     True, ["the job did not end successfully: exits a 1, b 1"]),
    # With outputs (name, ddprun's console lines, the lines its workers printed): no output lost.
    ("every line b's workers printed is in b's output", clean(), True, [],
     [("b", ["ddprun: x", "[rank2]: tick b 200 1", "[rank3]: tick b 201 1", "[rank2]: tick b 200 2"],
       ["tick b 200 1", "tick b 201 1", "tick b 200 2"])]),
    ("a line b's worker printed is not in b's output", clean(), True,
     ["b: 1 of 3 lines its workers wrote are not in ddprun's output, the first: 'tick b 201 1'"],
     [("b", ["[rank2]: tick b 200 1", "[rank2]: tick b 200 2"], ["tick b 200 1", "tick b 201 1", "tick b 200 2"])]),
    ("a line cut short in b's output", clean(), True,
     ["b: 1 of 1 lines its workers wrote are not in ddprun's output, the first: 'tick b 200 12'"],
     [("b", ["[rank2]: tick b 200 1"], ["tick b 200 12"])]),
]


def main():
    failed = 0
    for what, nodes, expect_success, expected, *outputs in CASES:
        errors = split_brain_check.check([tuple(n) for n in nodes], expect_success, outputs[0] if outputs else ())
        ok = len(errors) == len(expected) and all(words in line for words, line in zip(expected, errors))
        if not ok:
            failed += 1
            print("FAIL: %s: expected %s, got %s" % (what, expected or "no error", errors or "no error"))
        else:
            print("ok: %s%s" % (what, "" if not errors else ": caught (%s)" % errors[0]))
    if failed:
        print("FAIL: %d of %d cases" % (failed, len(CASES)))
        return 1
    print("ok: %d cases" % len(CASES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
