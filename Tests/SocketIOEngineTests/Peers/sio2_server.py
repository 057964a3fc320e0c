"""socket.io 2.x peer for the v2 interop tests: python-socketio 4.6.1's AsyncServer with
python-engineio 3.14.2 (Engine.IO protocol 3, Socket.IO protocol 4) on aiohttp, bound to 127.0.0.1.
It runs in a virtual environment of its own (.venv-sio2, Scripts/requirements-sio2.txt): these
versions conflict with python-socketio 5.

Usage: sio2_server.py [port] [ping_interval_s] [ping_timeout_s] [max_http_buffer_size] [log-posts]
(port 0 = ephemeral; max_http_buffer_size in bytes, python-engineio 3's default 100 MB; socket.io
2.5 (engine.io 3.6) ships with 1 MB). Prints "PORT <n>" once listening, then one line per notable
observation ("GOT ..."); with "log-posts", "GOT POST <content-length>" for every polling POST.

Namespace "/" (joined by the server itself at the handshake, as socket.io 2 does):
  connect      prints "GOT connect / query=<the handshake's query string>", emits "welcome" {"sid": sid}
  echo         acks with the arguments it got
  echo_event   emits "echoed" with the arguments it got
  ask          calls the client's "question" handler with an ack, then emits "answer" with the reply
  count        emits "tick" 1..n
  disconnect_me  the server disconnects the client
  record       prints "GOT record <json args>"
  measure      (index, text) prints "GOT measure <index> <UTF-8 bytes of text>"
  big_numbers  acks with 2^53 + 1, 2^63 - 1, -2^63, 2^64 - 1, 1e300, -0.0, 0.1
  stall        never acks
Namespace "/chat": refuses (an ERROR packet) unless the handshake's query has token=secret (python-socketio
4 hands the handler the handshake's environ, not the namespace's query); "echo" as above; "whoami"
acks the token it saw. Every CONNECT and DISCONNECT packet is printed as it arrived ("GOT packet ...").
"""
import asyncio
import os
import json
import sys
from urllib.parse import parse_qs

# python-socketio 4.6.1 / python-engineio 3.14.2 predate Python 3.11, whose asyncio.wait refuses
# bare coroutines; they pass it coroutines when emitting and closing. Wrapping them in tasks is the
# only change made to the peer.
_asyncio_wait = asyncio.wait


async def _wait_accepting_coroutines(awaitables, *args, **kwargs):
    return await _asyncio_wait([asyncio.ensure_future(a) for a in awaitables], *args, **kwargs)


asyncio.wait = _wait_accepting_coroutines

import socketio  # noqa: E402
from aiohttp import web  # noqa: E402
from engineio.async_drivers import aiohttp as _eio_aiohttp  # noqa: E402

# python-engineio 3.14.2's aiohttp driver reads a polling POST with one StreamReader.read(length),
# which returns what has arrived so far: a body of more than a few hundred kB is cut, its last
# packet fails to parse and the rest are lost (seen with 900 kB POSTs). A Node.js socket.io 2.x
# server reads the whole body. The body is read whole here; nothing else of the driver changes.
_translate_request = _eio_aiohttp.translate_request


class _WholeBody:
    def __init__(self, stream):
        self._stream = stream

    async def read(self, length=None):
        if length is None or length < 0:
            return await self._stream.read()
        return await self._stream.readexactly(length)


def _translate_request_reading_whole_bodies(request):
    environ = _translate_request(request)
    environ["wsgi.input"] = _WholeBody(environ["wsgi.input"])
    return environ


_eio_aiohttp.translate_request = _translate_request_reading_whole_bodies
_eio_aiohttp._async["translate_request"] = _translate_request_reading_whole_bodies

port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
ping_interval = float(sys.argv[2]) if len(sys.argv) > 2 else 25
ping_timeout = float(sys.argv[3]) if len(sys.argv) > 3 else 60

max_http_buffer_size = int(sys.argv[4]) if len(sys.argv) > 4 else 100_000_000
log_posts = "log-posts" in sys.argv[5:]

sio = socketio.AsyncServer(
    async_mode="aiohttp", ping_interval=ping_interval, ping_timeout=ping_timeout, max_http_buffer_size=max_http_buffer_size)


@web.middleware
async def print_posts(request, handler):
    if log_posts and request.method == "POST":
        print("GOT POST %d" % (request.content_length or 0), flush=True)
    return await handler(request)


app = web.Application(middlewares=[print_posts])
sio.attach(app)
tokens = {}

# What the client sends to join or leave a namespace, as it arrived ("GOT packet 0/chat?token=x,"):
# python-socketio 4 drops a namespace's query when it parses the packet.
_handle_eio_message = sio._handle_eio_message


async def _print_namespace_packets(sid, data):
    if isinstance(data, str) and data[:1] in ("0", "1"):
        print("GOT packet " + data, flush=True)
    return await _handle_eio_message(sid, data)


sio._handle_eio_message = _print_namespace_packets
sio.eio.on("message", _print_namespace_packets)


def jsonable(value):
    if isinstance(value, (bytes, bytearray)):
        return {"$bin": bytes(value).hex()}
    if isinstance(value, list):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    return value


@sio.event
async def connect(sid, environ):
    print("GOT connect / query=" + json.dumps(environ.get("QUERY_STRING", "")), flush=True)
    await sio.emit("welcome", {"sid": sid}, room=sid)


@sio.event
async def echo(sid, *args):
    return args


@sio.event
async def echo_event(sid, *args):
    await sio.emit("echoed", args, room=sid)


@sio.event
async def ask(sid, *args):
    reply = await sio.call("question", args, sid=sid, timeout=5)
    await sio.emit("answer", tuple(reply) if isinstance(reply, (list, tuple)) else reply, room=sid)


@sio.event
async def count(sid, n):
    for i in range(1, n + 1):
        await sio.emit("tick", i, room=sid)


@sio.event
async def disconnect_me(sid):
    await sio.disconnect(sid)


@sio.event
async def record(sid, *args):
    print("GOT record " + json.dumps(jsonable(list(args))), flush=True)


@sio.event
async def measure(sid, index, text):
    print("GOT measure %d %d" % (index, len(text.encode("utf-8"))), flush=True)


@sio.event
async def big_numbers(sid):
    return [2**53 + 1, 2**63 - 1, -2**63, 2**64 - 1, 1e300, -0.0, 0.1]


@sio.event
async def stall(sid, *args):
    await asyncio.sleep(60)


@sio.on("connect", namespace="/chat")
async def chat_connect(sid, environ):
    # python-socketio 4 drops a namespace's query from the CONNECT packet; the handshake's query
    # (environ) is what it hands the handler.
    query = parse_qs(environ.get("QUERY_STRING", ""))
    token = query.get("token", [None])[0]
    print("GOT connect /chat token=" + json.dumps(token), flush=True)
    if token != "secret":
        raise socketio.exceptions.ConnectionRefusedError("bad token")
    tokens[sid] = token


@sio.on("echo", namespace="/chat")
async def chat_echo(sid, *args):
    return args


@sio.on("whoami", namespace="/chat")
async def chat_whoami(sid):
    return tokens.get(sid)


async def main():
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    bound = site._server.sockets[0].getsockname()[1]
    print(f"PORT {bound}", flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)
    # The test closed our stdin (or ended): exit at once. A graceful shutdown would wait for
    # held polls and open connections (aiohttp grants them up to 60 s) and outlive the test.
    os._exit(0)


asyncio.run(main())
