import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import RealtimeCore
import RealtimeTesting
import Testing

/// RealtimeCore's one Server-Sent Events transport, against the scripted server on loopback.
@Suite(.timeLimit(.minutes(1))) struct EventStreamTests {
    static let sse: [(String, String)] = [("Content-Type", "text/event-stream")]

    /// Collects what the stream hands over, with the number of calls (one per body part).
    final class Sink: Sendable {
        let box = NIOLockedValueBox<(outputs: [SSEParser.Output], calls: Int)>(([], 0))
        var events: [ServerSentEvent] { box.withLockedValue { $0.outputs }.compactMap { if case .event(let e) = $0 { e } else { nil } } }
        var calls: Int { box.withLockedValue { $0.calls } }
        func take(_ outputs: [SSEParser.Output]) {
            box.withLockedValue {
                $0.outputs += outputs
                $0.calls += 1
            }
        }
    }

    @Test func everyEventOfABodyPartComesInOneCall() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        let body = (1...500).map { "id: \($0)\ndata: event \($0)\n\n" }.joined()
        server.route("/events") { _ in .init(headers: Self.sse, body: .bytes(ByteBuffer(string: body))) }
        let sink = Sink()
        let end = try await EventStream.run(
            HTTPRequestSpec(url: server.baseURL + "/events"), onHead: { _ in .accept },
            onOutputs: { sink.take($0); return true })
        #expect(end == .ended)
        #expect(sink.events.map(\.data) == (1...500).map { "event \($0)" })
        #expect(sink.events.last?.lastEventId == "500")
        #expect(sink.calls < 500, "events are handed over per body part, not one by one")
    }

    /// Refused heads fail with the caller's error, made from the start of the body.
    @Test func aRefusedHeadFailsWithTheBodyExcerpt() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        server.route("/events") { _ in .text(String(repeating: "x", count: 2000), status: 503) }
        let error = await #expect(throws: RealtimeError.self) {
            try await EventStream.run(
                HTTPRequestSpec(url: server.baseURL + "/events"),
                onHead: { head in
                    let status = head.status
                    return .refuse { RealtimeError.badStatus(status, url: "x", body: $0) }
                },
                onOutputs: { _ in true })
        }
        #expect(error?.code == .badStatus)
        #expect(error?.status?.code == 503)
        #expect(error?.serverMessage?.utf8.count == 512)
    }

    @Test func finishingAtTheHeadReadsNothing() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        let feed = ChunkFeed()
        server.route("/events") { _ in .init(status: 200, headers: Self.sse, body: .feed(feed)) }
        let sink = Sink()
        let end = try await EventStream.run(
            HTTPRequestSpec(url: server.baseURL + "/events"), onHead: { _ in .finish }, onOutputs: { sink.take($0); return true })
        #expect(end == .finishedAtHead)
        feed.send("data: never\n\n")
        feed.finish()
        #expect(sink.calls == 0)
    }

    /// Paused, the stream reads nothing (the server's chunks wait); resumed, it goes on in order.
    @Test func pausingStopsReadingUntilResumed() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        let feed = ChunkFeed()
        server.route("/events") { _ in .init(headers: Self.sse, body: .feed(feed)) }
        let sink = Sink()
        let stream = try EventStream.open(
            HTTPRequestSpec(url: server.baseURL + "/events"), onHead: { _ in .accept },
            onOutputs: {
                sink.take($0)
                return sink.calls > 1  // pause after the first part only
            })
        feed.send("data: 1\n\n")
        try await waitUntil { sink.events.count == 1 }
        feed.send("data: 2\n\n")
        feed.send("data: 3\n\n")
        // Give the event loop turns to read if it wanted to: it must not (paused).
        for _ in 0..<50 { await Task.yield() }
        #expect(sink.events.count == 1)
        stream.resume()
        try await waitUntil { sink.events.count == 3 }
        feed.finish()
        stream.resume()
        #expect(try await stream.finished() == .ended)
        #expect(sink.events.map(\.data) == ["1", "2", "3"])
    }

    @Test func anOversizedEventFailsTheStream() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        let feed = ChunkFeed()
        server.route("/events") { _ in .init(headers: Self.sse, body: .feed(feed)) }
        feed.send("data: " + String(repeating: "y", count: 5000) + "\n\n")
        let error = await #expect(throws: RealtimeError.self) {
            try await EventStream.run(
                HTTPRequestSpec(url: server.baseURL + "/events"), options: .init(maxEventSize: 1024),
                onHead: { _ in .accept }, onOutputs: { _ in true })
        }
        #expect(error?.code == .messageTooLarge)
        feed.finish()
    }

    /// A connection cut mid-stream is `connectionClosed`, whatever the socket error was.
    @Test func aCutMidStreamIsConnectionClosed() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        let feed = ChunkFeed()
        server.route("/events") { _ in .init(headers: Self.sse, body: .feed(feed)) }
        let proxy = try await FaultProxy.start(targetPort: server.port)
        defer { Task { await proxy.stop() } }
        let sink = Sink()
        let stream = try EventStream.open(
            HTTPRequestSpec(url: proxy.url() + "/events"), onHead: { _ in .accept }, onOutputs: { sink.take($0); return true })
        feed.send("data: before\n\n")
        try await waitUntil { sink.events.count == 1 }
        proxy.cutAll(.reset)
        let error = await #expect(throws: RealtimeError.self) { try await stream.finished() }
        #expect(error?.code == .connectionClosed)
        feed.finish()
    }

    /// The idle timeout runs on the runtime's clock from the last byte.
    @Test func theIdleTimeoutFiresAtTheLastBytePlusTheLimit() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        let feed = ChunkFeed()
        server.route("/events") { _ in .init(headers: Self.sse, body: .feed(feed)) }
        let clock = ManualClock()
        let sink = Sink()
        let stream = try EventStream.open(
            HTTPRequestSpec(url: server.baseURL + "/events"), runtime: RealtimeRuntime(clock: clock),
            options: .init(idleTimeout: .seconds(10)), onHead: { _ in .accept }, onOutputs: { sink.take($0); return true })
        feed.send("data: a\n\n")
        try await waitUntil { sink.events.count == 1 }
        try await clock.waitForSleepers(1)
        clock.advance(by: .seconds(6))
        feed.send("data: b\n\n")
        try await waitUntil { sink.events.count == 2 }
        clock.advance(by: .seconds(4))  // t = 10 s: the first check; a byte came at 6 s
        try await waitUntil { clock.sleeps.count >= 2 }
        #expect(clock.sleeps.prefix(2) == [.seconds(10), .seconds(6)])
        clock.advance(by: .seconds(6))
        let error = await #expect(throws: RealtimeError.self) { try await stream.finished() }
        #expect(error?.code == .timeout)
        feed.finish()
    }

    /// A server that accepts the connection and never answers fails within the head timeout.
    @Test func aSilentServerFailsWithinTheHeadTimeout() async throws {
        let silent = try await SilentTCPServer.start()
        defer { Task { await silent.stop() } }
        let error = await #expect(throws: RealtimeError.self) {
            try await EventStream.run(
                HTTPRequestSpec(url: "http://127.0.0.1:\(silent.port)/events", headTimeout: .milliseconds(300)),
                onHead: { _ in .accept }, onOutputs: { _ in true })
        }
        #expect(error?.code == .timeout)
    }

    @Test func cancellingTheWaitingTaskCancelsTheRequest() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        let feed = ChunkFeed()
        server.route("/events") { _ in .init(headers: Self.sse, body: .feed(feed)) }
        let sink = Sink()
        let reader = Task {
            try await EventStream.run(
                HTTPRequestSpec(url: server.baseURL + "/events"), onHead: { _ in .accept }, onOutputs: { sink.take($0); return true })
        }
        feed.send("data: a\n\n")
        try await waitUntil { sink.events.count == 1 }
        reader.cancel()
        await #expect(throws: CancellationError.self) { try await reader.value }
        feed.finish()
    }
}
