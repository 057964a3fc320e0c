#!/usr/bin/env bash
# The soak run: every protocol at once for [minutes] (default 1), each client streaming both ways
# through FaultProxy with a seeded random schedule of faults (cuts with FIN and RST, cuts after some
# bytes, stalls, latency, refused reconnects) in front of the RealtimeTesting servers; then every
# delivery promise is checked; resident memory and open descriptors (sampled every 10 s) are
# reported (the servers share the process and keep their histories, so it is an upper bound).
# With "real", the SSE and SignalR clients talk to sse-starlette and aiosignalr (the pinned interop
# peers, each in a process of its own, from Scripts/prepare.sh's .venv) instead: the soak's process
# then holds only clients, and memory is judged (under 5 % growth after the first 20 % of the run).
#   Scripts/soak.sh [minutes] [seed] [ours|real]
# Bounded: the faults run [minutes], the catching up afterwards at most a minute per protocol.
# Exit status 1 when a promise did not hold. Docs/Reliability.md has the figures of the last long run.
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:-1}
seed=${2:-1}
peers=${3:-ours}
seconds=$(python3 -c "print(max(1, int(float('$minutes') * 60)))")
if [ "$peers" = real ]; then
  source Scripts/prepare.sh
  protocols=sse,signalr
else
  protocols=sse,socketio,signalr,spreadbot
fi
swift build --product realtime >/dev/null
bin=$(swift build --show-bin-path)/realtime
echo "[soak.sh] $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(date -u +%Y-%m-%dT%H:%MZ), ${seconds} s, seed ${seed}, ${peers} servers"
exec timeout --signal=KILL $((seconds + 600)) "$bin" soak --seconds "$seconds" --seed "$seed" --peers "$peers" --protocols "$protocols"
