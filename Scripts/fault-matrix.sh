#!/usr/bin/env bash
# Runs the whole fault matrix (Tests/FaultMatrixTests/FaultMatrixTests.swift): every protocol and
# transport, plain and TLS, direct and through tinyproxy and dante, under every fault, each cell a
# test of its own. CI's run of the suite (Scripts/test.sh) draws two cells per fault with a seed it
# prints; this runs them all (about 340 cells, 30-40 minutes on two cores).
#   Scripts/fault-matrix.sh                 every cell
#   Scripts/fault-matrix.sh SEED [PER]      the cells a seed draws, PER per fault (2 by default)
# Prints one line per cell (what the client reported, how long the reconnect took, what became of
# the messages sent during the fault), then the result table of Docs/Reliability.md ("The fault
# matrix") and the summary line.
set -euo pipefail
cd "$(dirname "$0")/.."
source Scripts/prepare.sh

results=$(mktemp)
out=$(mktemp)
trap 'rm -f "$results" "$out"' EXIT
if [ $# -ge 1 ]; then
  export REALTIME_FAULT_SEED="$1" REALTIME_FAULT_CELLS="${2:-2}"
else
  export REALTIME_FAULT_MATRIX=all
fi
export REALTIME_FAULT_RESULTS="$results"

swift build --build-tests >/dev/null
set +e
swift test --skip-build --filter 'FaultMatrixTests\.FaultMatrixTests/cell' 2>&1 | tee "$out" | grep -E "^fault (cell|matrix):|✘ Test cell|Expectation failed"
status=${PIPESTATUS[0]}
set -e

# The table: one row per protocol and transport, one column per fault; a cell is the number of
# its variants (plain/TLS x direct/HTTP proxy/SOCKS5) that passed, of those run.
python3 - "$results" "$out" <<'PY'
import re, sys, collections
results, out = sys.argv[1], sys.argv[2]
failed = set()
for line in open(out, errors="replace"):
    m = re.search(r"✘ Test cell\(_:\) recorded an issue with 1 argument cell → (.+?) at ", line)
    if m: failed.add(m.group(1))
faults = ["RST", "FIN", "relay killed", "silent stall", "proxy restart", "server restart", "server's payload limit", "long poll silent past the keep-alive"]
subjects = ["Socket.IO websocket", "Socket.IO polling", "Socket.IO polling then upgrade", "SignalR websocket", "SignalR SSE",
            "SignalR long polling", "SSE", "Spreadbot websocket", "Spreadbot SSE"]
ran = collections.Counter(); passed = collections.Counter()
for line in open(results, errors="replace"):
    name = line.split(" | ")[0]
    m = re.match(r"(.+?), (plain|tls), (direct|HTTP proxy|SOCKS5): (.+)$", name)
    if not m: continue
    key = (m.group(1), m.group(4))
    ran[key] += 1
    if name not in failed: passed[key] += 1
print()
print("| protocol, transport | " + " | ".join(faults) + " |")
print("|---" * (len(faults) + 1) + "|")
for subject in subjects:
    cells = []
    for fault in faults:
        n = ran[(subject, fault)]
        cells.append(f"{passed[(subject, fault)]}/{n}" if n else "n/a")
    print(f"| {subject} | " + " | ".join(cells) + " |")
total = sum(ran.values()); ok = sum(passed.values())
print(f"\n{ok} of {total} cells passed")
PY
passed=$(grep -cE "^✔ Test cell\(_:\)|passed after" "$results" 2>/dev/null || true)
cells=$(wc -l < "$results")
failed_cells=$(grep -c "✘ Test cell(_:) recorded an issue" "$out" || true)
echo "$((cells - failed_cells)) passed, ${failed_cells} failed"
exit "$status"
