#!/usr/bin/env bash
# The whole test suite under ThreadSanitizer (a separate build in .build-tsan).
#   Scripts/tsan.sh              all tests
#   Scripts/tsan.sh --filter X   only tests matching X
# Prints every ThreadSanitizer report and ends with "N passed, N failed, N ThreadSanitizer reports";
# the exit status is 1 when a test failed or TSan reported anything.
set -euo pipefail
cd "$(dirname "$0")/.."
source Scripts/prepare.sh

echo "[tsan.sh] swift build --build-tests --sanitize=thread (a build of its own: several minutes)"
swift build --build-tests --sanitize=thread --scratch-path .build-tsan 2>&1 | grep -E "error:|Compiling|Build complete" | grep -v Compiling || true
out=$(mktemp)
trap 'rm -f "$out"' EXIT
set +e
# halt_on_error=0: a report does not end the run, so one run lists them all. Line-buffered, so a
# run that is killed still shows how far it came; bounded by REALTIME_TSAN_TIMEOUT (90 minutes).
# Under TSan the code runs 5-15 times slower: tests with real-clock limits fail on time there; what
# this run is for is the reports.
TSAN_OPTIONS="halt_on_error=0 second_deadlock_stack=1" \
  timeout --signal=KILL "${REALTIME_TSAN_TIMEOUT:-90m}" \
  stdbuf -oL -eL swift test --skip-build --sanitize=thread --scratch-path .build-tsan "$@" >"$out" 2>&1
status=$?
set -e
grep -E "^(✘|✔ Test run|✘ Test run)|Expectation failed" "$out" | head -40 || true
cp "$out" .build-tsan/last-run.log
awk '/WARNING: ThreadSanitizer/,/^SUMMARY: ThreadSanitizer/' "$out"
reports=$(grep -c "WARNING: ThreadSanitizer" "$out" || true)
passed=$(grep -E "^✔ Test .* passed" "$out" | grep -vc "^✔ Test run" || true)
failed=$(grep -E "^✘ Test .* failed" "$out" | grep -vc "^✘ Test run" || true)
if [ "$status" != 0 ] && [ "$failed" = 0 ]; then failed=1; fi
echo "${passed} passed, ${failed} failed, ${reports} ThreadSanitizer reports"
[ "$status" = 0 ] && [ "$reports" = 0 ]
