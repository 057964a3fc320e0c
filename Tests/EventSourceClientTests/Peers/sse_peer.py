"""SSE peer for the interop tests: sse-starlette on uvicorn, bound to 127.0.0.1 on an ephemeral port.

Prints "PORT <n>" once listening. Endpoints:
  /numbers  ids 1..total; each connection sends `per_connection` events then ends, resuming after
            the Last-Event-ID header; first sends `retry: 50`; pings (comments) every 0.2 s.
  /unicode  one multi-line event with non-ASCII text, then ends.
  /soak     a live feed for the soak run: numbered events (id 1, 2, ...) published at `rate` per
            second from the first request on, kept in a history of the last 100,000; a connection
            resumes after its Last-Event-ID from that history, then follows the live feed.
  /soak/stop  stops publishing and answers the last id published.
"""
import asyncio
import os
import threading
import socket
import sys

import uvicorn
from sse_starlette.sse import EventSourceResponse, ServerSentEvent
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route


async def numbers(request: Request):
    total = int(request.query_params.get("total", "9"))
    per_connection = int(request.query_params.get("per", "3"))
    start = int(request.headers.get("last-event-id", "0") or "0")

    async def generate():
        yield ServerSentEvent(comment="hello", retry=50)
        for n in range(start + 1, min(start + per_connection, total) + 1):
            yield ServerSentEvent(data=f"number {n}", id=str(n), event="number")
            await asyncio.sleep(0.01)

    return EventSourceResponse(generate(), ping=0.2)


async def unicode(request: Request):
    async def generate():
        yield ServerSentEvent(data="grüße\n豆腐 €\nlast line", event="text")

    return EventSourceResponse(generate())


class SoakFeed:
    def __init__(self):
        self.kept = 100_000  # the history: the last `kept` ids (an event's text is made from its id)
        self.last = 0
        self.changed = asyncio.Condition()
        self.publisher = None

    def start(self, rate: int):
        if self.publisher is None:
            self.publisher = asyncio.get_running_loop().create_task(self.publish(rate))

    async def publish(self, rate: int):
        interval = 1.0 / rate
        while True:
            async with self.changed:
                self.last += 1
                self.changed.notify_all()
            await asyncio.sleep(interval)

    def after(self, last_id: int):
        return range(max(last_id + 1, self.last - self.kept + 1), self.last + 1)


feed = SoakFeed()


async def soak(request: Request):
    feed.start(int(request.query_params.get("rate", "200")))
    start = int(request.headers.get("last-event-id", "0") or "0")

    async def generate():
        yield ServerSentEvent(comment="soak", retry=100)
        sent = start
        while True:
            for n in feed.after(sent):
                yield ServerSentEvent(data=f"event {n}", id=str(n))
                sent = n
            async with feed.changed:
                if feed.last <= sent:
                    await feed.changed.wait()

    return EventSourceResponse(generate(), ping=5)


async def soak_stop(request: Request):
    if feed.publisher is not None:
        feed.publisher.cancel()
    return PlainTextResponse(str(feed.last))


app = Starlette(routes=[
    Route("/numbers", numbers), Route("/unicode", unicode), Route("/soak", soak), Route("/soak/stop", soak_stop),
])


def exit_when_parent_goes():
    # The test keeps our stdin open; when it ends (even killed), stdin closes and we exit.
    sys.stdin.read()
    os._exit(0)


def main():
    threading.Thread(target=exit_when_parent_goes, daemon=True).start()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1))
    asyncio.run(server.serve(sockets=[sock]))


if __name__ == "__main__":
    sys.exit(main())
