import ArgumentParser
import Foundation
import RealtimeCore
import RealtimeTesting

/// Runs the in-process test servers of RealtimeTesting in a process of their own, for tests that
/// must not share a process with the servers (a test that times a client's stop while the whole
/// suite runs beside it). Hidden from --help.
///
/// Prints `SSE <url>`, `SOCKETIO <url>`, `SIGNALR <url>`, `SPREADBOT <url>`, then `READY`, then
/// answers one line per command read from standard input:
/// - `connected`: `CONNECTED <true|false>`, whether each server has one client;
/// - `publish <count> <tag>`: publishes `<tag>-<source>-<index>` on the SSE, Socket.IO and SignalR
///   servers, `count` each, then `PUBLISHED`;
/// - `received <path>`: `RECEIVED <n>`, what the Spreadbot server received on the path.
/// End of input stops the servers and exits.
struct TestServersCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "test-servers", abstract: "Run the test servers for the example service's tests.", shouldDisplay: false)

    func run() async throws {
        let command = self
        // SIGINT and SIGTERM end the command within 1 s, with 130 or 143.
        try await Interruption.run { try await command.work() }
    }

    private func work() async throws {
        let sse = try await SSETestServer.start()
        let socketIO = try await SocketIOTestServer.start()
        let signalR = try await SignalRTestServer.start()
        let spreadbot = try await SpreadbotTestServer.start()
        say("SSE \(sse.url)")
        say("SOCKETIO \(socketIO.url)")
        say("SIGNALR \(signalR.url)")
        say("SPREADBOT \(spreadbot.baseURL)")
        say("READY")
        let input = AsyncStream<String> { continuation in
            Thread.detachNewThread {
                while let line = readLine() { continuation.yield(line) }
                continuation.finish()
            }
        }
        for await line in input {
            let words = line.split(separator: " ").map(String.init)
            switch words.first {
            case "connected":
                let all = sse.openStreams == 1 && socketIO.sessionCount == 1 && signalR.connectionCount == 1 && spreadbot.streamCount == 1
                say("CONNECTED \(all)")
            case "publish" where words.count == 3:
                let count = Int(words[1]) ?? 0
                let tag = words[2]
                for index in 0..<count {
                    sse.publish("\(tag)-sse-\(index)")
                    socketIO.broadcast("message", [.string("\(tag)-socketio-\(index)")])
                    await signalR.broadcast("ReceiveMessage", [.string("\(tag)-signalr-\(index)")])
                }
                say("PUBLISHED")
            case "received" where words.count == 2:
                say("RECEIVED \(spreadbot.received(on: words[1]).count)")
            default:
                say("UNKNOWN \(line)")
            }
        }
        await sse.stop()
        await socketIO.stop()
        await signalR.stop()
        await spreadbot.stop()
    }
}
