# The benchmark servers' common part: serve `handle` (an asyncio connection handler) on 127.0.0.1,
# on the port given as the first argument (0 or none: an ephemeral one), printing the port first;
# the WebSocket framing the WebSocket servers share (server side: frames unmasked, a client's
# frames unmasked on reading); and the paced writer (RATE=n: n writes a second, one message each).
import asyncio, base64, ctypes, hashlib, os, select, struct, sys, time

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def upgrade_response(key: bytes) -> bytes:
    """The 101 answer to a WebSocket upgrade whose Sec-WebSocket-Key is `key`."""
    accept = base64.b64encode(hashlib.sha1(key + GUID).digest())
    return (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n")


def frame(payload: bytes, opcode: int = 0x1) -> bytes:
    """A whole unmasked frame (text by default)."""
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, n)
    elif n < 65536:
        head = struct.pack("!BBH", 0x80 | opcode, 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 127, n)
    return head + payload


async def read_frame(reader):
    """The next frame's opcode and its payload, unmasked."""
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


def serve(handle, backlog=100):
    async def main():
        port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
        server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=backlog)
        print(server.sockets[0].getsockname()[1], flush=True)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


async def read_data(reader, writer):
    """The next data frame's payload, control frames answered on the way (a ping with its pong);
    None once the client sent a close frame (answered)."""
    while True:
        opcode, data = await read_frame(reader)
        if opcode == 0x8:
            writer.write(frame(data[:2], 0x8))
            await writer.drain()
            return None
        if opcode == 0x9:
            writer.write(frame(data, 0xA))
        elif opcode < 0x8:
            return data


RATE = int(os.environ.get("RATE", "0"))
"""Writes a second in paced mode (RATE=n), 0 for as fast as the socket takes them."""


def _fine_timer_slack():
    """Asks the kernel to wake this thread's sleeps within 1 µs of their deadline (the default
    slack, 50 µs, would bunch the paced writes)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(29, 1000, 0, 0, 0)  # PR_SET_TIMERSLACK, in ns
    except (OSError, AttributeError):
        pass


async def paced_write(writer, chunks, rate=None):
    """Writes each chunk with a send of its own, `rate` (default RATE) a second, sleeping between
    them: the pace of a server that produces messages slower than a client reads them, so that each
    read of the client holds one message. Blocks the event loop for the burst (the benchmark
    servers serve one client at a time); a full socket buffer is waited for, never dropped."""
    rate = rate or RATE
    await writer.drain()
    while writer.transport.get_write_buffer_size():
        await asyncio.sleep(0.001)
    _fine_timer_slack()
    sock = writer.get_extra_info("socket")
    fd = sock.fileno()
    interval = 1.0 / rate
    due = time.perf_counter()
    for chunk in chunks:
        delay = due - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        view = memoryview(chunk)
        while view:
            try:
                view = view[os.write(fd, view):]
            except BlockingIOError:
                select.select([], [fd], [])
        due += interval
