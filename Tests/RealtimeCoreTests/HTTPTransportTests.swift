import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
@testable import RealtimeCore
import RealtimeTesting
import Testing

@Suite(.timeLimit(.minutes(1))) struct HTTPTransportTests {
    @Test func streamsChunksAsTheServerSendsThem() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        let feed = ChunkFeed()
        server.route("/stream") { _ in ScriptedResponse(headers: [("Content-Type", "text/event-stream")], body: .feed(feed)) }
        let received = try await HTTPTransport.stream(HTTPRequestSpec(url: server.baseURL + "/stream")) { head, body in
            #expect(head.status == .ok)
            #expect(head.mediaType == "text/event-stream")
            var collected = ""
            var iterator = body.makeAsyncIterator()
            for chunk in ["first ", "second ", "third"] {
                feed.send(chunk)
                // Each chunk arrives before the next is even written.
                while !collected.hasSuffix(chunk), let next = try await iterator.next() { collected += String(buffer: next) }
            }
            feed.finish()
            while let next = try await iterator.next() { collected += String(buffer: next) }
            return collected
        }
        #expect(received == "first second third")
    }

    @Test func aSilentBodyFailsWithTheIdleTimeout() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        let feed = ChunkFeed()
        server.route("/stall") { _ in ScriptedResponse(body: .feed(feed)) }
        feed.send("one chunk then silence")
        let error = await #expect(throws: RealtimeError.self) {
            try await HTTPTransport.stream(HTTPRequestSpec(url: server.baseURL + "/stall", idleTimeout: .milliseconds(200))) { _, body in
                for try await _ in body {}
            }
        }
        #expect(error?.code == .timeout)
        feed.finish()
    }

    /// A server that sends the head and part of the body, then stalls: `execute` fails with
    /// `timeout` within its limit (async-http-client's own deadline stops at the head), on the real
    /// clock even when the runtime's clock is a manual one.
    @Test func executeLimitsTheWholeExchangeNotJustTheHead() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        let feed = ChunkFeed()
        server.route("/half") { _ in ScriptedResponse(body: .feed(feed)) }
        feed.send("the head and a first chunk, then nothing")
        let start = ContinuousClock.now
        let error = await #expect(throws: RealtimeError.self) {
            _ = try await HTTPTransport.execute(
                HTTPRequestSpec(url: server.baseURL + "/half", headTimeout: .milliseconds(300)), runtime: RealtimeRuntime(clock: ManualClock()))
        }
        #expect(error?.code == .timeout)
        #expect(ContinuousClock.now - start < .seconds(10))
        feed.finish()
    }

    @Test func executeLimitsTheBodySize() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        server.route("/big") { _ in .text(String(repeating: "x", count: 10_000)) }
        let error = await #expect(throws: RealtimeError.self) {
            _ = try await HTTPTransport.execute(HTTPRequestSpec(url: server.baseURL + "/big", maxBodySize: 1000))
        }
        #expect(error?.code == .messageTooLarge)
    }

    @Test func requestsCarryMethodHeadersAndBody() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        server.route("/echo") { request in .text("\(request.method) \(request.headers["x-token"] ?? "") \(String(buffer: request.body))") }
        let (_, body) = try await HTTPTransport.execute(
            HTTPRequestSpec(url: server.baseURL + "/echo", method: .POST, headers: ["X-Token": "t1"], body: ByteBuffer(string: "payload")))
        #expect(String(buffer: body) == "POST t1 payload")
    }

    @Test func longPollerKeepsOneGetInFlightAndDeliversPushedMessages() async throws {
        let server = try await LongPollServer.start(holdTime: .milliseconds(300))
        defer { Task { await server.stop() } }
        let received = NIOLockedValueBox<[String]>([])
        let poller = LongPoller(
            makeRequest: { HTTPRequestSpec(url: server.url) },
            handleResponse: { head, body in
                guard head.status == .ok else { throw RealtimeError.badStatus(head.status, url: server.url) }
                let lines = String(buffer: body).split(separator: "\n").map(String.init)
                let total = received.withLockedValue { $0.append(contentsOf: lines); return $0.count }
                return total >= 3 ? .stop : .next
            })
        server.push("a")
        let polling = Task { try await poller.run() }
        try await waitUntil("the first poll was answered") { !received.withLockedValue { $0 }.isEmpty }
        server.push("b")
        server.push("c")
        try await polling.value
        #expect(received.withLockedValue { $0 } == ["a", "b", "c"])
        // Polls never overlapped: the server saw them one after another.
        #expect(server.http.requests(to: "/poll").allSatisfy { $0.method == "GET" })
    }

    @Test func longPollerStopsWithTheProtocolsError() async throws {
        let server = try await LongPollServer.start()
        defer { Task { await server.stop() } }
        let poller = LongPoller(
            makeRequest: { HTTPRequestSpec(url: server.url + "?fail=1") },
            handleResponse: { head, _ in
                guard head.status == .ok else { throw RealtimeError.badStatus(head.status, url: server.url) }
                return .next
            })
        let error = await #expect(throws: RealtimeError.self) { try await poller.run() }
        #expect(error?.status == .internalServerError)
    }

    /// A poll that cannot connect: before any poll was answered, the connect failure it is; after,
    /// the open session lost (the server or a relay went away between two polls).
    @Test(arguments: [(0, RealtimeError.Code.connectFailed, RealtimeError.Stage.connect), (1, .connectionClosed, .established), (3, .connectionClosed, .established)])
    func aPollThatCannotConnect(answeredBefore: Int, code: RealtimeError.Code, stage: RealtimeError.Stage) async throws {
        let polls = NIOLockedValueBox(0)
        let poller = LongPoller(
            makeRequest: { HTTPRequestSpec(url: "http://127.0.0.1:9/poll") },
            execute: { _ in
                let index = polls.withLockedValue { count in
                    defer { count += 1 }
                    return count
                }
                guard index < answeredBefore else {
                    throw RealtimeError(.connectFailed, "could not connect to 127.0.0.1:9", stage: .connect)
                }
                return (head: RealtimeCore.HTTPResponseHead(status: .ok, headers: [:], url: "http://127.0.0.1:9/poll"), body: ByteBuffer())
            },
            handleResponse: { _, _ in .next })
        let error = await #expect(throws: RealtimeError.self) { try await poller.run() }
        #expect(error?.code == code)
        #expect(error?.stage == stage)
        if answeredBefore > 0 { #expect((error?.underlying as? RealtimeError)?.code == .connectFailed) }
    }

    /// Streams hold their connection; when a configured pool limit is reached, the next request
    /// fails with a typed error after the connect timeout instead of waiting forever.
    @Test func aFullPoolFailsTheWaitingRequestWithATypedError() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        let feed = ChunkFeed()
        server.route("/hold") { _ in ScriptedResponse(headers: [("Content-Type", "text/event-stream")], body: .feed(feed)) }
        server.route("/hello") { _ in .text("hi") }
        // 5 s: enough to open the holders on two busy cores, short enough to wait for the pool.
        let runtime = RealtimeRuntime(http: HTTPConnectionOptions(maxConnectionsPerHost: 2, connectTimeout: .seconds(5)))
        // Each holder in a task of its own: a holder that fails (its connect timed out) must not
        // leave the test waiting on the other one (a group would wait for the open stream).
        let opened = NIOLockedValueBox((count: 0, failures: [String]()))
        let holders = (0..<2).map { _ in
            Task {
                do {
                    try await HTTPTransport.stream(HTTPRequestSpec(url: server.baseURL + "/hold"), runtime: runtime) { _, body in
                        opened.withLockedValue { $0.count += 1 }
                        for try await _ in body {}
                    }
                } catch {
                    opened.withLockedValue { $0.failures.append(String(describing: error)) }
                }
            }
        }
        defer { for holder in holders { holder.cancel() } }
        try await waitUntil("both holding streams opened or one failed") {
            opened.withLockedValue { $0.count == 2 || !$0.failures.isEmpty }
        }
        if let failure = opened.withLockedValue({ $0.failures.first }) {
            Issue.record("a holding stream failed to open: \(failure)")
            return
        }
        let error = await #expect(throws: RealtimeError.self) {
            _ = try await HTTPTransport.execute(HTTPRequestSpec(url: server.baseURL + "/hello"), runtime: runtime)
        }
        #expect(error?.code == .timeout, "\(String(describing: error))")
        #expect(server.requests(to: "/hello").isEmpty)
        // The default runtime's pool is not that small.
        let (head, _) = try await HTTPTransport.execute(HTTPRequestSpec(url: server.baseURL + "/hello"))
        #expect(head.status == .ok)
    }
}
