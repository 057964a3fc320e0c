#!/usr/bin/env bash
# Instructions per message of an EngineCompare workload, by callgrind (valgrind): the difference
# between a run of N2 and a run of N1 messages, divided by N2 - N1, so that start-up and connect do
# not count. Every thread's instructions (the event loops', the pool's), the client process only.
# Repeatable on a noisy machine where time is not. BINARY is EngineCompareSync (the workloads with a
# synchronous main: valgrind cannot run an async main). valgrind cannot read the binary's DWARF, so a
# copy without debug information is run.
#
#   Benchmarks/Scripts/callgrind_per_message.sh .build/release/EngineCompareSync WORKLOAD URL [N1] [N2]
#   (e.g. socketio-on http://127.0.0.1:PORT against `FRAMING=packed python3 Scripts/sio_blaster.py`)
# Prints "WORKLOAD: I instructions per message (N1: A, N2: B)"; with KEEP=dir, keeps the N2 profile
# there (callgrind_annotate reads it), and the N1 profile beside it as WORKLOAD.N1.callgrind
# (Scripts/callgrind_diff.py subtracts one from the other: instructions per message by function).
set -euo pipefail
binary=$1; workload=$2; url=$3; n1=${4:-20000}; n2=${5:-100000}
stripped=$(mktemp); trap 'rm -f "$stripped" /tmp/callgrind_pm.$$.*' EXIT
strip --strip-debug "$binary" -o "$stripped"
count() {
  valgrind --tool=callgrind --callgrind-out-file=/tmp/callgrind_pm.$$.$1 "$stripped" "$workload" $url "$1" 2>&1 |
    grep -oE 'refs: +[0-9,]+' | tr -dc '0-9'
}
a=$(count "$n1"); b=$(count "$n2")
if [ -n "${KEEP:-}" ]; then
  mkdir -p "$KEEP"
  cp /tmp/callgrind_pm.$$.$n2 "$KEEP/$workload.callgrind"
  cp /tmp/callgrind_pm.$$.$n1 "$KEEP/$workload.$n1.callgrind"
fi
echo "$workload: $(( (b - a) / (n2 - n1) )) instructions per message (N1 $n1: $a, N2 $n2: $b)"
