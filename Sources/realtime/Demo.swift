import ArgumentParser
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
@_spi(RealtimeEngine) import RealtimeCore
import RealtimeTesting

/// Runs every client against servers started in this process on 127.0.0.1 and prints what happened.
struct Demo: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run every client against loopback servers started in-process, and print what happened.")

    func run() async throws {
        let command = self
        // SIGINT and SIGTERM end the command within 1 s, with 130 or 143.
        try await Interruption.run { try await command.work() }
    }

    private func work() async throws {
        var failures = 0
        for (name, step) in Self.steps {
            say("== \(name)")
            let cleanup = DemoCleanup()
            do {
                try await DemoCleanup.$current.withValue(cleanup) { try await step() }
                await cleanup.run()
            } catch {
                await cleanup.run()
                failures += 1
                say("   FAILED: \(error)")
            }
        }
        say(failures == 0 ? "demo: all \(Self.steps.count) steps succeeded" : "demo: \(failures) of \(Self.steps.count) steps failed")
        if failures > 0 { throw ExitCode.failure }
    }

    static let steps: [(String, @Sendable () async throws -> Void)] = [
        ("WebSocket echo (ws://, text and binary)", webSocketEcho),
        ("WebSocket with permessage-deflate", webSocketCompressed),
        ("WebSocket close code surfaced as a typed error", webSocketCloseCode),
        ("HTTP streaming GET parsed as Server-Sent Events", httpStreamAsSSE),
        ("HTTP long polling, and the outbox: what is queued goes in one POST", longPolling),
        ("Reconnect driver: a refused connection, backoff, reconnect", reconnect),
    ] + EventSourceDemo.steps + SocketIODemo.steps + SignalRDemo.steps + SpreadbotDemo.steps + BridgeDemo.steps

    static func webSocketEcho() async throws {
        let server = try await WebSocketEchoServer.start()
        DemoCleanup.after { await server.stop() }
        let replies = NIOLockedValueBox<[String]>([])
        try await WebSocketTransport.connect(to: server.webSocketBaseURL + "/echo") { connection in
            try await connection.send(text: "hello from swift-realtime")
            try await connection.send(binary: ByteBuffer(bytes: [1, 2, 3]))
            var iterator = connection.inbound.makeAsyncIterator()
            for _ in 0..<2 {
                if let message = try await iterator.next() { replies.withLockedValue { $0.append("\(message)") } }
            }
            try await connection.close()
        }
        say("   sent 2 messages to \(server.webSocketBaseURL)/echo, echoed back: \(replies.withLockedValue { $0 })")
    }

    static func webSocketCompressed() async throws {
        let server = try await WebSocketEchoServer.start(compression: true)
        DemoCleanup.after { await server.stop() }
        let text = String(repeating: "realtime ", count: 10_000)
        let ok = NIOLockedValueBox(false)
        try await WebSocketTransport.connect(to: server.webSocketBaseURL, configuration: .init(compression: true)) { connection in
            try await connection.send(text: text)
            var iterator = connection.inbound.makeAsyncIterator()
            if case .text(let reply) = try await iterator.next() { ok.withLockedValue { $0 = reply == text } }
            try await connection.close()
        }
        say("   \(text.utf8.count)-byte message round trip with compression: \(ok.withLockedValue { $0 } ? "identical" : "DIFFERENT")")
        guard ok.withLockedValue({ $0 }) else { throw RealtimeError(.protocolViolation, "compressed echo differed") }
    }

    static func webSocketCloseCode() async throws {
        let server = try await WebSocketEchoServer.start()
        DemoCleanup.after { await server.stop() }
        do {
            try await WebSocketTransport.connect(to: server.webSocketBaseURL) { connection in
                try await connection.send(text: "!close 4003 demo says goodbye")
                for try await _ in connection.inbound {}
            }
            throw RealtimeError(.protocolViolation, "expected a close error")
        } catch let error as RealtimeError where error.code == .webSocketClosed {
            say("   server closed with code \(error.closeCode ?? 0), reason \"\(error.serverMessage ?? "")\"")
        }
    }

    static func httpStreamAsSSE() async throws {
        let server = try await ScriptedHTTPServer.start()
        DemoCleanup.after { await server.stop() }
        let feed = ChunkFeed()
        server.route("/events") { _ in ScriptedResponse(headers: [("Content-Type", "text/event-stream")], body: .feed(feed)) }
        feed.send("id: 1\nevent: greeting\ndata: hello\n\n")
        feed.send("data: split across")
        feed.send(" chunks\r\n\r")
        feed.send("\n: a comment\ndata: last\n\n")
        feed.finish()
        let events = try await HTTPTransport.stream(HTTPRequestSpec(url: server.baseURL + "/events")) { _, body in
            var parser = SSEParser()
            var events: [ServerSentEvent] = []
            for try await chunk in body {
                try parser.parse(chunk) { if case .event(let event) = $0 { events.append(event) } }
            }
            return events
        }
        for event in events { say("   event type=\(event.type) id=\(event.lastEventId) data=\"\(event.data)\"") }
    }

    static func longPolling() async throws {
        let server = try await LongPollServer.start(holdTime: .milliseconds(500))
        DemoCleanup.after { await server.stop() }
        let received = NIOLockedValueBox<[String]>([])
        let poller = LongPoller(
            makeRequest: { HTTPRequestSpec(url: server.url) },
            handleResponse: { head, body in
                guard head.status == .ok else { throw RealtimeError.badStatus(head.status, url: server.url) }
                let lines = String(buffer: body).split(separator: "\n").map(String.init)
                return received.withLockedValue { $0.append(contentsOf: lines); return $0.count } >= 3 ? .stop : .next
            })
        // The outbox every client sends through: what is queued while a POST is in flight goes
        // out together in the next one.
        let outbox = Outbox<DemoPost>()
        for index in 1...5 { outbox.push(DemoPost(text: "post-\(index)")) }
        server.push("poll-1")
        async let polled: Void = poller.run()
        let generation = outbox.generation
        while outbox.queuedCount > 0, let batch = outbox.takeNow(maxBytes: .max, generation: generation) {
            let body = ByteBuffer(string: batch.map(\.text).joined(separator: "|"))
            _ = try await HTTPTransport.execute(HTTPRequestSpec(url: server.url, method: .POST, body: body))
            outbox.finishedWrite()
        }
        server.push("poll-2")
        server.push("poll-3")
        try await polled
        say("   polled: \(received.withLockedValue { $0 })")
        say("   5 sends went out as \(server.received.count) POST(s): \(server.received)")
    }

    static func reconnect() async throws {
        let server = try await ScriptedHTTPServer.start()
        DemoCleanup.after { await server.stop() }
        let connections = NIOLockedValueBox(0)
        server.route("/feed") { _ in
            let number = connections.withLockedValue { $0 += 1; return $0 }
            return number == 1 ? .text("dropping", status: 503) : .text("welcome back")
        }
        let driver = ReconnectDriver(
            policy: ReconnectPolicy(backoff: .fixed([.milliseconds(100)]), reachability: AlwaysReachable()))
        // Watches the states while the driver runs below; awaited once the driver has stopped.
        let states = Task {
            var seen: [String] = []
            for await state in driver.state.updates() {
                seen.append("\(state)")
                if state.isDisconnected && seen.count > 1 { break }
            }
            return seen
        }
        let url = server.baseURL + "/feed"
        let error = await driver.run { context in
            let (head, body) = try await HTTPTransport.execute(HTTPRequestSpec(url: url))
            guard head.status == .ok else { throw RealtimeError.badStatus(head.status, url: url) }
            context.connected()
            say("   attempt \(context.attempt): server said \"\(String(buffer: body))\"")
            return .closed
        }
        say("   states: \(await states.value.joined(separator: " -> "))")
        if let error { throw error }
    }
}

/// What a demo step started and must stop (its loopback servers): the runner awaits the stops after
/// the step, whatever the step did, so no step leaves a server running into the next.
final class DemoCleanup: Sendable {
    @TaskLocal static var current: DemoCleanup?
    private let stops = NIOLockedValueBox<[@Sendable () async -> Void]>([])

    /// Registers `stop` to run after the current step (the latest registered first).
    static func after(_ stop: @escaping @Sendable () async -> Void) {
        current?.stops.withLockedValue { $0.append(stop) }
    }

    func run() async {
        let stops = stops.withLockedValue { stops in
            defer { stops = [] }
            return stops
        }
        for stop in stops.reversed() { await stop() }
    }
}

/// A demo message for the outbox: its text, counted in bytes.
private struct DemoPost: OutboxMessage {
    let text: String
    var outboxSize: Int { text.utf8.count }
    var outboxParts: Int { 1 }
    var isApplicationData: Bool { true }
}
