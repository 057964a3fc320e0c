#!/usr/bin/env python3
"""Keeps each guide's migration table equal to the parity list it is made from.

Tests/CompatParity/<library>.tsv lists every public API of a library our compat products replace,
with what our compat module does with it (`ours`); CompatParityTests holds that column to what the
compiler says. A guide holds the table between two markers:

    <!-- parity-table: socket.io-client-swift -->
    ... generated ...
    <!-- end parity-table -->

  Scripts/parity-tables.py generate   rewrite every table from its list
  Scripts/parity-tables.py check      fail when a table differs from its list (Scripts/test.sh runs it)
"""
import glob, os, re, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LISTS = os.path.join(ROOT, "Tests", "CompatParity")
BLOCK = re.compile(r"(<!-- parity-table: ([^ ]+) -->\n)(.*?)(<!-- end parity-table -->)", re.S)
MODULES = {"socket.io-client-swift": "SocketIO", "SwiftSignalRClient": "SignalRClient",
           "signalr-client-swift": "SignalRClient", "IKEventSource": "IKEventSource"}


def cell(text):
    return text.replace("|", "\\|").strip()


def table(library):
    rows = []
    with open(os.path.join(LISTS, library + ".tsv"), encoding="utf-8") as handle:
        for line in handle:
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            cells = line.split("\t") + [""] * 7
            kind, owner, name, ours = cells[0].strip(), cells[1].strip(), cells[2].strip(), cells[5].strip()
            if owner.endswith("seed"):
                owner = "usage guide"  # a guide users follow (the lists name which one)
            qualified = name if owner in ("", "-") else f"{owner}.{name}"
            verdict, _, how = ours.partition(":")
            verdict = verdict.strip()
            text = verdict.capitalize() + (": " + how.strip() if how.strip() else "")
            rows.append(f"| `{cell(qualified)}` | {cell(kind)} | {cell(text)} |")
    counts = {v: sum(1 for r in rows if f"| {v}" in r) for v in ("Same", "Different", "Not carried")}
    head = (f"{len(rows)} public APIs of {library}: {counts['Same']} the same, {counts['Different']} different "
            f"(how, below), {counts['Not carried']} not carried (what to use instead, below).\n\n"
            f"| {library} | Kind | In `{MODULES[library]}` |\n|---|---|---|\n")
    return head + "\n".join(rows) + "\n"


def guides():
    return sorted(glob.glob(os.path.join(ROOT, "Sources", "*", "*.docc", "**", "*.md"), recursive=True))


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "check"
    stale, found, libraries = [], 0, set()
    for path in guides():
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        if "<!-- parity-table:" not in text:
            continue
        def replace(match):
            return match.group(1) + table(match.group(2)) + match.group(4)
        new = BLOCK.sub(replace, text)
        found += len(BLOCK.findall(text))
        libraries.update(m.group(2) for m in BLOCK.finditer(text))
        if new != text:
            if mode == "generate":
                with open(path, "w", encoding="utf-8") as handle:
                    handle.write(new)
            stale.append(os.path.relpath(path, ROOT))
    if mode == "generate":
        print(f"parity-tables.py: {found} tables, {len(stale)} files rewritten")
        return 0
    if libraries != set(MODULES):
        print(f"parity-tables.py: no guide holds the table of {sorted(set(MODULES) - libraries)}")
        return 1
    if stale:
        print("parity-tables.py: these guides' migration tables differ from Tests/CompatParity; run Scripts/parity-tables.py generate:")
        print("\n".join(stale))
        return 1
    print(f"parity-tables.py: {found} tables match their parity lists")
    return 0


sys.exit(main())
