#!/usr/bin/env bash
# Load: N concurrent connections per protocol (10,000 by default) from one process against servers
# in another process on loopback. For each protocol it prints how long opening all of them took,
# resident memory per connection, the CPU the client process spends while all are idle (over 40 s:
# two of SignalR's 15 s keep-alive periods and one of Socket.IO's 25 s; Spreadbot over 70 s, since
# a silent connection pings after two 30 s intervals), and how long a broadcast takes to reach every
# connection.
#   Benchmarks/Scripts/load.sh [N] [EngineCompare binary]
# Not part of CI. Bounded: each protocol's run is killed after 5 minutes. Raises the descriptor
# limit to what the hard limit allows (each connection needs one in each process).
set -euo pipefail
cd "$(dirname "$0")/.."
count=${1:-10000}
bin=${2:-}
if [ -z "$bin" ]; then
  swift build -c release --product EngineCompare >/dev/null
  bin=$PWD/.build/release/EngineCompare
fi
ulimit -n "$(ulimit -Hn)"
export IDLE_SECONDS=${IDLE_SECONDS:-40}
echo "[load.sh] $count connections per protocol, descriptor limit $(ulimit -n), idle CPU over ${IDLE_SECONDS} s, $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
pids=()
source Scripts/kill_tree.sh
cleanup() { for p in "${pids[@]}"; do kill_tree "$p"; done; }
trap cleanup EXIT
# server NAME COMMAND...: starts a server that prints its port first; sets PORT.
server() {
  local fifo; fifo=$(mktemp -u); mkfifo "$fifo"
  shift; ( sleep 100000 | "$@" > "$fifo" 2>/dev/null ) &
  pids+=($!)
  read -r line < "$fifo"; rm -f "$fifo"
  PORT=$(echo "$line" | grep -oE '[0-9]+$')
}
server sse python3 -u Scripts/sse_hold.py 0
timeout --signal=KILL 300 "$bin" sse-idle "http://127.0.0.1:$PORT/" "$count" || echo "sse: failed ($?)"
server socketio "$bin" serve socketio
timeout --signal=KILL 300 "$bin" socketio-idle "http://127.0.0.1:$PORT" "$count" || echo "socketio: failed ($?)"
server signalr "$bin" serve signalr
timeout --signal=KILL 300 "$bin" signalr-idle "http://127.0.0.1:$PORT/hub" "$count" || echo "signalr: failed ($?)"
server spreadbot "$bin" serve spreadbot
IDLE_SECONDS=${SPREADBOT_IDLE_SECONDS:-70} timeout --signal=KILL 300 "$bin" spreadbot-idle "http://127.0.0.1:$PORT" "$count" || echo "spreadbot: failed ($?)"
