#!/usr/bin/env bash
# Runs EngineCompare's data-path workloads under `perf stat` against servers in other processes and
# writes one JSON object per run to OUT (JSON Lines): messages per second, context switches and CPU
# time (task-clock) per message, or KiB per idle connection. Benchmarks/Scripts/plot.py draws them.
#
#   Benchmarks/Scripts/engine_compare.sh OUT.jsonl [runs] [label=binary ...]
#
# Without label=binary pairs it builds EngineCompare from this tree (release) and labels it "current".
# With pairs (e.g. before=/path/EngineCompare after=.build/release/EngineCompare) it alternates the
# binaries run by run, so both sides see the same machine. Needs perf (linux-perf) and python3.
# WORKLOADS (space-separated) picks a subset; sizes below are the documented ones; IDLE_N sets the
# connections of the WebSocket idle workloads (1,000 by default).
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "$1"); shift
runs=${1:-3}; [ $# -gt 0 ] && shift
declare -a labels binaries
if [ $# -eq 0 ]; then
  swift build -c release --product EngineCompare >/dev/null
  labels=(current); binaries=("$PWD/.build/release/EngineCompare")
else
  for pair in "$@"; do labels+=("${pair%%=*}"); binaries+=("$(realpath "${pair#*=}")"); done
fi
server_bin=${binaries[${#binaries[@]}-1]}
: > "$out"
pids=()
source Scripts/kill_tree.sh
cleanup() { for p in "${pids[@]}"; do kill_tree "$p"; done; }
trap cleanup EXIT

# start NAME COMMAND...: runs a server that prints its port on its first line; sets PORT.
start() {
  local fifo; fifo=$(mktemp -u); mkfifo "$fifo"
  shift; ( exec "$@" <&- ) > "$fifo" 2>/dev/null &
  pids+=($!)
  read -r line < "$fifo"; rm -f "$fifo"
  PORT=$(echo "$line" | grep -oE '[0-9]+$')
}
# `serve` waits for stdin to close: give it a pipe that stays open.
start_serve() {
  local fifo; fifo=$(mktemp -u); mkfifo "$fifo"
  ( sleep 100000 | "$server_bin" serve "$1" > "$fifo" 2>/dev/null ) &
  pids+=($!)
  read -r line < "$fifo"; rm -f "$fifo"
  PORT=$(echo "$line" | grep -oE '[0-9]+$')
}

# The blasters write what real servers write (one message per frame, one write per message or
# event); their FRAMING=packed twins pack many messages into each write (SignalR: into each frame),
# which no real server does: the "-packed" workloads are a ceiling, not a user's figure.
EVENTS=200000 start blaster python3 -u Scripts/sse_blaster.py 0; blaster=$PORT
EVENTS=200000 FRAMING=packed start blaster python3 -u Scripts/sse_blaster.py 0; blasterpacked=$PORT
start hold python3 -u Scripts/sse_hold.py 0; hold=$PORT
# Socket.IO and SignalR servers faster than any client (pre-encoded frames): what the client costs
# per message when it, not the server, is the bottleneck.
start siofast python3 -u Scripts/sio_blaster.py 0; siofast=$PORT
FRAMING=packed start siofast python3 -u Scripts/sio_blaster.py 0; siopacked=$PORT
start sigfast python3 -u Scripts/signalr_blaster.py 0; sigfast=$PORT
FRAMING=packed start sigfast python3 -u Scripts/signalr_blaster.py 0; sigpacked=$PORT
start_serve socketio; sio=$PORT
start_serve signalr; sig=$PORT
start_serve spreadbot; bot=$PORT

declare -A args=(
  [sse]="http://127.0.0.1:$blaster/ 200000"
  [sse-packed]="http://127.0.0.1:$blasterpacked/ 200000"
  [sse-idle]="http://127.0.0.1:$hold/ 2000"
  [socketio-idle]="http://127.0.0.1:$sio ${IDLE_N:-1000}"
  [signalr-idle]="http://127.0.0.1:$sig/hub ${IDLE_N:-1000}"
  [spreadbot-idle]="http://127.0.0.1:$bot ${IDLE_N:-1000}"
  [signalr-stream]="http://127.0.0.1:$sig/hub 100000"
  [signalr-on]="http://127.0.0.1:$sig/hub 100000"
  [socketio-on]="http://127.0.0.1:$sio 200000"
  [socketio-on-fast]="http://127.0.0.1:$siofast 200000"
  [socketio-on-packed]="http://127.0.0.1:$siopacked 200000"
  [signalr-stream-fast]="http://127.0.0.1:$sigfast/hub 100000"
  [signalr-on-fast]="http://127.0.0.1:$sigfast/hub 100000"
  [signalr-stream-packed]="http://127.0.0.1:$sigpacked/hub 100000"
  [signalr-stream-direct-fast]="http://127.0.0.1:$sigfast/hub 100000"
  [socketio-events-fast]="http://127.0.0.1:$siofast 200000"
  [sse-addlistener]="http://127.0.0.1:$blaster/ 200000"
  [signalr-on-packed]="http://127.0.0.1:$sigpacked/hub 100000"
  [socketio-emit]="http://127.0.0.1:$sio 20000 1"
  [signalr-invoke]="http://127.0.0.1:$sig/hub 20000 1"
)
workloads=${WORKLOADS:-"sse sse-packed sse-idle socketio-idle signalr-idle spreadbot-idle signalr-stream signalr-on signalr-stream-fast signalr-stream-direct-fast signalr-on-fast signalr-stream-packed signalr-on-packed socketio-on socketio-on-fast socketio-events-fast socketio-on-packed sse-addlistener socketio-emit signalr-invoke"}
# The EngineCompare command of a workload, where its name says which server it runs against.
declare -A commands=(
  [sse-packed]=sse [socketio-on-fast]=socketio-on [socketio-on-packed]=socketio-on
  [signalr-stream-fast]=signalr-stream [signalr-on-fast]=signalr-on
  [signalr-stream-packed]=signalr-stream [signalr-on-packed]=signalr-on
  [signalr-stream-direct-fast]=signalr-stream-direct [socketio-events-fast]=socketio-events)
# The tree's commit describes a binary built here; a binary given on the command line is named by its path.
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
for workload in $workloads; do
  for run in $(seq 1 "$runs"); do
    for i in "${!binaries[@]}"; do
      stat=$(mktemp)
      # shellcheck disable=SC2086
      line=$(timeout 300 perf stat -x, -e context-switches,task-clock -o "$stat" "${binaries[$i]}" "${commands[$workload]:-$workload}" ${args[$workload]} 2>/dev/null | tail -1 || true)
      built_here=$([ $# -eq 0 ] && echo "$commit" || echo "")
      python3 - "$workload" "${labels[$i]}" "$run" "$built_here" "$line" "$stat" "${binaries[$i]}" >> "$out" <<'PY'
import json, re, sys
workload, label, run, commit, line, stat, binary = sys.argv[1:8]
counters = {}
for row in open(stat):
    parts = row.strip().split(",")
    if len(parts) > 2 and parts[0] and not row.startswith("#"):
        try: counters[parts[2]] = float(parts[0])
        except ValueError: pass
record = {"workload": workload, "label": label, "run": int(run), "commit": commit or None, "binary": binary, "line": line,
          "context_switches": counters.get("context-switches"), "task_clock_ms": counters.get("task-clock")}
m = re.search(r": (\d+) messages, ([\d.]+) s, (\d+) messages/s", line)
if m:
    n = int(m.group(1)); record.update(messages=n, seconds=float(m.group(2)), rate=int(m.group(3)))
    if record["context_switches"] is not None: record["switches_per_message"] = record["context_switches"] / n
    if record["task_clock_ms"] is not None: record["cpu_us_per_message"] = record["task_clock_ms"] * 1000 / n
m = re.search(r"(\d+) idle connections, RSS (\d+) -> (\d+) KiB, ([\d.]+) KiB per connection", line)
if m: record.update(connections=int(m.group(1)), kib_per_connection=float(m.group(4)))
m = re.search(r"opened in ([\d.]+) s, idle CPU ([\d.]+) % of a core", line)
if m: record.update(open_seconds=float(m.group(1)), idle_cpu_percent=float(m.group(2)))
m = re.search(r"broadcast delivered to (\d+) of (\d+) in ([\d.]+) s", line)
if m: record.update(broadcast_delivered=int(m.group(1)), broadcast_expected=int(m.group(2)), broadcast_seconds=float(m.group(3)))
print(json.dumps(record))
PY
      rm -f "$stat"
      echo "$workload ${labels[$i]} run $run: $line" >&2
    done
  done
done
