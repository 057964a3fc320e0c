import EventSourceClient
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import RealtimeCore
import RealtimeTesting
import Testing

let sseHeaders = [("Content-Type", "text/event-stream")]

/// Fast settings for loopback tests: tiny reconnection time, no jitter, no reachability polling.
func fastConfiguration(_ change: (inout EventSourceConfiguration) -> Void = { _ in }) -> EventSourceConfiguration {
    var configuration = EventSourceConfiguration(
        reconnectionTime: .milliseconds(10), randomizationFactor: 0, reachability: AlwaysReachable())
    change(&configuration)
    return configuration
}

func collect(_ source: EventSource, count: Int) async throws -> [ServerSentEvent] {
    var events: [ServerSentEvent] = []
    for try await event in source.events {
        events.append(event)
        if events.count == count { break }
    }
    return events
}

@Suite(.timeLimit(.minutes(1))) struct EventSourceTests {
    @Test func deliversTypedEventsWithIdsAndSendsTheRightHeaders() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        server.route("/events") { _ in
            .init(headers: sseHeaders, body: .bytes(ByteBuffer(string: "id: 1\nevent: greet\ndata: hello\n\ndata: a\ndata: b\n\n")))
        }
        var headers = HTTPHeaders()
        headers.add(name: "Authorization", value: "Bearer t0k3n")
        let source = EventSource(url: URL(string: server.baseURL + "/events")!, configuration: fastConfiguration { $0.headers = headers })
        let events = try await collect(source, count: 2)
        source.close()
        #expect(events == [ServerSentEvent(type: "greet", data: "hello", lastEventId: "1"), ServerSentEvent(data: "a\nb", lastEventId: "1")])
        let request = try #require(server.requests(to: "/events").first)
        #expect(request.headers["accept"] == "text/event-stream")
        #expect(request.headers["cache-control"] == "no-cache")
        #expect(request.headers["authorization"] == "Bearer t0k3n")
        #expect(request.headers["last-event-id"] == nil)
    }

    @Test func reconnectsAfterTheStreamEndsAndReplaysFromLastEventID() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        server.route("/events") { request in
            let after = Int(request.headers["last-event-id"] ?? "0") ?? 0
            // Each connection sends two events, then ends the body cleanly.
            let body = "id: \(after + 1)\ndata: e\(after + 1)\n\nid: \(after + 2)\ndata: e\(after + 2)\n\n"
            return .init(headers: sseHeaders, body: .bytes(ByteBuffer(string: body)))
        }
        let source = EventSource(url: URL(string: server.baseURL + "/events")!, configuration: fastConfiguration())
        let events = try await collect(source, count: 6)
        source.close()
        #expect(events.map(\.data) == ["e1", "e2", "e3", "e4", "e5", "e6"])
        let lastIds = server.requests(to: "/events").prefix(3).map { $0.headers["last-event-id"] }
        #expect(lastIds == [nil, "2", "4"])
        #expect(source.lastEventId == "6")
    }

    @Test func theServersRetryFieldSetsTheReconnectionTime() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        server.route("/events") { _ in .init(headers: sseHeaders, body: .bytes(ByteBuffer(string: "retry: 2500\ndata: x\n\n"))) }
        let clock = ManualClock()
        // No idle watchdog: the backoff must be the only sleeper on the manual clock.
        let source = EventSource(
            url: URL(string: server.baseURL + "/events")!, configuration: fastConfiguration { $0.idleTimeout = nil },
            runtime: RealtimeRuntime(clock: clock))
        var iterator = source.events.makeAsyncIterator()
        _ = try await iterator.next()
        try await clock.waitForSleepers(1)
        #expect(clock.sleeps.last == .milliseconds(2500))
        #expect(source.reconnectionTime == .milliseconds(2500))
        #expect(source.connectionState.current == .reconnecting(attempt: 1))
        clock.advance(by: .milliseconds(2500))
        _ = try await iterator.next()
        #expect(server.requests(to: "/events").count == 2)
        source.close()
    }

    @Test func status204StopsForGood() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        server.route("/events") { _ in ScriptedResponse(status: 204) }
        let source = EventSource(url: URL(string: server.baseURL + "/events")!, configuration: fastConfiguration())
        let events = try await collect(source, count: 100)
        #expect(events.isEmpty)
        #expect(source.readyState == .closed)
        // "No second request" is an absence: sampled after a moment, not awaited.
        try await Task.sleep(for: .milliseconds(50))
        #expect(server.requests(to: "/events").count == 1)
    }

    /// A server restarting or busy, or a proxy that cannot reach it (a plain-http stream through
    /// an HTTP proxy gets the proxy's answer): retried by default, as Node's `eventsource` does.
    @Test(arguments: [500, 502, 503, 504])
    func aServerOrGatewayErrorIsRetried(status: Int) async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        let calls = NIOLockedValueBox(0)
        server.route("/events") { _ in
            calls.withLockedValue { $0 += 1; return $0 } < 3
                ? .text("not now", status: status) : .init(headers: sseHeaders, body: .bytes(ByteBuffer(string: "data: back\n\n")))
        }
        let source = EventSource(url: URL(string: server.baseURL + "/events")!, configuration: fastConfiguration())
        let events = try await collect(source, count: 1)
        source.close()
        #expect(events.map(\.data) == ["back"])
        #expect(calls.withLockedValue { $0 } == 3)
    }

    @Test(arguments: [501, 401, 404])
    func aBadStatusFailsWithoutRetrying(status: Int) async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        server.route("/events") { _ in .text("nope", status: status) }
        let source = EventSource(url: URL(string: server.baseURL + "/events?access_token=SECRET")!, configuration: fastConfiguration())
        let error = await #expect(throws: RealtimeError.self) { _ = try await collect(source, count: 1) }
        #expect(error?.code == .badStatus)
        #expect(error?.status?.code == UInt(status))
        #expect(error?.serverMessage == "nope")
        #expect(error.map { !$0.description.contains("SECRET") } == true)
        #expect(server.requests(to: "/events").count == 1)
        #expect(source.readyState == .closed)
    }

    @Test func theErrorHookCanRetryABadStatus() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        let calls = NIOLockedValueBox(0)
        server.route("/events") { _ in
            calls.withLockedValue { $0 += 1; return $0 } < 3
                ? .text("busy", status: 503) : .init(headers: sseHeaders, body: .bytes(ByteBuffer(string: "data: finally\n\n")))
        }
        let source = EventSource(
            url: URL(string: server.baseURL + "/events")!,
            configuration: fastConfiguration { $0.shouldRetry = { $0.status == .serviceUnavailable } })
        let events = try await collect(source, count: 1)
        source.close()
        #expect(events.map(\.data) == ["finally"])
        #expect(calls.withLockedValue { $0 } == 3)
    }

    @Test func aWrongContentTypeFails() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        server.route("/events") { _ in .text("data: x\n\n", contentType: "text/plain") }
        let source = EventSource(url: URL(string: server.baseURL + "/events")!, configuration: fastConfiguration())
        let error = await #expect(throws: RealtimeError.self) { _ = try await collect(source, count: 1) }
        #expect(error?.code == .badContentType)
        #expect(server.requests(to: "/events").count == 1)
    }

    @Test func contentTypeParametersAreAccepted() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        server.route("/events") { _ in .text("data: x\n\n", contentType: "Text/Event-Stream; charset=utf-8") }
        let source = EventSource(url: URL(string: server.baseURL + "/events")!, configuration: fastConfiguration())
        #expect(try await collect(source, count: 1).map(\.data) == ["x"])
        source.close()
    }

    @Test func redirectsAreFollowed() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        server.route("/old") { _ in ScriptedResponse(status: 307, headers: [("Location", "/new")]) }
        server.route("/new") { _ in .init(headers: sseHeaders, body: .bytes(ByteBuffer(string: "data: moved\n\n"))) }
        let source = EventSource(url: URL(string: server.baseURL + "/old")!, configuration: fastConfiguration())
        #expect(try await collect(source, count: 1).map(\.data) == ["moved"])
        source.close()
    }

    @Test func aStalledStreamIsReconnectedAfterTheIdleTimeout() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        let feeds = NIOLockedValueBox<[ChunkFeed]>([])
        server.route("/events") { _ in
            let feed = ChunkFeed()
            feed.send("data: connected\n\n")  // then nothing at all
            feeds.withLockedValue { $0.append(feed) }
            return .init(headers: sseHeaders, body: .feed(feed))
        }
        let source = EventSource(
            url: URL(string: server.baseURL + "/events")!, configuration: fastConfiguration { $0.idleTimeout = .milliseconds(150) })
        let events = try await collect(source, count: 2)
        source.close()
        #expect(events.map(\.data) == ["connected", "connected"])
        #expect(server.requests(to: "/events").count >= 2)
        for feed in feeds.withLockedValue({ $0 }) { feed.finish() }
    }

    @Test func postWithABodyAndCommentsExposed() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        server.route("/report") { request in
            .init(headers: sseHeaders, body: .bytes(ByteBuffer(string: ": hello \(request.method) \(String(buffer: request.body))\ndata: ok\n\n")))
        }
        let comments = NIOLockedValueBox<[String]>([])
        let source = EventSource(
            url: URL(string: server.baseURL + "/report")!,
            configuration: fastConfiguration {
                $0.method = .POST
                $0.body = ByteBuffer(string: "{\"q\":1}")
                $0.onComment = { text in comments.withLockedValue { $0.append(text) } }
            })
        #expect(try await collect(source, count: 1).map(\.data) == ["ok"])
        source.close()
        #expect(comments.withLockedValue { $0 } == ["hello POST {\"q\":1}"])
    }

    @Test func anOversizedEventEndsTheStreamWithATypedError() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        server.route("/events") { _ in
            .init(headers: sseHeaders, body: .bytes(ByteBuffer(string: "data: " + String(repeating: "x", count: 10_000) + "\n\n")))
        }
        let source = EventSource(url: URL(string: server.baseURL + "/events")!, configuration: fastConfiguration { $0.maxEventSize = 1024 })
        let error = await #expect(throws: RealtimeError.self) { _ = try await collect(source, count: 1) }
        #expect(error?.code == .messageTooLarge)
    }

    @Test func anInitialLastEventIdIsSentOnTheFirstRequest() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        server.route("/events") { request in
            .init(headers: sseHeaders, body: .bytes(ByteBuffer(string: "data: since \(request.headers["last-event-id"] ?? "-")\n\n")))
        }
        let source = EventSource(url: URL(string: server.baseURL + "/events")!, configuration: fastConfiguration { $0.lastEventId = "41" })
        #expect(try await collect(source, count: 1).map(\.data) == ["since 41"])
        source.close()
    }

    @Test func closeEndsTheSequenceAndStopsTheConnection() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        let feed = ChunkFeed()
        server.route("/events") { _ in .init(headers: sseHeaders, body: .feed(feed)) }
        feed.send("data: one\n\n")
        let source = EventSource(url: URL(string: server.baseURL + "/events")!, configuration: fastConfiguration())
        var iterator = source.events.makeAsyncIterator()
        #expect(try await iterator.next()?.data == "one")
        #expect(source.readyState == .open)
        source.close()
        #expect(try await iterator.next() == nil)
        #expect(source.readyState == .closed)
        feed.finish()
    }
}
