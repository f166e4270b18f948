#!/usr/bin/env python3
"""Checks a multi-node run's history for a split brain (issue 43). Standard library only.

Reads each node's --event_log and the records its workers wrote themselves, and proves:
  1. at most one live worker per rank of the job at any moment;
  2. every round's nodes agree on its sizes and started distinct group ranks and ranks within them
     (a member lost or fenced before it started may be missing from a round the coordinator then
     stopped); the last round has every node and every rank, 0 to world size - 1, once;
  3. a job that ended successfully (an `exit` event of code 0) has, for every rank of its last
     round, the final record ("done") of the worker that held it;
  4. no output lost: for each --output, every line a worker wrote to its standard output (and
     then to PRINTED, once the write had returned: the line was in ddprun's pipe) is in CONSOLE,
     ddprun's standard output, whole. Given for the launchers that ended by themselves (one
     SIGKILLed takes what its pipes held with it).

usage: split_brain_check.py [--expect-success] --node NAME EVENT_LOG WORKER_RECORDS ...
                            [--output NAME CONSOLE PRINTED ...]

The job is what the logs given hold (one run of one --rdzv_id). A worker record file holds one
JSON object a line, written by the worker (tests/elastic/netfault_scenario_test.sh's worker):
  {"what": "start"|"end"|"done"|"gone", "rank": R, "pid": P, "restart": C, "real": SECONDS, "mono": SECONDS}
"real" is the time since the epoch: the nodes of a test are namespaces of one machine, so one
clock. A worker is alive from the first to the last evidence of it: the earliest of its own start
record and ddprun's worker_started, to the latest of its end or done record and ddprun's
worker_exited. A "gone" record is written by an observer outside the worker that saw it end at
that time (tests/elastic/worker_observer.py). Both it and worker_exited prove the worker had ended
by then: the worker is alive to the earliest such proof, or to its own last record if that came
later (ddprun's worker_exited can come much later: a ddprun that was stopped reaps late). A worker with no evidence of its end is alive to the end of the
history, so a lost log is never read as a dead worker. Exit 0 with a summary when every check holds; 1 with one
line per broken invariant.
"""

import json
import sys

INFINITY = float("inf")


class Worker:
    def __init__(self, node, pid):
        self.node, self.pid = node, pid
        self.rank = None
        self.round = None
        self.start = INFINITY
        self.end = None
        self.gone = None       # the earliest an observer saw it dead
        self.last_life = None  # its own last record
        self.done = False
        self.logged = False    # ddprun's worker_started seen

    def seen_alive(self, t):
        self.start = min(self.start, t)

    def seen_ended(self, t):
        self.end = t if self.end is None else max(self.end, t)

    def seen_gone(self, t):
        """Proof that it had ended by t: an observer saw it gone, or its ddprun reaped it."""
        self.gone = t if self.gone is None else min(self.gone, t)

    def seen_record(self, t):
        self.last_life = t if self.last_life is None else max(self.last_life, t)

    def interval(self):
        if self.gone is not None:
            return self.start, self.gone if self.last_life is None else max(self.gone, self.last_life)
        return self.start, INFINITY if self.end is None else self.end

    def __str__(self):
        start, end = self.interval()
        return "%s pid %d (round %s) alive %.3f..%s" % (
            self.node, self.pid, self.round, start, "never seen ending" if end == INFINITY else "%.3f" % end)


def read_lines(path):
    """Every JSON object of a file of JSON lines; a torn last line (a writer killed) is skipped."""
    out = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except ValueError:
                raise SystemExit("%s:%d: not JSON: %s" % (path, number, line[:80]))
    return out


