#!/usr/bin/env bash
# Builds the DocC documentation of every library product and fails on any documentation warning
# (a link to a symbol that does not exist, an undocumented parameter in a documented function).
#   Scripts/docc.sh            check (Scripts/test.sh runs it)
#   Scripts/docc.sh --output DIR   also keep the archives in DIR
# The archives are written to .build/plugins/Swift-DocC/outputs/<Target>.doccarchive.
set -euo pipefail
cd "$(dirname "$0")/.."
targets=(RealtimeCore EventSourceClient IKEventSource SocketIOEngine SocketIO SignalRHub SignalRClient SpreadbotClient RealtimeTesting)
args=()
for t in "${targets[@]}"; do args+=(--target "$t"); done
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! swift package --disable-sandbox generate-documentation "${args[@]}" >"$log" 2>&1; then
  tail -30 "$log"
  echo "docc.sh: generate-documentation failed"
  exit 1
fi
# DocC's warnings start their line ("warning: 'X' doesn't exist at ..."); compiler warnings name a
# file first, and SwiftPM's notes about dependencies' files are not ours.
warnings=$(grep -A3 "^warning:" "$log" | grep -v "which are unhandled\|/.build/checkouts/" || true)
if [ -n "$(printf '%s' "$warnings" | grep "^warning:" || true)" ]; then
  printf '%s\n' "$warnings"
  echo "docc.sh: the documentation has warnings"
  exit 1
fi
if [ "${1:-}" = "--output" ] && [ -n "${2:-}" ]; then
  mkdir -p "$2"
  for t in "${targets[@]}"; do cp -R ".build/plugins/Swift-DocC/outputs/$t.doccarchive" "$2/"; done
fi
echo "docc.sh: ${#targets[@]} catalogs built without warnings"
