import Foundation
import RealtimeCore
import RealtimeTesting
import SocketIOEngine

/// The Socket.IO client's part of the demo, against the in-process SocketIOTestServer.
enum SocketIODemo {
    static let steps: [(String, @Sendable () async throws -> Void)] = [
        ("Socket.IO: polling -> WebSocket upgrade, acks both ways, binary, namespace auth, drop + recovery", exchange),
    ]

    static func exchange() async throws {
        var options = SocketIOTestServer.Options()
        options.connectionStateRecovery = true
        let server = try await SocketIOTestServer.start(options: options)
        var configuration = SocketIOConfiguration()
        configuration.reconnectionDelay = .milliseconds(100)
        configuration.reachability = AlwaysReachable()
        let manager = SocketManager(url: server.url, configuration: configuration)
        let socket = manager.defaultSocket
        let news = AsyncStream.makeStream(of: [JSONValue].self)
        socket.on("news") { news.continuation.yield($0.arguments) }
        let answers = AsyncStream.makeStream(of: [JSONValue].self)
        socket.on("question") { event in event.ack("fine, thanks") }
        socket.on("answer") { answers.continuation.yield($0.arguments) }
        try await socket.connect(timeout: .seconds(5))
        say("   connected, sid \(socket.sid ?? "?"), transport \(manager.transport?.rawValue ?? "?")")

        let reply = try await socket.emitWithAck("echo", arguments: ["hello", .binary(Data([0xCA, 0xFE]))], timeout: .seconds(5))
        say("   ack for echo: \(JSONValue.array(reply))")
        for _ in 0..<50 where manager.transport != .websocket { try await Task.sleep(for: .milliseconds(20)) }
        say("   transport after upgrade: \(manager.transport?.rawValue ?? "?")")

        try socket.emit("ask", arguments: ["how are you?"])
        var answerIterator = answers.stream.makeAsyncIterator()
        say("   server asked us with an ack; it got back: \(JSONValue.array(await answerIterator.next() ?? []))")

        let chat = manager.socket(forNamespace: "/chat", auth: .value(["token": "secret"]))
        try await chat.connect(timeout: .seconds(5))
        say("   /chat whoami: \(JSONValue.array(try await chat.emitWithAck("whoami", timeout: .seconds(5))))")

        var iterator = news.stream.makeAsyncIterator()
        server.broadcast("news", ["before the drop"])
        say("   news: \(JSONValue.array(await iterator.next() ?? []))")
        server.dropAllConnections()
        server.broadcast("news", ["missed while offline"])
        say("   server dropped every connection and broadcast while we were away")
        say("   news: \(JSONValue.array(await iterator.next() ?? [])) (replayed, recovered: \(socket.recovered))")
        guard socket.recovered else { throw RealtimeError(.protocolViolation, "the session was not recovered") }
        manager.disconnect()
        await manager.waitUntilStopped()
        await server.stop()
    }
}
