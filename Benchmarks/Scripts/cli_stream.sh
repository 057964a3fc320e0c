#!/usr/bin/env bash
# The `realtime` CLI reading a SignalR stream from aiosignalr (a server users run, from the tests'
# virtual environment: Scripts/prepare.sh), as a user runs it: `realtime signalr URL --stream countTo
# '[N]'`, its items printed (one write each) to a file. Context switches and CPU per item, start-up
# subtracted: each round runs N items and 1 item, and reports (N run - 1 run) / (N - 1). Beside it, the
# floor (EngineCompare floor: a bare NIO channel reading the same stream and counting frames, over its
# measured window) with its reads per item, and the server's CPU per item over the N run, in the same
# round. One JSON object per round.
#
#   Benchmarks/Scripts/cli_stream.sh REALTIME_BINARY ENGINECOMPARE_BINARY [N] [rounds]
set -euo pipefail
cli=$(realpath "$1"); engine=$(realpath "$2"); n=${3:-20000}; rounds=${4:-3}
cd "$(dirname "$0")/.."
venv_python="$(cd .. && pwd)/.venv/bin/python"
[ -x "$venv_python" ] || { echo "cli_stream.sh: needs $venv_python: run Scripts/prepare.sh" >&2; exit 1; }
log=$(mktemp)
( sleep 100000 | "$venv_python" -u ../Tests/SignalRHubTests/Peers/aiosignalr_server.py ) > "$log" 2>/dev/null &
holder=$!
source Scripts/kill_tree.sh
trap 'kill_tree $holder; rm -f "$log"' EXIT
for _ in $(seq 1 300); do grep -q '^PORT ' "$log" && break; sleep 0.1; done
port=$(grep -m1 '^PORT ' "$log" | grep -oE '[0-9]+$')
server=$(pgrep -P "$holder" -f aiosignalr_server.py | head -1)
url="http://127.0.0.1:$port/hub"
# counters COMMAND...: "switches cpu_ms" of the command (perf stat), its output to a file.
counters() {
  local stat; stat=$(mktemp)
  perf stat -x, -e context-switches,task-clock -o "$stat" "$@" > /tmp/cli_stream.out 2>/dev/null
  awk -F, '$3=="context-switches"{s=$1} $3=="task-clock"{c=$1} END{print s, c}' "$stat"
  rm -f "$stat"
}
ticks() { awk '{print $14 + $15}' "/proc/$server/stat"; }
hz=$(getconf CLK_TCK)
for round in $(seq 1 "$rounds"); do
  read -r s1 c1 < <(counters "$cli" signalr "$url" --stream countTo '[1]')
  before=$(ticks)
  read -r sn cn < <(counters "$cli" signalr "$url" --stream countTo "[$n]")
  server_ms=$(( ($(ticks) - before) * 1000 / hz ))
  items=$(grep -c '^item' /tmp/cli_stream.out || true)
  read -r fs fc < <(counters "$engine" floor signalr "$url" "$n")
  floor_line=$(cat /tmp/cli_stream.out)
  python3 - "$round" "$n" "$items" "$s1" "$c1" "$sn" "$cn" "$server_ms" "$fs" "$fc" "$floor_line" <<'PY'
import json, re, sys
r, n, items, s1, c1, sn, cn, server_ms, fs, fc, floor_line = sys.argv[1:12]
n, items = int(n), int(items)
m = re.search(r"\((\d+) socket reads\)", floor_line)
w = re.search(r"window: (\d+) switches, ([\d.]+) ms CPU", floor_line)
if w: fs, fc = w.group(1), w.group(2)  # the floor's own window: from its request to the last item
print(json.dumps({
    "round": int(r), "items": n, "items_printed": items,
    "cli_switches_per_item": (float(sn) - float(s1)) / (n - 1),
    "cli_cpu_us_per_item": (float(cn) - float(c1)) * 1000 / (n - 1),
    "server_cpu_us_per_item": int(server_ms) * 1000 / n,
    "floor_switches_per_item": float(fs) / n, "floor_cpu_us_per_item": float(fc) * 1000 / n,
    "floor_reads_per_item": int(m.group(1)) / n if m else None,
}))
PY
done
