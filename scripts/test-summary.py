#!/usr/bin/python3
"""Totals of several CTest runs, from their JUnit files, with the reason of every skipped test.

    scripts/test-summary.py NAME=FILE.xml [NAME=FILE.xml ...]

CTest's own summary says that a test was skipped, not why; the reason is the SKIP: line the test
printed. The last line is the total over every run: "total: N passed, N failed, N skipped".
"""
import sys
import xml.etree.ElementTree as ET


def main():
    passed = failed = skipped = 0
    for arg in sys.argv[1:]:
        name, _, path = arg.partition("=")
        for case in ET.parse(path).getroot().iter("testcase"):
            if case.find("skipped") is not None:
                skipped += 1
                out = case.findtext("system-out") or ""
                reason = next((l[len("SKIP: "):] for l in out.splitlines() if l.startswith("SKIP: ")), "no reason printed")
                print(f"skipped ({name}): {case.get('name')}: {reason}")
            elif case.find("failure") is not None or case.get("status") == "fail":
                failed += 1
            else:
                passed += 1
    print(f"total: {passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