def build(nodes):
    """nodes: [(name, events, records)]. Returns workers keyed by (node, pid, instance), rounds
    (round -> [(node, round_started event, ranks started)]) and the exit events.

    A pid is used again over a long run: the evidence of one pid on one node is taken in time
    order, and a new worker begins at a sign of a start (ddprun's worker_started, the worker's
    "start" record) that comes after a proof of the last one's end (its worker_exited, a "gone",
    its own "end" or "done"). Except ddprun's worker_started for a worker that has none yet: ddprun
    logs each worker it forks once, and its time ("forked", taken as fork() returned) is late when
    ddprun was stopped in between, maybe past the worker's end."""
    workers, rounds, exits = {}, {}, []
    evidence = {}  # (node, pid) -> [(time, order, kind, item, round)]

    for name, events, records in nodes:
        current = None
        for order, e in enumerate(events):
            kind = e.get("event")
            if kind == "round_started":
                current = (name, e, [])
                rounds.setdefault(e["round"], []).append(current)
            elif kind in ("worker_started", "worker_exited"):
                # A worker's start at its fork: ddprun, stopped in between, may write the record later.
                t = e.get("forked", e["time"]) if kind == "worker_started" else e["time"]
                evidence.setdefault((name, e["pid"]), []).append(
                    (t, order, kind, e, None if current is None else current[1]["round"]))
                if kind == "worker_started" and current is not None:
                    current[2].append(e["rank"])
            elif kind == "exit":
                exits.append((name, e))
        for order, r in enumerate(records):
            evidence.setdefault((name, r["pid"]), []).append((r["real"], len(events) + order, r["what"], r, None))

    for (name, pid), items in evidence.items():
        instance, w, ended = 0, None, False
        for t, _, kind, item, round_number in sorted(items, key=lambda x: (x[0], x[1])):
            logged_late = kind == "worker_started" and w is not None and not w.logged
            if w is None or (kind in ("worker_started", "start") and ended and not logged_late):
                instance += 1
                w = workers[(name, pid, instance)] = Worker(name, pid)
                ended = False
            w.rank = item["rank"] if w.rank is None else w.rank
            if kind == "worker_started":
                w.round = round_number
                w.logged = True
                w.seen_alive(t)
            elif kind == "worker_exited":
                w.seen_ended(t)
                w.seen_gone(t)
                ended = True
            elif kind == "gone":
                w.seen_gone(t)
                ended = True
            else:  # the worker's own record: start, end or done
                w.seen_record(t)
                w.seen_alive(t)
                if kind != "start":
                    w.seen_ended(t)
                    w.done = w.done or kind == "done"
                    ended = True
    return workers, rounds, exits


def check_one_holder(workers):
    errors = []
    by_rank = {}
    for w in workers.values():
        if w.rank is None:
            errors.append("%s: a worker record with no rank" % w)
            continue
        by_rank.setdefault(w.rank, []).append(w)
    for rank, held in sorted(by_rank.items()):
        held.sort(key=lambda w: w.interval())
        for i, a in enumerate(held):
            for b in held[i + 1:]:
                (a0, a1), (b0, b1) = a.interval(), b.interval()
                if a0 < b1 and b0 < a1:
                    both = min(a1, b1) - max(a0, b0)
                    errors.append("rank %d held by two live workers for %s: %s; %s" % (
                        rank, "ever" if both == INFINITY else "%.3f s" % both, a, b))
    return errors


