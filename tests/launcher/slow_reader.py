#!/usr/bin/python3
"""A deliberately slow console for output_flood_test.sh: reads its stdin in 64 KiB reads at
about --rate MB/s and checks, as the bytes arrive, that ddprun's output is complete.

--flood RANKS LINES WIDTH: every rank's lines "[rankR]: R NNNNNNNNN <letters>" (WIDTH bytes
  from R on), numbered from 0 to LINES-1, each whole, in order, none missing.
--line BYTES: one line of BYTES 'x' from rank 0, in ddprun's 64 KiB pieces ("[rank0]: xxx...").
  Once all of it has arrived: prints ddprun's peak RSS (VmHWM of --ddprun_pid) and creates
  --release, which lets the worker end.
Neither: counts the bytes only.
Prints what it received as key=value lines; exits 1 with the first problem.
"""
import argparse
import os
import sys
import time

LETTERS = b"abcdefghijklmnopqrstuvwxyz"


def flood_line(rank, i, width):
    head = b"%d %09d " % (rank, i)
    return head + (LETTERS * (width // len(LETTERS) + 1))[: width - len(head) - 1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, default=100.0, help="MB/s at most")
    ap.add_argument("--flood", nargs=3, type=int, metavar=("RANKS", "LINES", "WIDTH"))
    ap.add_argument("--line", type=int, metavar="BYTES")
    ap.add_argument("--ddprun_pid", type=int)
    ap.add_argument("--release")
    args = ap.parse_args()

    def fail(problem):
        print(f"slow_reader: {problem}", file=sys.stderr)
        sys.exit(1)

    next_line = {}
    payload = 0
    done = False
    total = 0
    tail = b""
    start = time.monotonic()

    def check(line):
        nonlocal payload, done
        if args.flood:
            ranks, lines, width = args.flood
            if not line.startswith(b"[rank") or b"]: " not in line[:16]:
                fail(f"a line without a rank prefix: {line[:80]!r}")
            rank = int(line[5 : line.index(b"]")])
            i = next_line.get(rank, 0)
            if rank >= ranks or i >= lines:
                fail(f"an extra line: {line[:80]!r}")
            if line[line.index(b"]: ") + 3 :] != flood_line(rank, i, width):
                fail(f"rank {rank}'s line {i} is missing, broken or mixed: got {line[:80]!r}...")
            next_line[rank] = i + 1
        else:
            if not line.startswith(b"[rank0]: "):
                fail(f"a piece without the rank prefix: {line[:80]!r}")
            piece = line[9:]
            if piece.strip(b"x"):
                fail(f"a piece with other bytes than x: {piece[:80]!r}")
            payload += len(piece)
            if payload > args.line:
                fail(f"more than {args.line} bytes")
            if payload == args.line and not done:
                done = True
                with open(f"/proc/{args.ddprun_pid}/status") as status:
                    hwm = next(l.split()[1] for l in status if l.startswith("VmHWM:"))
                print(f"ddprun_peak_rss_kib={hwm}", flush=True)
                open(args.release, "w").close()

    fd = sys.stdin.fileno()
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        total += len(chunk)
        lines = (tail + chunk).split(b"\n")
        tail = lines.pop()
        if args.flood or args.line:
            for line in lines:
                check(line)
        ahead = start + total / (args.rate * 1e6) - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
    if tail and (args.flood or args.line):
        fail(f"an unfinished last line: {tail[:80]!r}")
    seconds = time.monotonic() - start
    print(f"bytes={total}")
    print(f"mb_per_s={total / 1e6 / seconds:.0f}")
    if args.flood:
        ranks, lines, _ = args.flood
        for rank in range(ranks):
            print(f"rank{rank}_lines={next_line.get(rank, 0)}")
            if next_line.get(rank, 0) != lines:
                fail(f"rank {rank}: {next_line.get(rank, 0)} lines of {lines}")
    elif args.line:
        print(f"payload={payload}")
        if payload != args.line:
            fail(f"{payload} bytes of {args.line}")


if __name__ == "__main__":
    main()
