#!/usr/bin/env bash
# How an SSE client reads a one-write-per-event server: the client's reads and epoll waits, its
# context switches and CPU, the TCP segments the machine sent during the run (the server's events
# plus the client's ACKs), and the server's CPU. Linux only; needs perf (with the syscalls
# tracepoints, i.e. root or a low perf_event_paranoid) and nstat (iproute2).
#   Benchmarks/Scripts/sse_reads.sh BINARY [WORKLOAD] [FRAMING]
# BINARY is an EngineCompare build; WORKLOAD is sse or sse-addlistener (default); FRAMING is
# single (default) or packed. 200,000 events of 64 bytes from sse_blaster.py.
set -euo pipefail
cd "$(dirname "$0")/.."
binary=$1 workload=${2:-sse-addlistener} framing=${3:-single}
fifo=$(mktemp -u); mkfifo "$fifo"
( EVENTS=200000 FRAMING=$framing exec python3 -u Scripts/sse_blaster.py 0 <&- ) > "$fifo" 2>/dev/null &
server=$!
trap 'kill $server 2>/dev/null' EXIT
read -r line < "$fifo"; rm -f "$fifo"
port=$(echo "$line" | grep -oE '[0-9]+$')
nstat -n > /dev/null
perf stat -x, -e context-switches,task-clock,syscalls:sys_enter_read,syscalls:sys_enter_epoll_wait \
  "$binary" "$workload" "http://127.0.0.1:$port/" 200000 2>&1 | awk -F, '/^[0-9.]+,/ { print $1, $3; next } { print }'
nstat TcpOutSegs | grep TcpOutSegs | awk '{print "tcp segments sent: " $2}'
echo "server CPU: $(awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f s", ($14 + $15) / hz}' "/proc/$server/stat")"
