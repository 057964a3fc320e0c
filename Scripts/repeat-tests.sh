#!/usr/bin/env bash
# Runs the whole suite N times in a row (Scripts/test.sh) with two CPU-burning loops beside it, to
# find tests that depend on timing. Bounded: N runs (default 20), each within CI's limits.
#   Scripts/repeat-tests.sh [N]
# Prints one line per run and a summary "N runs, F with failures"; the failing tests' names are in
# repeat-tests.log, a failed run's results in repeat-tests.run-N.out and its whole output (every
# test's prints) in repeat-tests.run-N.log. Exit status 1 when any run failed.
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${1:-20}
log=repeat-tests.log
: > "$log"
rm -f repeat-tests.run-*
burn() { while :; do :; done; }
burn & b1=$!
burn & b2=$!
trap 'kill $b1 $b2 2>/dev/null' EXIT
bad=0
for i in $(seq 1 "$runs"); do
  start=$(date +%s)
  # The documentation build (Scripts/docc.sh) checks no test and takes minutes: once is enough.
  if [ "$i" = 1 ]; then out=$(Scripts/test.sh 2>&1); else out=$(REALTIME_SKIP_DOCC=1 Scripts/test.sh 2>&1); fi
  summary=$(printf '%s\n' "$out" | tail -1)
  echo "run $i: $summary ($(( $(date +%s) - start )) s)" | tee -a "$log"
  if ! printf '%s\n' "$summary" | grep -q " 0 failed"; then
    bad=$((bad + 1))
    printf '%s\n' "$out" > "repeat-tests.run-$i.out"
    if [ -f .build/failed-test-run.log ]; then mv .build/failed-test-run.log "repeat-tests.run-$i.log"; fi
    printf '%s\n' "$out" | grep -E "^✘ Test |Expectation failed|Caught error|hung:|exceeded|^↳ [^/]" | grep -v "Testing Library\|Target Platform" | head -30 | sed 's/^/    /' | tee -a "$log"
  fi
done
echo "$runs runs, $bad with failures" | tee -a "$log"
[ "$bad" = 0 ]