def check_rounds(rounds):
    """Every round's nodes agree on its size; they hold distinct group ranks and distinct ranks within
    it. A member may never start its workers (lost, or fenced before its assignment arrived: the
    coordinator then stops the round), so a round may have fewer nodes than its group world size,
    never more; the last round, the one that ends the job, must have all of them."""
    errors = []
    last = max(rounds) if rounds else None
    for number, members in sorted(rounds.items()):
        nodes = [m[0] for m in members]
        sizes = {(m[1]["group_world_size"], m[1]["world_size"]) for m in members}
        if len(sizes) != 1:
            errors.append("round %d: the nodes disagree on its size: %s" % (
                number, ", ".join("%s says %d nodes, %d ranks" % (m[0], m[1]["group_world_size"],
                                                                  m[1]["world_size"]) for m in members)))
            continue
        group_world_size, world_size = sizes.pop()
        complete = number == last
        if group_world_size < len(nodes) or (complete and group_world_size != len(nodes)):
            errors.append("round %d: group world size %d, but %d nodes started it (%s)" % (
                number, group_world_size, len(nodes), ", ".join(nodes)))
        group_ranks = sorted(m[1].get("group_rank") for m in members)
        if len(set(group_ranks)) != len(group_ranks) or not set(group_ranks) <= set(range(group_world_size)) or (
                complete and group_ranks != list(range(len(nodes)))):
            errors.append("round %d: group ranks %s, not 0 to %d" % (number, group_ranks, group_world_size - 1))
        ranks = sorted(r for m in members for r in m[2])
        if len(set(ranks)) != len(ranks) or not set(ranks) <= set(range(world_size)) or (
                complete and ranks != list(range(world_size))):
            errors.append("round %d: world size %d, but its nodes started ranks %s" % (number, world_size, ranks))
    return errors


def check_final_records(workers, rounds, exits):
    if not any(e.get("exit_code") == 0 for _, e in exits):
        return ["the job did not end successfully: exits %s" % (
            ", ".join("%s %s" % (n, e.get("exit_code")) for n, e in exits) or "none")]
    if not rounds:
        return ["the job ended successfully without a round"]
    last = max(rounds)
    world_size = rounds[last][0][1]["world_size"]
    done = {w.rank for w in workers.values() if w.round == last and w.done}
    missing = sorted(set(range(world_size)) - done)
    return ["round %d (the last): no final record of rank %s" % (last, ", ".join(map(str, missing)))] if missing else []


def check_output(name, console, printed):
    """console: ddprun's standard output, as lines ("[rank0]: ..." for a worker's line); printed:
    the lines its workers had written to theirs. Each printed line must be a console line's whole
    text after its prefix."""
    shown = set()
    for line in console:
        if line.startswith("[rank"):
            shown.add(line.split("]: ", 1)[-1])
    lost = [line for line in printed if line not in shown]
    if not lost:
        return []
    return ["%s: %d of %d lines its workers wrote are not in ddprun's output, the first: %r" % (
        name, len(lost), len(printed), lost[0])]


def check(nodes, expect_success=False, outputs=()):
    """The broken invariants of a history, as lines; none when it holds. outputs: [(name, console
    lines, printed lines)]."""
    workers, rounds, exits = build(nodes)
    errors = check_one_holder(workers) + check_rounds(rounds)
    if expect_success or any(e.get("exit_code") == 0 for _, e in exits):
        errors += check_final_records(workers, rounds, exits)
    for name, console, printed in outputs:
        errors += check_output(name, console, printed)
    return errors


def read_text(path):
    """A file's lines; a torn last line (a writer killed mid-line) is left out."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    lines = text.split("\n")
    return lines[:-1]  # after the last newline: empty, or a torn line


def main(argv):
    expect_success = "--expect-success" in argv
    args = [a for a in argv if a != "--expect-success"]
    nodes, outputs = [], []
    while args:
        if args[0] == "--node" and len(args) >= 4:
            nodes.append((args[1], read_lines(args[2]), read_lines(args[3])))
        elif args[0] == "--output" and len(args) >= 4:
            outputs.append((args[1], read_text(args[2]), read_text(args[3])))
        else:
            raise SystemExit(__doc__.split("\n\n")[2])
        args = args[4:]
    if not nodes:
        raise SystemExit(__doc__.split("\n\n")[2])
    errors = check(nodes, expect_success, outputs)
    for line in errors:
        print("split brain check: " + line)
    if errors:
        return 1
    workers, rounds, _ = build(nodes)
    print("split brain check: ok: %d workers, %d rounds, %d nodes; every rank held by one live worker at a time"
          % (len(workers), len(rounds), len(nodes)))
    if outputs:
        print("split brain check: ok: no output lost: %d lines of %d launchers' workers, each in its launcher's output"
              % (sum(len(p) for _, _, p in outputs), len(outputs)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
