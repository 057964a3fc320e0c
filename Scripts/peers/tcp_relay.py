"""A plain TCP relay on 127.0.0.1, for fault tests: it copies bytes both ways between each client
and the target, and knows nothing of TLS or HTTP. Tests kill it with SIGKILL mid-session (the
kernel then closes its sockets: the client sees the TCP connection end without a TLS close) and
start it again on the same port.

    python tcp_relay.py LISTEN_PORT TARGET_PORT      (LISTEN_PORT 0: an ephemeral port)

Prints "PORT <n>" once it listens. Exits when its standard input closes.
"""
import asyncio
import os
import sys


async def pipe(reader, writer):
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        try:
            writer.close()
        except Exception:
            pass


async def main():
    listen_port, target_port = int(sys.argv[1]), int(sys.argv[2])

    async def handle(client_reader, client_writer):
        try:
            server_reader, server_writer = await asyncio.open_connection("127.0.0.1", target_port)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(pipe(client_reader, server_writer), pipe(server_reader, client_writer))

    server = await asyncio.start_server(handle, "127.0.0.1", listen_port, reuse_address=True)
    print("PORT %d" % server.sockets[0].getsockname()[1], flush=True)
    loop = asyncio.get_running_loop()
    # Ends with the test: standard input closes when the test process goes away.
    await loop.run_in_executor(None, sys.stdin.read)
    # The test closed our stdin (or ended): exit at once. A graceful shutdown would wait for
    # held polls and open connections (aiohttp grants them up to 60 s) and outlive the test.
    os._exit(0)


asyncio.run(main())
