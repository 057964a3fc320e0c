#!/usr/bin/env bash
# Coverage-guided fuzzing of the parsers that read network bytes (libFuzzer, with AddressSanitizer).
#
#   Scripts/fuzz.sh                 # every target, 60 s each
#   Scripts/fuzz.sh sse 600         # one target, 600 s
#   Scripts/fuzz.sh "" 20           # every target, 20 s each (what .ci/run does after the tests)
#
# Targets: json msgpack signalr-json signalr-msgpack signalr-handshake signalr-negotiate sse
# engineio socketio hubvalue (Fuzz/RealtimeFuzz/RealtimeFuzz.swift says what each checks). The build goes to
# .build-fuzz (a debug build, so internal parsers are reachable through @testable import); corpora
# grow in .build-fuzz/corpus/<target>, seeded from the conformance vectors where there are some. A
# crash leaves its input in .build-fuzz/crashes/; turn it into a test in the module's test target.
set -euo pipefail
cd "$(dirname "$0")/.."

targets=(json msgpack signalr-json signalr-msgpack signalr-handshake signalr-negotiate sse engineio socketio hubvalue)
seconds=60
if [[ $# -ge 1 && -n "$1" ]]; then targets=("$1"); fi
if [[ $# -ge 2 ]]; then seconds="$2"; fi

# SwiftPM passes `-sanitize=fuzzer -sanitize=address` to swiftc as two flags, and the second
# drops the first one's coverage instrumentation from Swift code (ASan stays, libFuzzer then sees
# only C dependencies' edges and mutates blind: "no interesting inputs were found"). The coverage
# is asked for explicitly; The check below refuses a build without it.
coverage=(-Xswiftc -sanitize-coverage=edge,inline-8bit-counters,pc-table,trace-cmp)
REALTIME_FUZZ=1 swift build --scratch-path .build-fuzz --product RealtimeFuzz \
    --sanitize=fuzzer --sanitize=address "${coverage[@]}"
binary=$(REALTIME_FUZZ=1 swift build --scratch-path .build-fuzz --show-bin-path)/RealtimeFuzz
objects=$(dirname "$binary")
if ! objdump -h "$objects/RealtimeCore.build/JSONCodec.swift.o" | grep -c __sancov_cntrs >/dev/null; then
    echo "fuzz.sh: the Swift code is not coverage-instrumented; libFuzzer would mutate blind." >&2
    echo "An older build in .build-fuzz keeps its objects when flags change: rm -rf .build-fuzz/*-linux-gnu .build-fuzz/build.db and run again." >&2
    exit 1
fi

seed() {
    # Seeds: short valid inputs of each format, so the fuzzer starts from the grammar.
    local target=$1 dir=$2
    case $target in
        json) printf '{"a":[1,2.5e3,-0,true,null,"\\u00e9\\ud83d\\ude00"]}' >"$dir/seed1" ;;
        msgpack) printf '\x93\x01\xa3abc\x81\xa1k\xc3' >"$dir/seed1" ;;
        signalr-json) printf '{"type":1,"invocationId":"1","target":"t","arguments":[1,"a"]}\x1e{"type":3,"invocationId":"1","result":{"x":[]}}\x1e{"type":6}\x1e' >"$dir/seed1" ;;
        signalr-msgpack) printf '\x0c\x96\x01\x80\xa11\xa1t\x91\x01\x90\x02\x91\x06\x05\x94\x03\x80\xa11\x03' >"$dir/seed1" ;;
        signalr-handshake) printf '{"protocol":"json","version":1}\x1e{}\x1e' >"$dir/seed1" ;;
        signalr-negotiate) printf '{"negotiateVersion":1,"connectionId":"a","connectionToken":"b","availableTransports":[{"transport":"WebSockets","transferFormats":["Text","Binary"]}]}' >"$dir/seed1" ;;
        sse) printf 'event: a\r\ndata: x\r\nid: 7\n\n: c\nretry: 10\ndata\n\n' >"$dir/seed1" ;;
        engineio) printf '4hello\x1e2\x1ebAQID' >"$dir/seed1" ;;
        socketio) printf '2/chat,12["ev",{"a":1}]' >"$dir/seed1" ;;
        hubvalue) printf '{"name":"a","tags":["x"],"score":0.1}' >"$dir/seed1"; printf '[1,-7,255,0.5,"AQID","2026-11-24T10:20:30Z"]' >"$dir/seed2" ;;
    esac
}

mkdir -p .build-fuzz/crashes
status=0
crashed=()
for target in "${targets[@]}"; do
    corpus=.build-fuzz/corpus/$target
    mkdir -p "$corpus"
    [[ -n "$(ls -A "$corpus")" ]] || seed "$target" "$corpus"
    echo "== $target, ${seconds}s"
    if ! SWIFT_BACKTRACE=enable=no REALTIME_FUZZ_TARGET=$target "$binary" "$corpus" -max_total_time="$seconds" -max_len=4096 \
        -artifact_prefix=".build-fuzz/crashes/$target-" -print_final_stats=1 2>&1 | tail -n 25; then
        status=1
        crashed+=("$target")
    fi
done
echo "fuzz.sh: ${#targets[@]} targets, ${seconds} s each, ${#crashed[@]} crashed${crashed:+ (${crashed[*]})}"
exit $status
