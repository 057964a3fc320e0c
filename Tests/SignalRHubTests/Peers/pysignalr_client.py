"""pysignalr 1.3.3 (a Python SignalR client written by others) against a server under test.

Usage: pysignalr_client.py URL json|messagepack [bench N [ROUNDS]]
Scenarios: prints "OK <name>" or "FAIL <name>: <why>" per scenario, then "DONE"; exits 1 on any failure.
With "bench N": prints "BENCH sequential <invocations per second>" for N invocations one after another and
"BENCH inflight <invocations per second>" for N invocations sent at once (ROUNDS times, default 1), then "DONE".
"""
import asyncio
import sys
import time

from pysignalr.client import SignalRClient
from pysignalr.protocol.json import JSONProtocol
from pysignalr.protocol.messagepack import MessagepackProtocol

url, protocol_name = sys.argv[1], sys.argv[2]
bench = int(sys.argv[4]) if len(sys.argv) > 4 and sys.argv[3] == "bench" else None
rounds = int(sys.argv[5]) if bench is not None and len(sys.argv) > 5 else 1
failures = 0


def report(name, ok, why=""):
    global failures
    if ok:
        print(f"OK {name}", flush=True)
    else:
        failures += 1
        print(f"FAIL {name}: {why}", flush=True)


async def main():
    protocol = JSONProtocol() if protocol_name == "json" else MessagepackProtocol()
    client = SignalRClient(url, protocol=protocol)
    opened = asyncio.Event()
    received = asyncio.Queue()

    async def on_open():
        opened.set()

    async def on_receive(arguments):
        await received.put(arguments)

    async def on_get_value(arguments):
        return f"python got {arguments[0]}"

    async def on_error(message):
        pass

    client.on_open(on_open)
    client.on("receive", on_receive)
    client.on("getValue", on_get_value)
    client.on_error(on_error)
    runner = asyncio.create_task(client.run())
    await asyncio.wait_for(opened.wait(), 15)

    async def invoke(method, arguments):
        done = asyncio.get_running_loop().create_future()

        async def on_completion(message):
            if not done.done():
                done.set_result(message)

        await client.send(method, arguments, on_completion)
        return await asyncio.wait_for(done, 15)

    if bench is not None:
        start = time.perf_counter()
        for index in range(bench):
            await invoke("echo", [index])
        print(f"BENCH sequential {bench / (time.perf_counter() - start):.0f}", flush=True)
        start = time.perf_counter()
        for _ in range(rounds):
            await asyncio.gather(*(invoke("echo", [index]) for index in range(bench)))
        print(f"BENCH inflight {bench * rounds / (time.perf_counter() - start):.0f}", flush=True)
    else:
        message = await invoke("echo", ["héllo"])
        report("echo", message.result == "héllo", repr(message.result))
        message = await invoke("add", [40, 2])
        report("add", message.result == 42, repr(message.result))
        message = await invoke("fail", ["bad"])
        report("fail", message.error is not None and "bad" in message.error, repr(message.error))
        await client.send("broadcast", ["py", 1])
        arguments = await asyncio.wait_for(received.get(), 15)
        report("broadcast", arguments == ["py", 1], repr(arguments))
        items = []
        finished = asyncio.Event()

        async def on_next(item):
            items.extend(item if isinstance(item, list) else [item])

        async def on_complete(message):
            finished.set()

        await client.stream("countTo", [3], on_next, on_complete)
        await asyncio.wait_for(finished.wait(), 15)
        report("stream", items == [1, 2, 3], repr(items))
        message = await invoke("askClient", ["getValue", "q"])
        report("client result", message.result == "python got q", repr(message.result))

    print("DONE", flush=True)
    runner.cancel()
    sys.exit(1 if failures else 0)


try:
    asyncio.run(main())
except SystemExit:
    raise
except BaseException:
    import traceback
    print("FAIL exception: " + traceback.format_exc().replace("\n", " | "), flush=True)
    sys.exit(1)
