import ArgumentParser

@main
struct Realtime: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "realtime",
        abstract: "A command-line client for WebSocket, Server-Sent Events, Socket.IO and SignalR endpoints.",
        subcommands: [Demo.self, WebSocketCommand.self, SSECommand.self, SocketIOCommand.self, SignalRCommand.self, SpreadbotCommand.self]
    )
}
