#!/usr/bin/env python3
"""The context size of every async function in a binary, largest first.

An async function's frame (its "context") is allocated on its task's stack when it is called and
lives until it returns; for the functions on an open connection's path that is the connection's
whole life. The size is recorded in the function's async function pointer (a symbol ending in "Tu":
a 32-bit relative offset, then the 32-bit context size), which this reads from the ELF file.

  Benchmarks/Scripts/async_frames.py BINARY [REGEX] [COUNT]
  e.g. async_frames.py .build/release/EngineCompare 'EngineIOSession|WebSocketTransport' 20
Needs nm, readelf and swift (for demangling).
"""
import re
import struct
import subprocess
import sys

if len(sys.argv) < 2:
    sys.exit(__doc__)
binary = sys.argv[1]
pattern = sys.argv[2] if len(sys.argv) > 2 else ""
count = int(sys.argv[3]) if len(sys.argv) > 3 else 40

symbols = []
for line in subprocess.run(["nm", "--defined-only", binary], capture_output=True, text=True, check=True).stdout.splitlines():
    parts = line.split()
    if len(parts) == 3 and parts[2].endswith("Tu"):
        symbols.append((int(parts[0], 16), parts[2]))

sections = []
for line in subprocess.run(["readelf", "-SW", binary], capture_output=True, text=True, check=True).stdout.splitlines():
    m = re.match(r"\s*\[\s*\d+\]\s+(\S+)\s+\S+\s+([0-9a-f]+)\s+([0-9a-f]+)\s+([0-9a-f]+)", line)
    if m:
        sections.append((int(m.group(2), 16), int(m.group(3), 16), int(m.group(4), 16)))

data = open(binary, "rb").read()


def context_size(address):
    for start, offset, size in sections:
        if start and start <= address < start + size:
            at = offset + address - start
            return struct.unpack("<iI", data[at:at + 8])[1]
    return None


rows = [(context_size(address), name) for address, name in symbols]
rows = [(size, name) for size, name in rows if size is not None]
names = subprocess.run(
    ["swift", "demangle", "--simplified", "--compact"], input="\n".join(name for _, name in rows),
    capture_output=True, text=True, check=True).stdout.splitlines()
found = sorted(((size, name) for (size, _), name in zip(rows, names) if re.search(pattern, name)), reverse=True)
for size, name in found[:count]:
    print(f"{size:6d}  {name.removeprefix('async function pointer to ')[:150]}")
