"""signalrcore 1.0.2 (a Python SignalR client written by others, thread-based) against a server under test.

Usage: signalrcore_client.py URL json|messagepack [bench N [ROUNDS]]
Scenarios: prints "OK <name>" or "FAIL <name>: <why>" per scenario, then "DONE"; exits 1 on any failure.
signalrcore has no client results, so that scenario is not run. With "bench N": prints
"BENCH sequential <invocations per second>" and "BENCH inflight <invocations per second>" (N at once,
ROUNDS times, default 1), then "DONE".
"""
import logging
import sys
import threading
import time
import traceback

from signalrcore.hub_connection_builder import HubConnectionBuilder
from signalrcore.protocol.messagepack_protocol import MessagePackHubProtocol

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


def main():
    builder = HubConnectionBuilder().with_url(url).configure_logging(logging.CRITICAL)
    if protocol_name == "messagepack":
        builder = builder.with_hub_protocol(MessagePackHubProtocol())
    hub = builder.build()
    opened = threading.Event()
    errors = {}
    error_events = {}
    received = []
    received_event = threading.Event()
    hub.on_open(opened.set)

    def on_error(message):
        errors[message.invocation_id] = message.error
        error_events.setdefault(message.invocation_id, threading.Event()).set()

    hub.on_error(on_error)

    def on_receive(arguments):
        received.append(arguments)
        received_event.set()

    hub.on("receive", on_receive)
    hub.start()
    if not opened.wait(15):
        report("open", False, "not connected within 15 s")
        return

    def invoke(method, arguments):
        done = threading.Event()
        box = {}

        def on_completion(message):
            box["message"] = message
            done.set()

        result = hub.invoke(method, arguments, on_completion)
        event = error_events.setdefault(result.invocation_id, threading.Event())
        deadline = time.time() + 15
        while time.time() < deadline and not done.is_set() and not event.is_set():
            time.sleep(0.0005)
        return box.get("message"), errors.get(result.invocation_id)

    if bench is not None:
        start = time.perf_counter()
        for index in range(bench):
            invoke("echo", [index])
        print(f"BENCH sequential {bench / (time.perf_counter() - start):.0f}", flush=True)
        remaining = [bench]
        all_done = threading.Event()
        lock = threading.Lock()

        def on_completion(message):
            with lock:
                remaining[0] -= 1
                if remaining[0] == 0:
                    all_done.set()

        start = time.perf_counter()
        for _ in range(rounds):
            with lock:
                remaining[0] = bench
                all_done.clear()
            for index in range(bench):
                hub.invoke("echo", [index], on_completion)
            all_done.wait(60)
        print(f"BENCH inflight {bench * rounds / (time.perf_counter() - start):.0f}", flush=True)
    else:
        message, _ = invoke("echo", ["héllo"])
        report("echo", message is not None and message.result == "héllo", repr(message and message.result))
        message, _ = invoke("add", [40, 2])
        report("add", message is not None and message.result == 42, repr(message and message.result))
        _, error = invoke("fail", ["bad"])
        report("fail", error is not None and "bad" in error, repr(error))
        hub.send("broadcast", ["py", 1])
        received_event.wait(15)
        report("broadcast", received == [["py", 1]], repr(received))
        items = []
        finished = threading.Event()
        hub.stream("countTo", [3]).subscribe({
            "next": lambda item: items.append(item),
            "complete": lambda message: finished.set(),
            "error": lambda message: finished.set(),
        })
        finished.wait(15)
        report("stream", items == [1, 2, 3], repr(items))
    print("DONE", flush=True)
    hub.stop()


try:
    main()
except BaseException:
    print("FAIL exception: " + traceback.format_exc().replace("\n", " | "), flush=True)
    failures += 1
sys.stdout.flush()
import os
os._exit(1 if failures else 0)
