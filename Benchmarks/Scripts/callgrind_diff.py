#!/usr/bin/env python3
"""Instructions per message by function, from two callgrind profiles of the same workload.

callgrind_per_message.sh with KEEP=dir keeps a run of N2 messages and one of N1; the difference
between the two, divided by N2 - N1, leaves out start-up and connect, as the script's total does.

  Scripts/callgrind_diff.py dir/WORKLOAD.callgrind N2 dir/WORKLOAD.N1.callgrind N1 [--top K] [--match REGEX]
      the functions with the most instructions of their own per message
  Scripts/callgrind_diff.py ... --calls REGEX
      what the functions matching REGEX call, per message, with calls per message
  Scripts/callgrind_diff.py ... --callers REGEX
      which functions call those matching REGEX, per message, with calls per message

Names are demangled with `swift demangle` when it is on the PATH.
"""
import argparse
import collections
import re
import shutil
import subprocess


def load(path):
    """Self cost per function name and inclusive cost and call count per (caller, callee) name."""
    names = {}
    own = collections.Counter()
    edges = collections.Counter()
    counts = collections.Counter()
    function = callee = None
    pending_calls = None
    with open(path, errors="replace") as lines:
        for line in lines:
            if line.startswith(("fn=", "cfn=")):
                key, _, value = line.rstrip("\n").partition("=")
                match = re.match(r"\((\d+)\)(?: (.*))?", value)
                ident = match.group(1) if match else value
                if match and match.group(2):
                    names[ident] = match.group(2)
                if key == "fn":
                    function = ident
                else:
                    callee = ident
                continue
            if line.startswith("calls="):
                pending_calls = int(line[6:].split()[0])
                continue
            if line[:1].isdigit() or line[:1] in "+-*":
                fields = line.split()
                if len(fields) < 2:
                    continue
                cost = int(fields[1])
                if pending_calls is not None:
                    edges[(function, callee)] += cost
                    counts[(function, callee)] += pending_calls
                    pending_calls = None
                else:
                    own[function] += cost
    name = lambda ident: names.get(ident, ident)
    by_name = collections.Counter()
    for ident, cost in own.items():
        by_name[name(ident)] += cost
    edge_names = collections.Counter()
    count_names = collections.Counter()
    for (caller, target), cost in edges.items():
        edge_names[(name(caller), name(target))] += cost
        count_names[(name(caller), name(target))] += counts[(caller, target)]
    return by_name, edge_names, count_names


def demangle(rows):
    if not shutil.which("swift") or not rows:
        return rows
    text = "\n".join(rows)
    done = subprocess.run(["swift", "demangle", "--simplified"], input=text, capture_output=True, text=True)
    return done.stdout.splitlines() if done.returncode == 0 else rows


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("large")
    parser.add_argument("n2", type=int)
    parser.add_argument("small")
    parser.add_argument("n1", type=int)
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--match", default=None)
    parser.add_argument("--calls", default=None)
    parser.add_argument("--callers", default=None)
    arguments = parser.parse_args()
    span = arguments.n2 - arguments.n1
    own2, edges2, counts2 = load(arguments.large)
    own1, edges1, counts1 = load(arguments.small)
    if arguments.calls or arguments.callers:
        pattern = re.compile(arguments.calls or arguments.callers)
        rows = []
        for (caller, target), cost in edges2.items():
            if not pattern.search(caller if arguments.calls else target):
                continue
            per = (cost - edges1.get((caller, target), 0)) / span
            calls = (counts2[(caller, target)] - counts1.get((caller, target), 0)) / span
            if abs(per) >= 1:
                rows.append((per, calls, caller, target))
        rows.sort(key=lambda row: -row[0])
        names = demangle([f"{row[2][:120]}  ->  {row[3][:160]}" for row in rows[: arguments.top]])
        for row, label in zip(rows, names):
            print(f"{row[0]:9.0f}  x{row[1]:5.2f}  {label}")
        return
    rows = []
    for function in set(own2) | set(own1):
        if arguments.match and not re.search(arguments.match, function):
            continue
        per = (own2.get(function, 0) - own1.get(function, 0)) / span
        rows.append((per, function))
    rows.sort(key=lambda row: -row[0])
    total = (sum(own2.values()) - sum(own1.values())) / span
    print(f"total {total:.0f} instructions per message")
    names = demangle([row[1][:200] for row in rows[: arguments.top]])
    for (per, _), label in zip(rows, names):
        print(f"{per:8.0f}  {label}")


if __name__ == "__main__":
    main()
