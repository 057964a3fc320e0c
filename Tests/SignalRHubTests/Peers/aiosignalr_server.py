"""An aiosignalr hub server (written by others, pinned in Scripts/requirements.txt) for interop tests.

Usage: aiosignalr_server.py [stateful]   -> prints "PORT <n>" once it listens on 127.0.0.1 (ephemeral port), then serves
until stdin closes or the process is killed.

Hub methods: echo(x), add(a, b), void(), fail(message), broadcast(user, count) -> "receive"(user, count) to all,
askClient(method, argument) -> the caller's client result,
bigNumbers() -> 2^53 + 1, 2^63 - 1, -2^63, 2^64 - 1, 1e300, 0.1, isExactly(x, text) -> whether x is the int text says, countTo(n) stream, countForever() stream until cancelled,
collect(upload stream) -> the stream's items, record(x) -> x (kept), recorded() -> every x recorded,
recordedPage(start, count) -> a slice of them (for long soak runs), burstFrom(start, n) -> "item"(start..start+n-1)
to the caller, burst(n) -> "item"(0..n-1) to the caller. With "stateful" the server allows stateful reconnects;
copies() -> how many messages the server wrote again after a replay had carried them, dropped() -> how many it
never wrote (see CopyCounter).
"""
import asyncio
import os
import contextvars
import sys
from typing import Any

from aiosignalr import message_buffer
from aiosignalr.errors import HubException
from aiosignalr.server import Hub, IncomingStream, ServerOptions, SignalRServer


def fix_long_polling_idle_timer() -> None:
    """Counts a long-polling connection's idle time from the end of a poll, as SignalR servers do.

    aiosignalr 0.1.1 starts the idle timer when a poll begins, with the poll's own timeout (15 s):
    a poll that waits the whole 15 s for data is answered empty at the moment the timer tears the
    connection down, so the client's next poll, however quick, is answered 404 (seen in a loaded
    test run; reproduced by polling an idle connection twice). Here the timer allows the poll's
    timeout plus 15 s, so a connection dies only when no poll follows the last one for 15 s.
    """
    async def idle_watch(self, record, ctx):
        try:
            await asyncio.wait_for(ctx.wait_closed(), timeout=self.options.long_polling_timeout + 15.0)
        except TimeoutError:
            await self._teardown(ctx)
        except asyncio.CancelledError:
            pass

    assert hasattr(SignalRServer, "_lp_idle_watch"), "aiosignalr changed: see fix_long_polling_idle_timer"
    SignalRServer._lp_idle_watch = idle_watch


class CopyCounter:
    """Counts, without changing what the server does, the messages aiosignalr 0.1.1 writes twice.

    Its MessageBuffer.send records a message, then writes it; a sender still waiting to write (for
    the transport lock or for buffer room) when the socket drops writes it after the reconnect's
    replay has already carried it. Stateful reconnect numbers messages by position (they carry no
    ids), so the client counts the copy as one more message: its count runs one ahead of the
    server's, its next Ack covers one message the server has not sent, and at the next replay the
    newest message is taken for one already seen. The soak asks copies() to account for that.

    Its resend also drops messages: it writes the buffer list it started with, but an Ack arriving
    meanwhile replaces that list, and a message recorded after that (not written, since the replay
    is under way) is in the new list only, so it is not written until a later replay, if any. The
    client's count then runs behind the server's, and at the next replay messages it has processed
    come again. dropped() counts these.
    """

    count = 0
    dropped = 0
    sending = contextvars.ContextVar("sending", default=None)

    @classmethod
    def install(cls) -> None:
        buffer_class = message_buffer.MessageBuffer
        original_init, original_resend = buffer_class.__init__, buffer_class.resend
        original_send, original_send_serialized = buffer_class.send, buffer_class.send_serialized

        def init(self, *args, **kwargs):
            original_init(self, *args, **kwargs)
            self._replayed_through = 0
            self._resend_written = None
            write = self._write

            async def counting_write(data):
                number = cls.sending.get()
                if number is not None and number <= self._replayed_through:
                    cls.count += 1
                if self._resend_written is not None:
                    self._resend_written.add(id(data))
                await write(data)

            self._write = counting_write

        async def send(self, message, data):
            if not self._is_trackable(message):
                return await original_send(self, message, data)
            token = cls.sending.set(self._total_message_count + 1)
            try:
                await original_send(self, message, data)
            finally:
                cls.sending.reset(token)

        # What the hub's Clients send goes this way (serialized once, a trackable message).
        async def send_serialized(self, data):
            token = cls.sending.set(self._total_message_count + 1)
            try:
                await original_send_serialized(self, data)
            finally:
                cls.sending.reset(token)

        async def resend(self):
            start = self._replayed_through = self._total_message_count
            written = self._resend_written = set()
            try:
                await original_resend(self)
            finally:
                self._resend_written = None
            cls.dropped += sum(1 for number, data in self._buffered if number > start and id(data) not in written)

        buffer_class.__init__, buffer_class.resend = init, resend
        buffer_class.send, buffer_class.send_serialized = send, send_serialized


recorded = []


class TestHub(Hub):
    async def record(self, value: Any) -> Any:
        recorded.append(value)
        return value

    async def recorded(self) -> Any:
        return list(recorded)

    async def recordedPage(self, start: int, count: int) -> Any:
        return recorded[start:start + count]

    async def copies(self) -> Any:
        return CopyCounter.count

    async def dropped(self) -> Any:
        return CopyCounter.dropped

    async def burst(self, n: int) -> None:
        for value in range(n):
            await self.clients.caller.send("item", value)

    async def burstFrom(self, start: int, n: int) -> None:
        for value in range(start, start + n):
            await self.clients.caller.send("item", value)

    async def bigNumbers(self) -> Any:
        # Python ints are exact at any size: 64-bit ids must arrive unchanged (JSON and MessagePack).
        return [2**53 + 1, 2**63 - 1, -2**63, 2**64 - 1, 1e300, 0.1]

    async def isExactly(self, value: Any, text: str) -> Any:
        # What the client sent, compared with the decimal text of the number it meant to send.
        return type(value) is int and str(value) == text

    async def echo(self, value: Any) -> Any:
        return value

    async def add(self, a: Any, b: Any) -> Any:
        return a + b

    async def void(self) -> None:
        return None

    async def fail(self, message: str) -> Any:
        raise HubException(message)

    async def broadcast(self, user: str, count: int) -> None:
        await self.clients.all_.send("receive", user, count)

    async def askClient(self, method: str, argument: Any) -> Any:
        return await self.clients.caller.invoke(method, argument)

    async def collect(self, stream: IncomingStream) -> Any:
        return [item async for item in stream]

    async def countTo(self, n: int):
        for value in range(1, n + 1):
            yield value

    async def countForever(self):
        value = 0
        while True:
            value += 1
            yield value
            await asyncio.sleep(0.01)


async def main():
    stateful = "stateful" in sys.argv[1:]
    CopyCounter.install()
    fix_long_polling_idle_timer()
    options = ServerOptions(
        maximum_parallel_invocations=8, maximum_receive_message_size=1 << 20, keep_alive_interval=15.0,
        allow_stateful_reconnects=stateful)
    server = SignalRServer(TestHub, options=options)
    host, port = await server.serve("127.0.0.1", 0, path="/hub")
    print(f"PORT {port}", flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)
    # The test closed our stdin (or ended): exit at once. A graceful shutdown would wait for
    # held polls and open connections (aiohttp grants them up to 60 s) and outlive the test.
    os._exit(0)


if __name__ == "__main__":
    asyncio.run(main())
