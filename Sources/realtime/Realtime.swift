import ArgumentParser
import NIOCore
import NIOPosix

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

    /// Runs the command with NIO's event loops as Swift Concurrency's global executor: the tasks of
    /// the command (reading a stream, printing what arrives) run on the threads that read the
    /// sockets, so a message read wakes one thread, not the event loop's and then a pool thread.
    /// Nothing in the command blocks a task (standard input is read on a thread of its own, signals
    /// arrive through Dispatch).
    static func main() async {
        _ = NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor()
        do {
            var command = try parseAsRoot()
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch {
            exit(withError: error)
        }
    }
}
