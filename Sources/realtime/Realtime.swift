import ArgumentParser

@main
struct Realtime: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "realtime",
        abstract: "A command-line client for WebSocket, Server-Sent Events, Socket.IO, SignalR and Spreadbot endpoints.",
        discussion: """
            Every command writes what it receives to standard output, one line at a time (flushed as \
            it is written, also into a pipe or a file), and errors to standard error.

            Exit codes: 0 success; 1 the connection or a request failed; 64 a usage error; \
            130 / 143 interrupted by SIGINT / SIGTERM (after printing what it had).
            """,
        version: "swift-realtime 0.1.0-dev",
        subcommands: [
            Demo.self, WebSocketCommand.self, SSECommand.self, SocketIOCommand.self, SignalRCommand.self, SpreadbotCommand.self,
            TestServersCommand.self, SoakCommand.self,
        ]
    )
}
