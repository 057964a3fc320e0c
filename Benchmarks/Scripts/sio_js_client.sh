#!/usr/bin/env bash
# The official Socket.IO JavaScript client with EngineCompare's command line, so engine_compare.sh
# runs it beside ours in the same run (a label=Scripts/sio_js_client.sh pair; it knows the acks
# workloads only, `socketio-emit` and `socketio-emit-loop`, the same for it: Node runs one loop):
#   Benchmarks/Scripts/sio_js_client.sh socketio-emit URL N [inflight]
# Needs Node.js 20 or later (its built-in WebSocket; Node 20 behind --experimental-websocket) and the
# client's bundle, which fetch_sio_js.sh puts in Benchmarks/.js/.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bundle=${SIO_JS_BUNDLE:-$here/../.js/socket.io.min.js}
[ -f "$bundle" ] || { echo "sio_js_client.sh: no $bundle: run Benchmarks/Scripts/fetch_sio_js.sh" >&2; exit 1; }
command -v node >/dev/null || { echo "sio_js_client.sh: needs Node.js 20 or later (Debian: apt-get install nodejs)" >&2; exit 1; }
flag=()
node -e 'process.exit(typeof WebSocket === "function" ? 0 : 1)' 2>/dev/null || flag=(--experimental-websocket)
exec node "${flag[@]}" "$here/sio_js_client.js" "$bundle" "$@"
