"""python-socketio AsyncClient ack round trips against a Socket.IO server, for the side-by-side comparison.

Usage: sio_bench_client.py URL SEQUENTIAL INFLIGHT ROUNDS
Prints one JSON line: {"sequential_per_s": ..., "inflight_per_s": ...}
"""
import asyncio
import json
import sys
import time

import socketio

url, sequential, inflight, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])


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
    await sio.disconnect()
    print(json.dumps({"sequential_per_s": seq, "inflight_per_s": par}), flush=True)


asyncio.run(main())
