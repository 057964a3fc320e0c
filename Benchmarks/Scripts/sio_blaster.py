# A fast Socket.IO server for client inbound throughput: WebSocket only (Engine.IO 4, Socket.IO 5,
# main namespace). A client that emits `count` with N gets N `tick` events, written as fast as the
# socket takes them, so the server is never what a client waits for. It sends no pings
# (pingInterval 10 minutes) and answers nothing else.
#   python3 sio_blaster.py [port]   -> prints its port on the first line
# Each event is one WebSocket frame. FRAMING=single (the default) writes each frame with a write of
# its own, as the Node.js server does (one writev per event); FRAMING=packed joins the frames into
# 64 KiB writes: a ceiling, not what a user sees.
# EVENTS (default 200,000) is the count whose frames are encoded at start; another count is encoded
# when asked. RATE=n paces the events: n a second, one write each (loopback.paced_write), the pace
# of a server slower than the client, where each read of the client holds one event.
import asyncio, json, loopback, os
from loopback import frame, read_data

EVENTS = int(os.environ.get("EVENTS", "200000"))
PACKED = os.environ.get("FRAMING", "single") == "packed"



def ticks(count: int) -> list[bytes]:
    """The writes of `count` events."""
    frames = [frame(b'42["tick",%d]' % i) for i in range(1, count + 1)]
    if not PACKED:
        return frames
    data = b"".join(frames)
    return [data[i:i + 65536] for i in range(0, len(data), 65536)]


PRE = ticks(EVENTS)



async def handle(reader, writer):
    try:
        key = None
        while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            if name.strip().lower() == "sec-websocket-key":
                key = value.strip().encode()
        if key is None:
            writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            return
        writer.write(loopback.upgrade_response(key))
        handshake = {"sid": "blaster", "upgrades": [], "pingInterval": 600000, "pingTimeout": 600000, "maxPayload": 1000000}
        writer.write(frame(b"0" + json.dumps(handshake).encode()))
        await writer.drain()
        while (data := await read_data(reader, writer)) is not None:
            if data.startswith(b"40"):
                writer.write(frame(b'40{"sid":"blaster-socket"}'))
            elif data.startswith(b"1"):
                return
            elif data.startswith(b"42"):
                event = json.loads(data[2:])
                if event and event[0] == "count":
                    count = int(event[1]) if len(event) > 1 else 1
                    chunks = PRE if count == EVENTS else ticks(count)
                    if loopback.RATE:
                        await loopback.paced_write(writer, chunks)
                        continue
                    for index, chunk in enumerate(chunks):
                        writer.write(chunk)
                        if PACKED or index % 64 == 63:
                            await writer.drain()
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


loopback.serve(handle)
