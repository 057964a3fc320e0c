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
# connections of the WebSocket idle workloads (1,000 by default). The "-python" workloads (asked for by
# name in WORKLOADS) run against python-socketio and aiosignalr from the tests' virtual environment
# (Scripts/prepare.sh). Each run against a server in its own process also records that server's CPU.
# The "-paced" workloads run against the blasters in paced mode (RATE=$PACE_RATE writes a second, 10,000
# by default, one message each: each read of the client holds about one message) with $PACED_N messages
# (20,000 by default). The "floor-" workloads read the same streams with a bare NIO channel that only
# counts frames (EngineCompare floor); floor-signalr-paced-handoff also hands each read's count to a
# task on the default executor. The socketio-emit workloads (acks: sequential, and "-pipelined" 100 at
# a time; "-loop": ours with the connection and the emitting tasks on one event loop) also run the official JavaScript client when given as a pair (js=Scripts/sio_js_client.sh,
# before our binary, which must come last: it serves the Swift servers), against the server
# ACKS_SERVER names (`socketio` by default, or `socketio-echo`). EXECUTORS (space-separated, default "default") runs each binary
# once per executor choice in each run (EngineCompare's $EXECUTOR: default, loop, nio, main), labelled
# label/executor. Every record also has the measured window's figures (start-up left out):
# window_switches_per_message, window_cpu_us_per_message, window_reads_per_message.
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

# start NAME COMMAND...: runs a server that prints its port on its first line; sets PORT, and
# PEERPID (the server's process, whose CPU time each run records).
start() {
  local fifo; fifo=$(mktemp -u); mkfifo "$fifo"
  shift; ( exec "$@" <&- ) > "$fifo" 2>/dev/null &
  pids+=($!); PEERPID=$!
  read -r line < "$fifo"; rm -f "$fifo"
  PORT=$(echo "$line" | grep -oE '[0-9]+$')
}
# start_held NAME COMMAND...: `start` for the tests' peers, which exit when their stdin closes (it is
# a pipe that stays open here) and print more lines later (they go to a file, not a closed pipe).
# PEERPID is the server's own process.
start_held() {
  local log sub; log=$(mktemp)
  shift; ( sleep 100000 | "$@" ) > "$log" 2>/dev/null &
  sub=$!; pids+=($sub)
  for _ in $(seq 1 300); do grep -q '^PORT ' "$log" && break; sleep 0.1; done
  PORT=$(grep -m1 '^PORT ' "$log" | grep -oE '[0-9]+$')
  PEERPID=$(pgrep -P "$sub" -f "$1" | head -1)
}
# cpu_ticks PID: the process's user + system time so far, in clock ticks (0 if there is none).
cpu_ticks() { [ -n "${1:-}" ] && [ -r "/proc/$1/stat" ] && awk '{print $14 + $15}' "/proc/$1/stat" || echo 0; }
ticks_per_second=$(getconf CLK_TCK)
declare -A peer=()
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
start siofast python3 -u Scripts/sio_blaster.py 0; siofast=$PORT; peer[socketio-on-fast]=$PEERPID; peer[socketio-events-fast]=$PEERPID
FRAMING=packed start siofast python3 -u Scripts/sio_blaster.py 0; siopacked=$PORT
pace=${PACE_RATE:-10000}; paced_n=${PACED_N:-20000}
RATE=$pace start siopaced python3 -u Scripts/sio_blaster.py 0; siopaced=$PORT
for w in socketio-on-paced socketio-events-paced floor-socketio-paced; do peer[$w]=$PEERPID; done
RATE=$pace start sigpaced python3 -u Scripts/signalr_blaster.py 0; sigpaced=$PORT
for w in signalr-stream-paced signalr-stream-direct-paced signalr-on-paced signalr-on-async-paced floor-signalr-paced floor-signalr-on-paced floor-signalr-paced-handoff; do peer[$w]=$PEERPID; done
EVENTS=$paced_n RATE=$pace start ssepaced python3 -u Scripts/sse_blaster.py 0; ssepaced=$PORT
for w in sse-paced sse-addlistener-paced floor-sse-paced; do peer[$w]=$PEERPID; done
start sigfast python3 -u Scripts/signalr_blaster.py 0; sigfast=$PORT
peer[signalr-stream-fast]=$PEERPID; peer[signalr-on-fast]=$PEERPID; peer[signalr-stream-direct-fast]=$PEERPID
FRAMING=packed start sigfast python3 -u Scripts/signalr_blaster.py 0; sigpacked=$PORT
# Servers users run, from PyPI (the tests' virtual environment, made by Scripts/prepare.sh): the
# tests' python-socketio 5 server (`count` emits one `tick` per call) and aiosignalr hub (`countTo`
# yields one item per step). Started only when a "-python" workload is asked for; the server's own
# CPU per message is recorded beside the client's, since these servers are the bound.
venv_python="$(cd .. && pwd)/.venv/bin/python"  # not resolved: the link is what makes it the venv
if [[ " ${WORKLOADS:-} " == *"-python "* ]]; then
  [ -x "$venv_python" ] || { echo "engine_compare.sh: the -python workloads need $venv_python: run Scripts/prepare.sh" >&2; exit 1; }
  start_held siopy "$venv_python" -u ../Tests/SocketIOEngineTests/Peers/sio_server.py 0; siopy=$PORT
  peer[socketio-on-python]=$PEERPID; peer[socketio-events-python]=$PEERPID
  peer[socketio-emit-python]=$PEERPID; peer[socketio-emit-pipelined-python]=$PEERPID
  start_held sigpy "$venv_python" -u ../Tests/SignalRHubTests/Peers/aiosignalr_server.py; sigpy=$PORT
  peer[signalr-stream-python]=$PEERPID; peer[signalr-stream-direct-python]=$PEERPID
