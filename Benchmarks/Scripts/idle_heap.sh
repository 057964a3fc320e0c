#!/usr/bin/env bash
# What an idle connection holds on the heap, by kind: N connections of one protocol (2,000 by
# default) from EngineCompare under heaptrack, against a server in another process; the client is
# stopped once every connection is open and idle, and what it still held is summed per allocator:
#   - async task stacks (swift::StackAllocator slabs: the frames of every suspended task, kept at
#     each task's high-water mark until the task ends),
#   - objects (swift_slowAlloc: classes, closures, arrays, dictionaries, strings),
#   - NIO ByteBuffers,
# each divided by N, with the tasks created per connection. The largest task-stack consumers follow
# (the caller that allocated the frame of its callee).
#   Benchmarks/Scripts/idle_heap.sh socketio|signalr|spreadbot|sse [N] [EngineCompare binary]
# With BURST_KIB=n, every connection first receives four n-KiB messages: what a connection
# keeps once a burst is over.
# With KEEP=dir, heaptrack's leak and allocator listings are copied there (leaks-<protocol>.txt,
# allocators-<protocol>.txt) for a closer look.
# Needs heaptrack (Debian: apt-get install heaptrack). Not part of CI; bounded (5 minutes per run).
set -euo pipefail
cd "$(dirname "$0")/.."
proto=${1:?socketio|signalr|spreadbot|sse}
count=${2:-2000}
bin=${3:-}
command -v heaptrack >/dev/null || { echo "idle_heap.sh needs heaptrack: apt-get install heaptrack" >&2; exit 1; }
if [ -z "$bin" ]; then
  swift build -c release --product EngineCompare >/dev/null
  bin=$PWD/.build/release/EngineCompare
fi
ulimit -n "$(ulimit -Hn)"
work=$(mktemp -d)
pids=()
source Scripts/kill_tree.sh
cleanup() { for p in "${pids[@]}"; do kill_tree "$p"; done; rm -rf "$work"; }
trap cleanup EXIT
fifo=$work/port; mkfifo "$fifo"
case $proto in
  sse) ( sleep 100000 | python3 -u Scripts/sse_hold.py 0 > "$fifo" 2>/dev/null ) & ;;
  *) ( sleep 100000 | "$bin" serve "$proto" > "$fifo" 2>/dev/null ) & ;;
esac
pids+=($!)
read -r line < "$fifo"
port=$(echo "$line" | grep -oE '[0-9]+$')
case $proto in
  sse) url="http://127.0.0.1:$port/" ;;
  signalr) url="http://127.0.0.1:$port/hub" ;;
  *) url="http://127.0.0.1:$port" ;;
esac
IDLE_SECONDS=300 timeout --signal=KILL 300 heaptrack -o "$work/heap" "$bin" "$proto-idle" "$url" "$count" > "$work/out" 2> "$work/err" &
pids+=($!)
for _ in $(seq 1 240); do grep -q "^IDLE" "$work/err" 2>/dev/null && break; sleep 0.5; done
grep -q "^IDLE" "$work/err" || { echo "the client never reported its connections idle:"; cat "$work/err" "$work/out"; exit 1; }
sleep 2
client=$(pgrep -f -n -- "$bin $proto-idle")
kill -TERM "$client"
for _ in $(seq 1 120); do [ -s "$work/heap.zst" ] && ! kill -0 "$client" 2>/dev/null && break; sleep 0.5; done
sleep 2
heaptrack_print -f "$work/heap.zst" --print-peaks 0 --print-allocators 0 --print-temporary 0 --print-leaks 1 \
  --peak-limit 100 --sub-peak-limit 30 2>/dev/null > "$work/leaks.txt"
heaptrack_print -f "$work/heap.zst" --print-peaks 0 --print-allocators 1 --print-temporary 0 --print-leaks 0 \
  --peak-limit 100 --sub-peak-limit 0 2>/dev/null > "$work/allocators.txt"
if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP"; cp "$work/leaks.txt" "$KEEP/leaks-$proto.txt"; cp "$work/allocators.txt" "$KEEP/allocators-$proto.txt"; fi
echo "[idle_heap.sh] $proto, $count idle connections${BURST_KIB:+ after four ${BURST_KIB} KiB messages each}, $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
python3 - "$work/leaks.txt" "$work/allocators.txt" "$count" <<'PY'
import re, sys
leaks, allocators, n = open(sys.argv[1]).read().splitlines(), open(sys.argv[2]).read().splitlines(), int(sys.argv[3])
units = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}
def size(text):
    m = re.match(r"([0-9.]+)([KMG]?)", text)
    return float(m.group(1)) * units[m.group(2)]
tops, subs, current = {}, [], None
for i, line in enumerate(leaks):
    m = re.match(r"^([0-9.]+[KMG]?) leaked over (\d+) calls from$", line)
    if m:
        current = leaks[i + 1].strip()
        tops[current] = tops.get(current, 0) + size(m.group(1))
        continue
    m = re.match(r"^([0-9.]+[KMG]?) leaked over (\d+) calls from:$", line)
    if m and current and "StackAllocator" in current:
        subs.append((size(m.group(1)), int(m.group(2)), leaks[i + 1].strip().split(" at ")[0]))
def per(pattern):
    return sum(v for k, v in tops.items() if pattern in k) / n / 1024
stacks, objects, buffers = per("StackAllocator"), per("swift_slowAlloc"), per("ByteBuffer")
total = sum(tops.values()) / n / 1024
print(f"held per connection: {total:.1f} KiB: task stacks {stacks:.1f} KiB, objects {objects:.1f} KiB, ByteBuffers {buffers:.1f} KiB, other {total - stacks - objects - buffers:.1f} KiB")
tasks = 0
for i, line in enumerate(allocators):
    m = re.match(r"^(\d+) calls to allocation functions with .* from$", line)
    if m and "swift_task_create_common" in allocators[i + 1]:
        tasks += int(m.group(1))
print(f"tasks created per connection (open and idle): {tasks / n:.1f}")
print("largest task-stack allocations (caller: KiB per connection):")
for value, calls, caller in sorted(subs, reverse=True)[:12]:
    name = caller
    try:
        import subprocess
        name = subprocess.run(["swift", "demangle", "--simplified", "--compact", caller], capture_output=True, text=True).stdout.strip() or caller
    except Exception:
        pass
    print(f"  {value / n / 1024:5.2f}  {name[:150]}")
PY
