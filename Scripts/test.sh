#!/usr/bin/env bash
# Prepares what the tests need on a fresh Linux machine, then runs the whole test suite.
#   Scripts/test.sh            all tests
#   Scripts/test.sh --filter X only tests matching X (passed to swift test)
# What it prepares (Scripts/prepare.sh):
#   - Debian packages: openssl (test certificates), zlib1g-dev (permessage-deflate), libssl-dev,
#     python3-venv (interop peers), tinyproxy-bin and dante-server (proxy tests). Installed with
#     apt-get only when missing.
#   - .venv/: a Python virtual environment with the pinned interop peers from Scripts/requirements.txt.
# It ends with one summary line: "N passed, N failed".
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[test.sh] %s\n' "$*"; }

source Scripts/prepare.sh

log "Scripts/docs.py check (the documentation's Swift blocks are compiled as Tests/DocSnippetTests)"
if ! python3 Scripts/docs.py check; then
  echo "0 passed, 1 failed"
  exit 1
fi

log "Scripts/parity-tables.py check (each guide's migration table is its Tests/CompatParity list)"
if ! python3 Scripts/parity-tables.py check; then
  echo "0 passed, 1 failed"
  exit 1
fi

log "Scripts/check-test-sleeps.py (a Task.sleep in a test says why nothing can be awaited)"
if ! python3 Scripts/check-test-sleeps.py; then
  echo "0 passed, 1 failed"
  exit 1
fi

log "Scripts/check-unchecked.py (an @unchecked Sendable or unstructured task in Sources/ says why)"
if ! python3 Scripts/check-unchecked.py; then
  echo "0 passed, 1 failed"
  exit 1
fi

log "Scripts/docc.sh (every product's DocC catalog, no warnings)"
if [ -n "${REALTIME_SKIP_DOCC:-}" ]; then
  log "skipped (REALTIME_SKIP_DOCC is set)"
elif ! Scripts/docc.sh; then
  echo "0 passed, 1 failed"
  exit 1
fi

log "swift build --build-tests (the first build on a fresh machine takes several minutes)"
build_log=$(mktemp)
if ! swift build --build-tests >"$build_log" 2>&1; then
  grep -E "error:" "$build_log" | sort -u | head -40 || true
  tail -20 "$build_log"
  rm -f "$build_log"
  echo "0 passed, 1 failed"
  exit 1
fi
# Our sources build without warnings. A fresh clone (CI) compiles every file, so every warning is
# seen; an incremental build shows only those of the files it recompiled.
# The package's own warnings (files no target handles) name our package by its directory. A
# warning inside a macro's expansion (#expect) names the expansion, not the file: the dependencies
# are built with their warnings suppressed, so such a line is ours too.
own_warnings=$( (grep -E "^$PWD/(Sources|Tests)/.*: warning:|^macro expansion .*: warning:" "$build_log"
  grep -A1 -E "^warning: '$(basename "$PWD")':" "$build_log") | sort -u || true)
if [ -n "$own_warnings" ]; then
  echo "$own_warnings"
  log "the build printed warnings in our own sources (above); fix them"
  rm -f "$build_log"
  echo "0 passed, 1 failed"
  exit 1
fi
rm -f "$build_log"

log "swift test"
# The fault matrix (Tests/FaultMatrixTests) tests two cells per fault in this run, drawn with a seed
# printed here; the same seed draws the same cells again, and Scripts/fault-matrix.sh runs them all.
export REALTIME_FAULT_SEED="${REALTIME_FAULT_SEED:-$(( (RANDOM << 15 | RANDOM) % 1000000 + 1 ))}"
log "fault matrix: 2 cells per fault, seed $REALTIME_FAULT_SEED (Scripts/fault-matrix.sh $REALTIME_FAULT_SEED draws them again; Scripts/fault-matrix.sh runs every cell)"
# Proxies' folders that were there before this run are not this run's (see the leftovers check).
run_started=$(date +%s)
proxies_before=$(ls -d "${TMPDIR:-/tmp}"/realtime-proxy-* 2>/dev/null || true)
out=$(mktemp)
set +e
# Line-buffered (stdbuf), so the log names the last tests even if the run is killed; bounded
# (REALTIME_TEST_TIMEOUT, 40 minutes by default): a hung test ends the run with its name printed.
# At most 8 tests at once (REALTIME_TEST_WIDTH): unbounded, every suite starts at the same moment,
# with its servers, Python peers and compilers, and on two cores the process's tasks waited
# seconds to run, past the real-clock limits of peers such as a server's ping timeout; bounded,
# a whole run took 98 s on two cores (an unbounded one in CI: 128 s).
timeout --signal=KILL "${REALTIME_TEST_TIMEOUT:-40m}" stdbuf -oL -eL swift test --skip-build \
  --experimental-maximum-parallelization-width "${REALTIME_TEST_WIDTH:-8}" "$@" 2>&1 | tee "$out" | grep -E "^(✘|✔ Suite|✔ Test run|✘ Test run)|^ *↳|error:|Expectation failed|Caught error" | grep -vE "↳ (Testing Library Version|Target Platform)"
status=${PIPESTATUS[0]}
set -e
if [ "$status" = 137 ]; then
  echo "[test.sh] the run exceeded ${REALTIME_TEST_TIMEOUT:-40m} and was killed; tests started and not finished:"
  python3 - "$out" <<'PY'
import re, sys
started, finished = [], set()
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r"^◇ Test (.+) started\.$", line)
    if m and not m.group(1).startswith("case passing"): started.append(m.group(1))
    m = re.match(r"^[✔✘] Test (.+?)( with \d+ test cases?)? (passed|failed)", line)
    if m: finished.add(m.group(1))
for name in started:
    if name not in finished: print("  hung:", name)
PY
fi
passed=$(grep -E "^✔ Test .* passed" "$out" | grep -vc "^✔ Test run" || true)
failed=$(grep -E "^✘ Test .* failed" "$out" | grep -vc "^✘ Test run" || true)
grep -E "^(✔|✘) Test run" "$out" | tail -1 || true
# The whole output (every test's own prints, a peer's log) is kept for a failed run; the lines
# above are only the results.
if [ "$failed" != 0 ] || [ "$status" != 0 ]; then
  mkdir -p .build && cp "$out" .build/failed-test-run.log && log "the whole output: .build/failed-test-run.log"
fi
rm -f "$out"
# A run leaves nothing behind: no proxy it started still running, no proxy folder, no peer.
sleep 2
leftovers=""
for folder in $(ls -d "${TMPDIR:-/tmp}"/realtime-proxy-* 2>/dev/null || true); do
  if ! grep -qxF "$folder" <<<"$proxies_before"; then leftovers+=" $folder"; fi
done
for pid in $(pgrep -f "realtime-proxy-|tcp_relay.py|Peers/.*\.py" || true); do
  command=$(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null || true)
  started=$(stat -c %Y "/proc/$pid" 2>/dev/null || echo 0)
  if [ -n "$command" ] && [ "$started" -ge "$run_started" ]; then leftovers+=" [pid $pid: $command]"; fi
done
if [ -n "$leftovers" ]; then
  log "the run left these behind:$leftovers"
  status=1
fi
if [ "$status" != 0 ] && [ "$failed" = 0 ]; then failed=1; fi
echo "${passed} passed, ${failed} failed"
exit "$status"
