"""python-socketio AsyncClient workloads against a Socket.IO server, for the side-by-side comparison.

Usage: sio_bench_client.py URL SEQUENTIAL INFLIGHT ROUNDS EMITS BINARY_COUNT BINARY_BYTES
Prints one JSON line with sequential_per_s, inflight_per_s, emits_per_s and binary_mb_per_s.
The workloads are the same as SocketIOCompare's Swift side (see its main.swift).
"""
import asyncio
import json
import sys
import time

import socketio

url = sys.argv[1]
sequential, inflight, rounds, emits, binary_count, binary_bytes = (int(a) for a in sys.argv[2:8])


async def main():
    sio = socketio.AsyncClient(reconnection=False)
    await sio.connect(url, transports=["websocket"], wait_timeout=10)
    for _ in range(100):  # warm up
        await sio.call("echo", "warm", timeout=10)

    start = time.perf_counter()
    for i in range(sequential):
        await sio.call("echo", i, timeout=10)
    seq = sequential / (time.perf_counter() - start)

    start = time.perf_counter()
    for _ in range(rounds):
        await asyncio.gather(*(sio.call("echo", i, timeout=30) for i in range(inflight)))
    par = inflight * rounds / (time.perf_counter() - start)

    # Emits without ack; the final ack comes after the server read them all (one connection, in order).
    start = time.perf_counter()
    for i in range(emits):
        await sio.emit("echo", i)
    await sio.call("echo", "done", timeout=60)
    emit_rate = emits / (time.perf_counter() - start)

    # Binary: the server echoes the attachment back in its ack; bytes counted both ways.
    blob = bytes(i % 251 for i in range(binary_bytes))
    start = time.perf_counter()
    for _ in range(binary_count):
        reply = await sio.call("echo", blob, timeout=30)
        assert reply == blob, "the server's binary ack differs"
    binary_rate = 2 * binary_count * binary_bytes / (time.perf_counter() - start) / 1e6

    await sio.disconnect()
    print(json.dumps({"sequential_per_s": seq, "inflight_per_s": par, "emits_per_s": emit_rate,
                      "binary_mb_per_s": binary_rate}), flush=True)


asyncio.run(main())
