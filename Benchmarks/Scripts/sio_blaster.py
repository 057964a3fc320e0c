# A fast Socket.IO server for client inbound throughput: WebSocket only (Engine.IO 4, Socket.IO 5,
# main namespace). A client that emits `count` with N gets N `tick` events, written as fast as the
# socket takes them (frames encoded ahead, one write per 64 KiB), so the server is never what a
# client waits for. It sends no pings (pingInterval 10 minutes) and answers nothing else.
#   python3 sio_blaster.py [port]   -> prints its port on the first line
# EVENTS (default 200,000) is the count whose frames are encoded at start; another count is encoded
# when asked.
import asyncio, base64, hashlib, json, loopback, os, struct

EVENTS = int(os.environ.get("EVENTS", "200000"))
GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def frame(payload: bytes, opcode: int = 0x1) -> bytes:
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, n)
    elif n < 65536:
        head = struct.pack("!BBH", 0x80 | opcode, 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 127, n)
    return head + payload


def ticks(count: int) -> list[bytes]:
    data = b"".join(frame(b'42["tick",%d]' % i) for i in range(1, count + 1))
    return [data[i:i + 65536] for i in range(0, len(data), 65536)]


PRE = ticks(EVENTS)


async def read_frame(reader):
    b1, b2 = await reader.readexactly(2)
    opcode, n = b1 & 0x0F, b2 & 0x7F
    if n == 126:
        (n,) = struct.unpack("!H", await reader.readexactly(2))
    elif n == 127:
        (n,) = struct.unpack("!Q", await reader.readexactly(8))
    mask = await reader.readexactly(4) if b2 & 0x80 else b"\0\0\0\0"
    data = bytearray(await reader.readexactly(n))
    for i in range(n):
        data[i] ^= mask[i % 4]
    return opcode, bytes(data)


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
        accept = base64.b64encode(hashlib.sha1(key + GUID).digest())
        writer.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + accept + b"\r\n\r\n")
        handshake = {"sid": "blaster", "upgrades": [], "pingInterval": 600000, "pingTimeout": 600000, "maxPayload": 1000000}
        writer.write(frame(b"0" + json.dumps(handshake).encode()))
        await writer.drain()
        while True:
            opcode, data = await read_frame(reader)
            if opcode == 0x8:
                writer.write(frame(data[:2], 0x8))
                await writer.drain()
                return
            if opcode == 0x9:
                writer.write(frame(data, 0xA))
            elif data.startswith(b"40"):
                writer.write(frame(b'40{"sid":"blaster-socket"}'))
            elif data.startswith(b"1"):
                return
            elif data.startswith(b"42"):
                event = json.loads(data[2:])
                if event and event[0] == "count":
                    count = int(event[1]) if len(event) > 1 else 1
                    for chunk in (PRE if count == EVENTS else ticks(count)):
                        writer.write(chunk)
                        await writer.drain()
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


loopback.serve(handle)
