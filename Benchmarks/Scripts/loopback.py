# The benchmark servers' common part: serve `handle` (an asyncio connection handler) on 127.0.0.1,
# on the port given as the first argument (0 or none: an ephemeral one), printing the port first.
import asyncio, sys


def serve(handle, backlog=100):
    async def main():
        port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
        server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=backlog)
        print(server.sockets[0].getsockname()[1], flush=True)
        async with server:
            await server.serve_forever()

    asyncio.run(main())
