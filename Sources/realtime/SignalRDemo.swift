import Foundation
import RealtimeCore
import RealtimeTesting
import SignalRHub

/// The SignalR client's part of the demo, against the in-process SignalRTestServer.
enum SignalRDemo {
    static let steps: [(String, @Sendable () async throws -> Void)] = [
        ("SignalR: negotiate, WebSockets with MessagePack, invoke/stream/upload/client result, drop + automatic reconnect", exchange),
        ("SignalR: WebSockets refused -> fallback to Server-Sent Events, then Long Polling", fallback),
    ]

    static func exchange() async throws {
        let server = try await SignalRTestServer.start()
        DemoCleanup.after { await server.stop() }
        let connection = HubConnectionBuilder()
            .withUrl(url: server.url)
            .withHubProtocol(hubProtocol: .messagePack)
            .withAutomaticReconnect([0, 0.5, 1])
            .build()
        let received = AsyncStream.makeStream(of: String.self)
        connection.on("receive") { (user: String, count: Int) in received.continuation.yield("\(user) x\(count)") }
        connection.on("getValue") { (question: String) in "the client answers '\(question)'" }
        let reconnected = AsyncStream.makeStream(of: Void.self)
        connection.onReconnecting { error in say("   reconnecting: \(error)") }
        connection.onReconnected { reconnected.continuation.yield() }
        try await connection.start()
        say("   connected over \(connection.transport.map { "\($0)" } ?? "?"), connection id \(connection.connectionId ?? "?")")
        let sum: Int = try await connection.invoke(method: "add", arguments: 40, 2)
        say("   add(40, 2) = \(sum)")
        var items: [Int] = []
        for try await item in try await connection.stream(method: "countTo", arguments: 5).stream as AsyncThrowingStream<Int, any Error> {
            items.append(item)
        }
        say("   stream countTo(5): \(items)")
        let uploaded: [String] = try await connection.invoke(method: "collect", arguments: UploadStream(AsyncStream<String> { continuation in
            for word in ["up", "load", "ed"] { continuation.yield(word) }
            continuation.finish()
        }))
        say("   upload stream collected by the server: \(uploaded)")
        let answer: String = try await connection.invoke(method: "askClient", arguments: "getValue", "ready?")
        say("   client result: \(answer)")
        try await connection.send(method: "broadcast", arguments: "demo", 3)
        var iterator = received.stream.makeAsyncIterator()
        say("   broadcast received: \(await iterator.next() ?? "?")")
        await server.dropAll()
        say("   server dropped the connection")
        var reconnects = reconnected.stream.makeAsyncIterator()
        await reconnects.next()
        let echoed: String = try await connection.invoke(method: "echo", arguments: "back again")
        say("   reconnected (connection id \(connection.connectionId ?? "?")); echo: \(echoed)")
        await connection.stop()
    }

    static func fallback() async throws {
        var options = SignalRTestServer.Options()
        options.failingTransports = ["WebSockets"]
        let server = try await SignalRTestServer.start(options: options)
        DemoCleanup.after { await server.stop() }
        let connection = HubConnectionBuilder().withUrl(url: server.url).build()
        try await connection.start()
        say("   WebSockets refused; connected over \(connection.transport.map { "\($0)" } ?? "?")")
        let echoed: String = try await connection.invoke(method: "echo", arguments: "over SSE")
        say("   echo: \(echoed)")
        await connection.stop()

        let pollingOnly = HubConnectionBuilder().withUrl(url: server.url, transport: [.webSockets, .longPolling])
            .withHubProtocol(hubProtocol: .messagePack).build()
        try await pollingOnly.start()
        say("   MessagePack cannot use SSE: connected over \(pollingOnly.transport.map { "\($0)" } ?? "?")")
        let sum: Int = try await pollingOnly.invoke(method: "add", arguments: 1, 2)
        say("   add(1, 2) over long polling = \(sum)")
        await pollingOnly.stop()
        guard server.transportsUsed == ["ServerSentEvents", "LongPolling"] else {
            throw RealtimeError(.protocolViolation, "unexpected transports: \(server.transportsUsed)")
        }
    }
}