fi
start_serve socketio; sio=$PORT
# The acks workloads' server: `socketio` (RealtimeTesting's, a flush per packet) by default;
# ACKS_SERVER=socketio-echo for the bare swift-nio one that is not the bound.
if [ "${ACKS_SERVER:-socketio}" = socketio ]; then acks=$sio; else start_serve "$ACKS_SERVER"; acks=$PORT; fi
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
  [signalr-on-async-packed]="http://127.0.0.1:$sigpacked/hub 100000"
  [socketio-emit]="http://127.0.0.1:$acks 20000 1"
  [socketio-emit-pipelined]="http://127.0.0.1:$acks 50000 100"
  [socketio-emit-loop]="http://127.0.0.1:$acks 20000 1"
  [socketio-emit-loop-pipelined]="http://127.0.0.1:$acks 50000 100"
  [socketio-emit-python]="http://127.0.0.1:${siopy:-0} 3000 1"
  [socketio-emit-pipelined-python]="http://127.0.0.1:${siopy:-0} 10000 100"
  [signalr-invoke]="http://127.0.0.1:$sig/hub 20000 1"
  [socketio-on-python]="http://127.0.0.1:${siopy:-0} 50000"
  [socketio-events-python]="http://127.0.0.1:${siopy:-0} 50000"
  [signalr-stream-python]="http://127.0.0.1:${sigpy:-0}/hub 50000"
  [signalr-stream-direct-python]="http://127.0.0.1:${sigpy:-0}/hub 50000"
  [socketio-on-paced]="http://127.0.0.1:$siopaced $paced_n"
  [socketio-events-paced]="http://127.0.0.1:$siopaced $paced_n"
  [signalr-stream-paced]="http://127.0.0.1:$sigpaced/hub $paced_n"
  [signalr-stream-direct-paced]="http://127.0.0.1:$sigpaced/hub $paced_n"
  [signalr-on-paced]="http://127.0.0.1:$sigpaced/hub $paced_n"
  [signalr-on-async-paced]="http://127.0.0.1:$sigpaced/hub $paced_n"
  [sse-paced]="http://127.0.0.1:$ssepaced/ $paced_n"
  [sse-addlistener-paced]="http://127.0.0.1:$ssepaced/ $paced_n"
  [floor-socketio-paced]="socketio http://127.0.0.1:$siopaced $paced_n"
  [floor-signalr-paced]="signalr http://127.0.0.1:$sigpaced/hub $paced_n"
  [floor-signalr-on-paced]="signalr-on http://127.0.0.1:$sigpaced/hub $paced_n"
  [floor-sse-paced]="sse http://127.0.0.1:$ssepaced/ $paced_n"
  [floor-signalr-paced-handoff]="signalr http://127.0.0.1:$sigpaced/hub $paced_n task"
  [floor-socketio-fast]="socketio http://127.0.0.1:$siofast 200000"
  [floor-signalr-fast]="signalr http://127.0.0.1:$sigfast/hub 100000"
  [floor-signalr-on-fast]="signalr-on http://127.0.0.1:$sigfast/hub 100000"
  [floor-sse]="sse http://127.0.0.1:$blaster/ 200000"
  [floor-socketio-packed]="socketio http://127.0.0.1:$siopacked 200000"
  [floor-signalr-packed]="signalr http://127.0.0.1:$sigpacked/hub 100000"
  [floor-signalr-on-packed]="signalr-on http://127.0.0.1:$sigpacked/hub 100000"
  [floor-sse-packed]="sse http://127.0.0.1:$blasterpacked/ 200000"
  [floor-socketio-python]="socketio http://127.0.0.1:${siopy:-0} 50000"
  [floor-signalr-python]="signalr http://127.0.0.1:${sigpy:-0}/hub 50000"
)
workloads=${WORKLOADS:-"sse sse-packed sse-idle socketio-idle signalr-idle spreadbot-idle signalr-stream signalr-on signalr-stream-fast signalr-stream-direct-fast signalr-on-fast signalr-stream-packed signalr-on-packed socketio-on socketio-on-fast socketio-events-fast socketio-on-packed sse-addlistener socketio-emit signalr-invoke"}
# The EngineCompare command of a workload, where its name says which server it runs against.
declare -A commands=(
  [sse-packed]=sse [socketio-on-fast]=socketio-on [socketio-on-packed]=socketio-on
  [signalr-stream-fast]=signalr-stream [signalr-on-fast]=signalr-on
  [signalr-stream-packed]=signalr-stream [signalr-on-packed]=signalr-on
  [signalr-stream-direct-fast]=signalr-stream-direct [socketio-events-fast]=socketio-events
  [socketio-on-python]=socketio-on [socketio-events-python]=socketio-events
  [signalr-stream-python]=signalr-stream [signalr-stream-direct-python]=signalr-stream-direct
  [socketio-on-paced]=socketio-on [socketio-events-paced]=socketio-events [signalr-stream-paced]=signalr-stream
  [signalr-stream-direct-paced]=signalr-stream-direct [signalr-on-paced]=signalr-on [sse-paced]=sse
  [sse-addlistener-paced]=sse-addlistener [signalr-on-async-packed]=signalr-on-async [signalr-on-async-paced]=signalr-on-async
  [socketio-emit-pipelined]=socketio-emit [socketio-emit-python]=socketio-emit [socketio-emit-pipelined-python]=socketio-emit
  [socketio-emit-loop-pipelined]=socketio-emit-loop)
