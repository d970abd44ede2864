"""Rank the hot spots of a py-spy raw (collapsed stacks) profile.

    .venv/bin/python -m bench.profile_top PROFILE.txt [--top 25] [--filter broker/]

Prints, as % of all samples: the lines where time is spent (self, by
file:line), the functions with the most self time, and the functions with the
most inclusive time (themselves plus what they call).
"""
from __future__ import annotations

import argparse
import os
import re
import sys
from collections import Counter

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


def parse_frame(frame: str) -> tuple[str, str, str]:
    m = _FRAME.match(frame.strip())
    if not m:
        return frame.strip(), "", ""
    path = m.group("file")
    for marker in ("/site-packages/", "/lib/python3"):
        if marker in path:
            path = "..." + path[path.index(marker):]
            break
    else:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + "/"
        path = path.replace(root, "")
    return m.group("func"), path, m.group("line") or ""


def load(path: str) -> list[tuple[list[str], int]]:
    stacks = []
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            stack, _, count = line.rpartition(" ")
            try:
                stacks.append((stack.split(";"), int(count)))
            except ValueError:
                continue
    return stacks


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("profile")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--filter", help="only count samples whose stack mentions this text")
    a = p.parse_args(argv)
    stacks = load(a.profile)
    if a.filter:
        stacks = [(s, c) for s, c in stacks if any(a.filter in f for f in s)]
    total = sum(c for _, c in stacks)
    if not total:
        print("no samples")
        return 1
    self_line: Counter = Counter()
    self_func: Counter = Counter()
    incl_func: Counter = Counter()
    for frames, count in stacks:
        func, path, line = parse_frame(frames[-1])
        self_line[f"{func}  {path}:{line}"] += count
        self_func[f"{func}  {path}"] += count
        seen = set()
        for frame in frames:
            f, pth, _ = parse_frame(frame)
            key = f"{f}  {pth}"
            if key not in seen:
                seen.add(key)
                incl_func[key] += count
    print(f"{a.profile}: {total} samples")
    for title, counter in (("self time by line", self_line), ("self time by function", self_func),
                           ("inclusive time by function", incl_func)):
        print(f"\n-- {title}")
        for key, count in counter.most_common(a.top):
            print(f"{100 * count / total:6.1f}%  {key}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
