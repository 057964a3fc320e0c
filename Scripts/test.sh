#!/usr/bin/env bash
# Prepares what the tests need on a fresh Linux machine, then runs the whole test suite.
#   Scripts/test.sh            all tests
#   Scripts/test.sh --filter X only tests matching X (passed to swift test)
# What it prepares:
#   - Debian packages: openssl (test certificates), zlib1g-dev (permessage-deflate), libssl-dev,
#     python3-venv (interop peers). Installed with apt-get only when missing.
#   - .venv/: a Python virtual environment with the pinned interop peers from Scripts/requirements.txt.
# It ends with one summary line: "N passed, N failed".
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[test.sh] %s\n' "$*"; }

need_apt=()
command -v openssl >/dev/null 2>&1 || need_apt+=(openssl)
[ -f /usr/include/zlib.h ] || need_apt+=(zlib1g-dev)
[ -f /usr/include/openssl/ssl.h ] || need_apt+=(libssl-dev)
command -v python3 >/dev/null 2>&1 || need_apt+=(python3)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need_apt+=(python3-venv)
if [ ${#need_apt[@]} -gt 0 ]; then
  log "installing Debian packages: ${need_apt[*]}"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if [ -f Scripts/requirements.txt ]; then
  if [ ! -x .venv/bin/python ] || ! cmp -s Scripts/requirements.txt .venv/.requirements 2>/dev/null; then
    log "creating .venv with the pinned interop peers (Scripts/requirements.txt)"
    rm -rf .venv
    python3 -m venv .venv
    .venv/bin/pip install --quiet --disable-pip-version-check -r Scripts/requirements.txt
    cp Scripts/requirements.txt .venv/.requirements
  fi
  export REALTIME_PYTHON="$PWD/.venv/bin/python"
fi

log "Scripts/docs.py check (the documentation's Swift blocks are compiled as Tests/DocSnippetTests)"
if ! python3 Scripts/docs.py check; then
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
rm -f "$build_log"

log "swift test"
out=$(mktemp)
set +e
swift test --skip-build "$@" 2>&1 | tee "$out" | grep -E "^(✘|✔ Suite|✔ Test run|✘ Test run)|^ *↳|error:|Expectation failed|Caught error" | grep -vE "↳ (Testing Library Version|Target Platform)"
status=${PIPESTATUS[0]}
set -e
passed=$(grep -E "^✔ Test .* passed" "$out" | grep -vc "^✔ Test run" || true)
failed=$(grep -E "^✘ Test .* failed" "$out" | grep -vc "^✘ Test run" || true)
grep -E "^(✔|✘) Test run" "$out" | tail -1 || true
rm -f "$out"
if [ "$status" != 0 ] && [ "$failed" = 0 ]; then failed=1; fi
echo "${passed} passed, ${failed} failed"
exit "$status"