for w in "${!args[@]}"; do [[ $w == floor-* ]] && commands[$w]=floor; done
[ -n "${peer[socketio-on-python]:-}" ] && peer[floor-socketio-python]=${peer[socketio-on-python]}
[ -n "${peer[signalr-stream-python]:-}" ] && peer[floor-signalr-python]=${peer[signalr-stream-python]}
for w in floor-socketio-fast; do peer[$w]=${peer[socketio-on-fast]}; done
for w in floor-signalr-fast floor-signalr-on-fast; do peer[$w]=${peer[signalr-stream-fast]}; done
executors=${EXECUTORS:-default}
# The tree's commit describes a binary built here; a binary given on the command line is named by its path.
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
for workload in $workloads; do
  for run in $(seq 1 "$runs"); do
    for i in "${!binaries[@]}"; do
    for executor in $executors; do
      label=${labels[$i]}; [ "$executors" != default ] && label="$label/$executor"
      stat=$(mktemp)
      peer_before=$(cpu_ticks "${peer[$workload]:-}")
      # shellcheck disable=SC2086
      line=$(EXECUTOR=$executor timeout 300 perf stat -x, -e context-switches,task-clock -o "$stat" "${binaries[$i]}" "${commands[$workload]:-$workload}" ${args[$workload]} 2>/dev/null | tail -1 || true)
      peer_ticks=$(( $(cpu_ticks "${peer[$workload]:-}") - peer_before ))
      peer_ms=$([ -n "${peer[$workload]:-}" ] && echo $(( peer_ticks * 1000 / ticks_per_second )) || echo "")
      built_here=$([ $# -eq 0 ] && echo "$commit" || echo "")
      python3 - "$workload" "$label" "$run" "$built_here" "$line" "$stat" "${binaries[$i]}" "$peer_ms" >> "$out" <<'PY'
import json, re, sys
workload, label, run, commit, line, stat, binary, peer_ms = sys.argv[1:9]
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
    # The server's CPU over the run (whole clock ticks, 10 ms each): the peer's cost per message.
    if peer_ms: record.update(peer_cpu_ms=int(peer_ms), peer_cpu_us_per_message=int(peer_ms) * 1000 / n)
    # The measured window alone (from the request to the last message; start-up left out).
    w = re.search(r"window: (\d+) switches, ([\d.]+) ms CPU, (\d+) reads", line)
    if w and n:
        record.update(window_switches_per_message=int(w.group(1)) / n, window_cpu_us_per_message=float(w.group(2)) * 1000 / n,
                      window_reads_per_message=int(w.group(3)) / n)
m = re.search(r"(\d+) idle connections, RSS (\d+) -> (\d+) KiB, ([\d.]+) KiB per connection", line)
if m: record.update(connections=int(m.group(1)), kib_per_connection=float(m.group(4)))
m = re.search(r"opened in ([\d.]+) s, idle CPU ([\d.]+) % of a core", line)
if m: record.update(open_seconds=float(m.group(1)), idle_cpu_percent=float(m.group(2)))
m = re.search(r"broadcast delivered to (\d+) of (\d+) in ([\d.]+) s", line)
if m: record.update(broadcast_delivered=int(m.group(1)), broadcast_expected=int(m.group(2)), broadcast_seconds=float(m.group(3)))
print(json.dumps(record))
PY
      rm -f "$stat"
      echo "$workload $label run $run: $line" >&2
    done
    done
  done
done
