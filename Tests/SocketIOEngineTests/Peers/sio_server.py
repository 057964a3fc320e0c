"""Socket.IO peer for the interop tests: python-socketio's AsyncServer on aiohttp, bound to 127.0.0.1.

Usage: sio_server.py [port] [ping_interval_s] [ping_timeout_s] [max_http_buffer_size]   (port 0 = ephemeral)
Prints "PORT <n>" once listening, then one line per notable server-side observation ("GOT ...").

Namespace "/":
  connect      emits "welcome" {"sid": sid} from the connect handler (arrives before the CONNECT
               reply on python-socketio, a quirk clients must tolerate)
  disconnect   prints "GOT disconnect / reason=<json>" (python-socketio's reason)
  echo         acks with the arguments it got
  echo_event   emits "echoed" with the arguments it got
  ask          calls the client's "question" handler with an ack, then emits "answer" with the reply
  count        emits "tick" 1..n
  disconnect_me  the server disconnects the client
  record       prints "GOT record <json args>" (to check what the client sent)
  seq          records its first argument in arrival order (any connection); seq_report acks with
               that list; seq_ids acks with [n, id] for each seq that carried an emit id (a last
               argument {"emitId": id}), and the count of all seq arrivals; seq_reset clears both and acks
  stall        never acks (the handler sleeps for a minute)
  size         acks with the length of its first argument (str or bytes)
  big_numbers  acks with 2^53 + 1, 2^63 - 1, -2^63, 2^64 - 1, 1e300, -0.0, 0.1
  is_exactly   acks with whether its first argument is the int its second (decimal text) names
  flaky        flaky(key, n): counts its arrivals per key; acks with the count from the n-th on, and
               leaves the tries before unanswered (the handler sleeps); flaky_count(key) acks the count;
               flaky_ids_of(key) acks with the emit id each arrival carried (null: none)
The seq and flaky handlers take one more argument than they use: an emit id, when the client adds
one to every emit (SocketIOConfiguration.emitIDs).
Namespace "/chat": refuses unless auth is {"token": "secret"}; echo as above; "whoami" acks the auth.
Any other namespace is refused by python-socketio with a plain-string CONNECT_ERROR.
"""
import asyncio
import json
import logging
import os
import sys

# SIO_ERRLOG=<file>: the server's own error reports (tracebacks) go there, for diagnosing a test.
if os.environ.get("SIO_ERRLOG"):
    logging.basicConfig(filename=os.environ["SIO_ERRLOG"], level=logging.ERROR)

import socketio
from aiohttp import web

port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
ping_interval = float(sys.argv[2]) if len(sys.argv) > 2 else 25
ping_timeout = float(sys.argv[3]) if len(sys.argv) > 3 else 20
max_buffer = int(sys.argv[4]) if len(sys.argv) > 4 else 10_000_000

# python-engineio's default origin check stays on (cors_allowed_origins is not set): it refuses a
# request whose Origin is not the server's own, and our client sends no Origin, as native clients do.
sio = socketio.AsyncServer(async_mode="aiohttp", ping_interval=ping_interval, ping_timeout=ping_timeout,
                           max_http_buffer_size=max_buffer)
app = web.Application()
sio.attach(app)
auths = {}


def jsonable(value):
    if isinstance(value, (bytes, bytearray)):
        return {"$bin": bytes(value).hex()}
    if isinstance(value, list):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    return value


@sio.event
async def connect(sid, environ, auth):
    print("GOT connect / auth=" + json.dumps(auth) + " query=" + json.dumps(environ.get("QUERY_STRING", "")), flush=True)
    await sio.emit("welcome", {"sid": sid}, to=sid)


@sio.event
async def disconnect(sid, reason=None):
    # python-socketio 5.12+ passes why: "client disconnect" (a DISCONNECT packet or an Engine.IO
    # close), "transport close", "transport error", "ping timeout", "server disconnect".
    print("GOT disconnect / reason=" + json.dumps(reason), flush=True)


@sio.event
async def echo(sid, *args):
    return args


@sio.event
async def big_numbers(sid):
    # Python ints are exact at any size: 64-bit ids must arrive unchanged.
    return [2**53 + 1, 2**63 - 1, -2**63, 2**64 - 1, 1e300, -0.0, 0.1]


@sio.event
async def is_exactly(sid, value, text):
    # What the client sent, compared with the decimal text of the number it meant to send.
    return type(value) is int and str(value) == text


@sio.event
async def echo_event(sid, *args):
    await sio.emit("echoed", args, to=sid)


@sio.event
async def ask(sid, *args):
    reply = await sio.call("question", args, to=sid, timeout=5)
    await sio.emit("answer", tuple(reply) if isinstance(reply, (list, tuple)) else reply, to=sid)


@sio.event
async def count(sid, n):
    for i in range(1, n + 1):
        await sio.emit("tick", i, to=sid)


@sio.event
async def disconnect_me(sid):
    await sio.disconnect(sid)


@sio.event
async def record(sid, *args):
    print("GOT record " + json.dumps(jsonable(list(args))), flush=True)


arrivals = []
emit_ids = []  # [n, the emit's id] of each seq that carried one (SocketIOConfiguration.emitIDs)


def emit_id(args):
    """The id an emit carries as its last argument ({"emitId": id}), or None."""
    if args and isinstance(args[-1], dict) and "emitId" in args[-1]:
        return args[-1]["emitId"]
    return None


@sio.event
async def seq(sid, n, *padding):
    arrivals.append(n)
    if (identifier := emit_id(padding)) is not None:
        emit_ids.append([n, identifier])


@sio.event
async def seq_ids(sid, *rest):
    return list(emit_ids), len(arrivals)


@sio.event
async def seq_report(sid, *rest):
    return list(arrivals)


@sio.event
async def seq_reset(sid, *rest):
    arrivals.clear()
    emit_ids.clear()
    return True


flaky_arrivals = {}
flaky_ids = {}


@sio.event
async def flaky(sid, key, n, *rest):
    flaky_arrivals[key] = flaky_arrivals.get(key, 0) + 1
    flaky_ids.setdefault(key, []).append(emit_id(rest))
    count = flaky_arrivals[key]
    if count < n:
        await asyncio.sleep(60)
    return count


@sio.event
async def flaky_count(sid, key, *rest):
    return flaky_arrivals.get(key, 0)


@sio.event
async def flaky_ids_of(sid, key, *rest):
    return flaky_ids.get(key, [])


@sio.event
async def stall(sid, *args):
    await asyncio.sleep(60)


@sio.event
async def size(sid, value):
    return len(value)


@sio.on("connect", namespace="/chat")
async def chat_connect(sid, environ, auth):
    if not isinstance(auth, dict) or auth.get("token") != "secret":
        raise socketio.exceptions.ConnectionRefusedError("bad token")
    auths[sid] = auth


@sio.on("echo", namespace="/chat")
async def chat_echo(sid, *args):
    return args


@sio.on("whoami", namespace="/chat")
async def chat_whoami(sid):
    return auths.get(sid)


async def main():
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    bound = site._server.sockets[0].getsockname()[1]
    print(f"PORT {bound}", flush=True)
    # Exit when the test closes stdin (or dies).
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)
    # The test closed our stdin (or ended): exit at once. A graceful shutdown would wait for
    # held polls and open connections (aiohttp grants them up to 60 s) and outlive the test.
    os._exit(0)


asyncio.run(main())
