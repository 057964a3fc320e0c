#!/usr/bin/env bash
# Puts the official Socket.IO JavaScript client (socket.io-client 4.8.1's browser bundle,
# socket.io.min.js) in Benchmarks/.js/, for sio_js_client.sh. npm's registry is not reachable
# everywhere we benchmark, PyPI is: the file is taken from a pinned Python package that ships it
# unchanged (nicegui 3.18.0, nicegui/static/socket.io.min.js), and checked by its banner.
#   Benchmarks/Scripts/fetch_sio_js.sh
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .js
[ -f .js/socket.io.min.js ] && head -c 200 .js/socket.io.min.js | grep -q "Socket.IO v4.8.1" && { echo "fetch_sio_js: .js/socket.io.min.js is there"; exit 0; }
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
python3 -m pip download --quiet --disable-pip-version-check --no-deps --dest "$work" nicegui==3.18.0
python3 - "$work"/nicegui-3.18.0-*.whl .js/socket.io.min.js <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    data = wheel.read("nicegui/static/socket.io.min.js")
if b"Socket.IO v4.8.1" not in data[:200]:
    sys.exit("fetch_sio_js: the bundle is not socket.io-client 4.8.1")
open(sys.argv[2], "wb").write(data)
PY
echo "fetch_sio_js: .js/socket.io.min.js (socket.io-client 4.8.1)"
