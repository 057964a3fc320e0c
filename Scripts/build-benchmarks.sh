#!/usr/bin/env bash
# Builds the benchmark package (Benchmarks/, a package of its own, debug) so that its executables
# and benchmark targets keep compiling against the library, and fails on a warning in their
# sources. CI runs it after the tests. The first build takes several minutes.
#   Scripts/build-benchmarks.sh
set -euo pipefail
cd "$(dirname "$0")/../Benchmarks"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! swift build >"$log" 2>&1; then
  grep -E "error:" "$log" | head -40 || tail -40 "$log"
  echo "build-benchmarks: the benchmark package does not build (above)"
  exit 1
fi
warnings=$(grep -E "^$PWD/(Sources|Benchmarks)/.*: warning:" "$log" | sort -u || true)
if [ -n "$warnings" ]; then
  echo "$warnings"
  echo "build-benchmarks: the benchmark sources have warnings (above); fix them"
  exit 1
fi
echo "build-benchmarks: every target of the benchmark package builds, without warnings"
