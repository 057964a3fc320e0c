"""SSE peer for the IKEventSource compat tests (Tests/EventSourceCompatTests): sse-starlette on
uvicorn, bound to 127.0.0.1 on an ephemeral port.

Prints "PORT <n>" once listening. Endpoints:
  /story    three events, then the server ends the response:
            id 1 with an explicit `event: message`, id 2 with no event name, id 3 named
            `user-connected`. Each request's Last-Event-Id header (or "none") is recorded.
  /seen     the Last-Event-Id headers /story received, comma-separated, in order.
  /hold     one event (id 1, no name), then keeps the response open until the client leaves.
  /empty    204 No Content.
"""
import asyncio
import socket
import sys
import threading

import uvicorn
from sse_starlette.sse import EventSourceResponse, ServerSentEvent
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from sse_peer import exit_when_parent_goes  # the peer ends when the test closes its stdin

seen = []


async def story(request: Request):
    seen.append(request.headers.get("last-event-id", "none"))

    async def generate():
        yield ServerSentEvent(data="explicit", id="1", event="message")
        yield ServerSentEvent(data="unnamed", id="2")
        yield ServerSentEvent(data="named", id="3", event="user-connected")

    return EventSourceResponse(generate())


async def seen_ids(request: Request):
    return PlainTextResponse(",".join(seen))


async def hold(request: Request):
    async def generate():
        yield ServerSentEvent(data="first", id="1")
        while True:
            await asyncio.sleep(1)

    return EventSourceResponse(generate(), ping=5)


async def empty(request: Request):
    return Response(status_code=204)


app = Starlette(routes=[Route("/story", story), Route("/seen", seen_ids), Route("/hold", hold), Route("/empty", empty)])


def main():
    threading.Thread(target=exit_when_parent_goes, daemon=True).start()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    # Listening before the port is announced: a client connecting at once is not refused.
    sock.listen(128)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1))
    asyncio.run(server.serve(sockets=[sock]))


if __name__ == "__main__":
    sys.exit(main())
