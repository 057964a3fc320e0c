# A fast SignalR server for client inbound throughput: JSON hub protocol over WebSocket only. An
# invocation of `pushMany` with N gets N invocations of `tick` (arguments [i]), written as fast as
# the socket takes them, then the completion with N; a stream invocation of `countTo` with N gets
# the items 0..<N the same way (encoded when asked), then its completion. So the server is never
# what a client waits for (the RealtimeTesting server awaits each message it sends). Answers the
# negotiate POST (any path ending in /negotiate), the handshake, any other invocation with its
# first argument (`echo`, which a client may call to see that it is connected), and nothing else;
# sends no pings.
#   python3 signalr_blaster.py [port]   -> prints its port on the first line
# FRAMING=single (the default) writes what ASP.NET Core and the other real servers write: one
# message per WebSocket frame, one write per frame. FRAMING=packed packs whole records into text
# frames of up to 64 KiB, one write each: fewer frames than any real server sends, so figures
# against it are a ceiling, not what a user sees.
# EVENTS (default 100,000) is the count of `tick`s encoded at start; another count is encoded when
# asked. RATE=n paces the messages: n a second, one write each (loopback.paced_write), the pace of a
# server slower than the client, where each read of the client holds one message.
import asyncio, json, loopback, os
from loopback import frame, read_data

EVENTS = int(os.environ.get("EVENTS", "100000"))
PACKED = os.environ.get("FRAMING", "single") == "packed"
RS = b"\x1e"



def ticks(count: int, stream: str | None = None) -> list[bytes]:
    """`count` invocations of `tick`, or with `stream` the items of that stream invocation: the
    frames, one write each."""
    frames, current, size = [], [], 0
    for i in range(count):
        if stream is None:
            record = b'{"type":1,"target":"tick","arguments":[%d]}' % i + RS
        else:
            record = b'{"type":2,"invocationId":"%s","item":%d}' % (stream.encode(), i) + RS
        if not PACKED:
            frames.append(frame(record))
            continue
        if size + len(record) > 65536:
            frames.append(frame(b"".join(current)))
            current, size = [], 0
        current.append(record)
        size += len(record)
    if current:
        frames.append(frame(b"".join(current)))
    return frames


PRE = ticks(EVENTS)


async def write_all(writer, frames):
    """One write per frame; waits for the socket after every 64 writes (and whenever the
    transport's buffer is over its high-water mark). Paced with RATE."""
    if loopback.RATE:
        await loopback.paced_write(writer, frames)
        return
    for index, chunk in enumerate(frames):
        writer.write(chunk)
        if index % 64 == 63:
            await writer.drain()
    await writer.drain()



async def read_request(reader):
    """The request line and headers (lower-case names), or None at the end of the stream."""
    line = await reader.readline()
    if not line:
        return None
    headers = {}
    while (header := await reader.readline()) not in (b"\r\n", b"\n", b""):
        name, _, value = header.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return line.decode("latin-1").split(" "), headers


async def hub(reader, writer):
    buffered = b""
    while (data := await read_data(reader, writer)) is not None:
        buffered += data
        *records, buffered = buffered.split(RS)
        for record in records:
            message = json.loads(record)
            if "protocol" in message:
                writer.write(frame(b"{}" + RS))
            elif message.get("type") == 1 and message.get("target") == "pushMany":
                count = int(message["arguments"][0])
                await write_all(writer, PRE if count == EVENTS else ticks(count))
                if "invocationId" in message:
                    done = {"type": 3, "invocationId": message["invocationId"], "result": count}
                    writer.write(frame(json.dumps(done).encode() + RS))
            elif message.get("type") == 4 and message.get("target") == "countTo":
                count, stream = int(message["arguments"][0]), message["invocationId"]
                await write_all(writer, ticks(count, stream))
                writer.write(frame(json.dumps({"type": 3, "invocationId": stream}).encode() + RS))
            elif message.get("type") == 1 and "invocationId" in message:
                # Any other method: its first argument back.
                arguments = message.get("arguments") or [None]
                done = {"type": 3, "invocationId": message["invocationId"], "result": arguments[0]}
                writer.write(frame(json.dumps(done).encode() + RS))
            elif message.get("type") == 7:
                return
        await writer.drain()


async def handle(reader, writer):
    try:
        while (request := await read_request(reader)) is not None:
            (method, target, *_), headers = request
            if "sec-websocket-key" in headers:
                writer.write(loopback.upgrade_response(headers["sec-websocket-key"].encode()))
                await writer.drain()
                await hub(reader, writer)
                return
            length = int(headers.get("content-length", "0"))
            if length:
                await reader.readexactly(length)
            if method == "POST" and target.split("?")[0].endswith("/negotiate"):
                body = json.dumps({
                    "connectionId": "blaster", "connectionToken": "blaster", "negotiateVersion": 1,
                    "availableTransports": [{"transport": "WebSockets", "transferFormats": ["Text", "Binary"]}],
                }).encode()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            else:
                writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


loopback.serve(handle)
