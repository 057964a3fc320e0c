import EventSourceClient
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import RealtimeCore
import RealtimeTesting
import Testing

/// The delivery and memory promises of Sources/EventSourceClient/EventSourceClient.docc/EventSourceGuide.md, each with the fault that would break it:
/// a consumer that stops reading, an app that never iterates, a dropped connection, a silent server.
@Suite(.serialized, .timeLimit(.minutes(2)))
struct EventSourceDeliveryTests {
    /// The server writes 1,000 events of 64 KiB as fast as it can (64 MiB); the consumer takes one
    /// and stops. Measured at a FaultProxy between them: what crossed stays a few MiB (socket
    /// buffers, the proxy's 1 MiB, the 16-event buffer). While it is stopped the runtime's clock
    /// moves on by twice the idle timeout: the pause does not count as the server being silent.
    /// Then everything arrives, in order, on the same connection. The idle timeout runs on a manual
    /// clock, so a loaded machine cannot stretch a real gap past it.
    @Test func aSlowConsumerStopsTheReadingNotTheMemory() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        let payload = String(repeating: "x", count: 64 * 1024 - 8)
        let event = ByteBuffer(string: "data: \(payload)\n\n")
        server.route("/events") { _ in
            let feed = ChunkFeed()
            for _ in 0..<1_000 { feed.send(event) }  // one storage, shared
            feed.finish()
            return .init(headers: sseHeaders, body: .feed(feed))
        }
        let proxy = try await FaultProxy.start(targetPort: server.port)
        defer { Task { await proxy.stop() } }
        let clock = ManualClock()
        let source = EventSource(
            url: URL(string: proxy.url() + "/events")!, configuration: fastConfiguration { $0.idleTimeout = .seconds(3) },
            runtime: RealtimeRuntime(clock: clock))
        var iterator = source.updates.makeAsyncIterator()
        guard case .open? = try await iterator.next(), case .event? = try await iterator.next() else {
            Issue.record("expected open, then an event")
            return
        }
        // Reading pauses once the consumer is 16 events behind; then the bytes stop once the
        // buffers between server and client are full. "Nothing more came" has no event: the count
        // is sampled until it stops moving (a stream that kept reading would grow past the bound).
        try await waitUntil("the stream paused its reading", limit: .seconds(20)) { source.isReadingPaused }
        var crossed = proxy.statistics.bytesToClient
        var unchangedFor = 0
        let start = ContinuousClock.now
        while unchangedFor < 5, ContinuousClock.now - start < .seconds(20) {
            try await Task.sleep(for: .milliseconds(100))  // sampling an absence (see above)
            let now = proxy.statistics.bytesToClient
            unchangedFor = now == crossed ? unchangedFor + 1 : 0
            crossed = now
        }
        #expect(crossed < 16 << 20, "\(crossed) bytes crossed while the consumer stopped")
        #expect(source.isReadingPaused)
        // Twice the idle timeout passes on the runtime's clock while the consumer is stopped; the
        // idle check runs, finds the stream paused and looks again one timeout later.
        let sleepsBefore = clock.sleeps.count
        clock.advance(by: .seconds(6))
        try await waitUntil { clock.sleeps.count > sleepsBefore }
        #expect(clock.sleeps.last == .seconds(3), "the paused stream's idle check looks again 3 s later: \(clock.sleeps)")
        var events = 1
        var opens = 1
        while let update = try await iterator.next() {
            switch update {
            case .event(let event):
                #expect(event.data == payload)
                events += 1
            case .open: opens += 1
            case .failure(let error, _):
                if error.code == .connectionClosed { break }  // the body ended: the server sent everything
                Issue.record("unexpected failure \(error)")
            case .comment: break
            }
            if events == 1_000 { break }
        }
        source.close()
        #expect(events == 1_000)
        #expect(opens == 1, "one connection: the pause did not trip the idle timeout")
        print("aSlowConsumerStopsTheReadingNotTheMemory: \(crossed) bytes crossed the proxy during the pause (of 65,536,000)")
    }

    /// An app that uses only callbacks keeps no events: 256 events of 256 KiB (64 MiB) go
    /// through each of two sources, no update is ever buffered for a sequence, and the process
    /// grows by less than the events would take.
    @Test func callbacksAloneBufferNothing() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        let event = ByteBuffer(string: "data: \(String(repeating: "y", count: 256 * 1024 - 8))\n\n")
        server.route("/events") { _ in
            let feed = ChunkFeed()
            for _ in 0..<256 { feed.send(event) }
            feed.send("data: end\n\n")
            feed.finish()
            return .init(headers: sseHeaders, body: .feed(feed))
        }
        let before = residentBytes()
        let ends = Recorder<Int>()
        var sources: [EventSource] = []
        for _ in 0..<2 {
            let source = EventSource(url: URL(string: server.baseURL + "/events")!, configuration: fastConfiguration())
            let count = NIOLockedValueBox(0)
            // The callback hook the IKEventSource module builds on, and nothing reading the events.
            source.observe { observation in
                guard case .event(let event) = observation else { return }
                let seen = count.withLockedValue { $0 += 1; return $0 }
                // The first end only: a fast source may reconnect and start the stream again.
                if event.data == "end", seen == 257 { ends.append(seen) }
            }
            source.startConnecting()
            sources.append(source)
        }
        // Sampled while the events flow: a source that buffered for a sequence nobody reads would
        // hold its events for the rest of the run.
        let sampled = sources
        let sampler = Task {
            var most = 0
            while !Task.isCancelled {
                most = max(most, sampled.map(\.bufferedUpdates).max() ?? 0)
                // A sampling period: there is no event for "an update was buffered" to await.
                try? await Task.sleep(for: .milliseconds(1))
            }
            return most
        }
        let seen = await ends.wait(for: 2, limit: .seconds(120))
        let growth = residentBytes() - before
        sampler.cancel()
        let mostBuffered = await sampler.value
        for source in sources { source.close() }
        #expect(seen == [257, 257])
        #expect(mostBuffered == 0, "\(mostBuffered) updates were buffered with no sequence reading them")
        // Buffered, the events would take 128 MiB. The process's size is a coarse second check:
        // the tests running beside this one move it by tens of MiB (42 MiB in one loaded run).
        #expect(growth < 96 << 20, "the process grew by \(growth >> 20) MiB for 128 MiB of events")
        print("callbacksAloneBufferNothing: resident size grew by \(growth >> 20) MiB")
    }

    /// A consumer that broke out of its loop holds nothing back: with no iterator left, nothing is
    /// buffered for the sequence, the stream reads on and the callbacks go on; a later iterator
    /// starts with what arrives after it. (Before, the source kept buffering for the sequence after
    /// its last iterator was gone, and once `bufferSize` events waited it stopped reading for good.)
    @Test func aConsumerThatLeftDoesNotStallTheStream() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        let feed = ChunkFeed()
        server.route("/events") { _ in .init(headers: sseHeaders, body: .feed(feed)) }
        let source = EventSource(url: URL(string: server.baseURL + "/events")!, configuration: fastConfiguration { $0.bufferSize = 4 })
        defer { source.close() }
        let messages = Recorder<String>()
        source.observe { observation in
            if case .event(let event) = observation { messages.append(event.data) }
        }
        feed.send("data: first\n\n")
        for try await event in source.events {
            #expect(event.data == "first")
            break
        }
        for index in 0..<40 { feed.send("data: e\(index)\n\n") }
        feed.send("data: end\n\n")
        let seen = await messages.wait(for: 42)
        #expect(seen.count == 42, "the callbacks got \(seen.count) of 42 events: the stream stalled")
        #expect(seen.last == "end")
        #expect(!source.isReadingPaused)
        // Callbacks run before a read's events are handed over: once the callback of an event sent
        // later has run, the read that carried `end` has been handed over (to nobody).
        feed.send("data: sync\n\n")
        _ = await messages.wait(for: 43)
        var iterator = source.events.makeAsyncIterator()
        feed.send("data: after\n\n")
        var received: [String] = []
        while let event = try await iterator.next() {
            received.append(event.data)
            if event.data == "after" { break }
        }
        #expect(Set(received).isSubset(of: ["sync", "after"]), "a new iterator gets nothing that was let go: \(received)")
    }

    @Test func commentsAndEventsComeInStreamOrder() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        var body = ""
        for index in 0..<200 { body += "data: e\(index)\n\n: c\(index)\n" }
        let text = body
        server.route("/events") { _ in .init(headers: sseHeaders, body: .bytes(ByteBuffer(string: text))) }
        let source = EventSource(url: URL(string: server.baseURL + "/events")!, configuration: fastConfiguration { $0.includeComments = true })
        var seen: [String] = []
        for try await update in source.updates {
            switch update {
            case .event(let event): seen.append(event.data)
            case .comment(let comment): seen.append(comment)
            case .open, .failure: break
            }
            if seen.count == 400 { break }
        }
        source.close()
        #expect(seen == (0..<200).flatMap { ["e\($0)", "c\($0)"] })
    }

    /// A drop through the proxy and a final bad status: each failure comes once, with its error and
    /// whether it is retried, and `shouldRetry` is asked once per failure.
    @Test func everyFailureIsReportedOnceWithItsError() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        let connections = NIOLockedValueBox(0)
        let feeds = NIOLockedValueBox<[ChunkFeed]>([])
        server.route("/events") { _ in
            let number = connections.withLockedValue { $0 += 1; return $0 }
            if number == 2 { return .text("gone", status: 404) }
            let feed = ChunkFeed()
            feed.send("id: \(number)\ndata: hello\n\n")
            feeds.withLockedValue { $0.append(feed) }
            return .init(headers: sseHeaders, body: .feed(feed))
        }
        let proxy = try await FaultProxy.start(targetPort: server.port)
        defer { Task { await proxy.stop() } }
        let asked = NIOLockedValueBox<[RealtimeError.Code]>([])
        let source = EventSource(url: URL(string: proxy.url() + "/events")!, configuration: fastConfiguration {
            $0.shouldRetry = { error in
                asked.withLockedValue { $0.append(error.code) }
                return EventSourceConfiguration.defaultShouldRetry(error)
            }
        })
        var log: [String] = []
        for try await update in source.updates {
            switch update {
            case .open: log.append("open")
            case .event(let event):
                log.append("event \(event.id)")
                proxy.cutAll(.reset)
            case .failure(let error, let willRetry): log.append("failure \(error.code) \(willRetry)")
            case .comment: break
            }
        }
        #expect(log == ["open", "event 1", "failure connectionClosed true", "failure badStatus false"])
        #expect(asked.withLockedValue { $0 } == [.connectionClosed, .badStatus])
        #expect(source.readyState == .closed)
        for feed in feeds.withLockedValue({ $0 }) { feed.finish() }
    }

    /// A read timeout is retried and reported; the timeout fires at the last byte + idleTimeout.
    @Test func theIdleTimeoutCountsFromTheLastByte() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        let feed = ChunkFeed()
        feed.send("data: a\n\n")
        server.route("/events") { _ in .init(headers: sseHeaders, body: .feed(feed)) }
        let clock = ManualClock()
        let source = EventSource(
            url: URL(string: server.baseURL + "/events")!,
            configuration: fastConfiguration { $0.idleTimeout = .seconds(1) },
            runtime: RealtimeRuntime(clock: clock))
        var iterator = source.updates.makeAsyncIterator()
        _ = try await iterator.next()  // open
        _ = try await iterator.next()  // a
        try await clock.waitForSleepers(1)
        clock.advance(by: .milliseconds(600))
        feed.send("data: b\n\n")
        guard case .event(let b)? = try await iterator.next() else { throw TestFailure("expected b") }
        #expect(b.data == "b")
        clock.advance(by: .milliseconds(400))  // t = 1 s: the first deadline, but a byte came at 0.6 s
        try await waitUntil { clock.sleeps.count >= 2 }
        #expect(clock.sleeps.prefix(2) == [.seconds(1), .milliseconds(600)], "the watchdog sleeps until exactly 0.6 s + 1 s")
        clock.advance(by: .milliseconds(600))
        guard case .failure(let error, let willRetry)? = try await iterator.next() else { throw TestFailure("expected the timeout") }
        #expect(error.code == .timeout)
        #expect(willRetry)
        source.close()
        feed.finish()
    }

    /// close() while a reconnect attempt is under way (its request stalled in the network) ends
    /// the attempt too: when the network comes back nothing opens, and no connection outlives the
    /// pool's idle timeout. (HTTPConnectionOptions.idleTimeout: a connection whose set-up was
    /// under way when its request was cancelled stays in the pool unused for that long; a loaded
    /// machine can delay the request's hand-off to the new connection past close(), which a full
    /// run saw twice with the default 60 s.)
    @Test func closeDuringAnAttemptEndsTheAttempt() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        server.route("/events") { _ in
            let feed = ChunkFeed()
            feed.send("data: hello\n\n")
            return .init(headers: sseHeaders, body: .feed(feed))
        }
        let proxy = try await FaultProxy.start(targetPort: server.port)
        defer { Task { await proxy.stop() } }
        let idleTimeout = Duration.seconds(2)
        let runtime = RealtimeRuntime(http: HTTPConnectionOptions(idleTimeout: idleTimeout))
        let source = EventSource(url: URL(string: proxy.url() + "/events")!, configuration: fastConfiguration(), runtime: runtime)
        let opens = NIOLockedValueBox(0)
        source.observe { observation in
            if case .open = observation { opens.withLockedValue { $0 += 1 } }
        }
        var iterator = source.events.makeAsyncIterator()
        #expect(try await iterator.next()?.data == "hello")
        // Everything through the proxy stalls, the stream is cut: the next attempt's request hangs.
        try await proxy.cutAndStallTheNextAttempt()
        source.close()
        #expect(try await iterator.next() == nil, "the events end with close()")
        proxy.resume()
        // An answer let through after close() would open the stream within this moment; its
        // absence is sampled.
        try await Task.sleep(for: .milliseconds(500))
        #expect(opens.withLockedValue { $0 } == 1)
        #expect(source.readyState == .closed)
        // The attempt's connection is closed by its cancelled request, or, when the request was
        // cancelled before it reached the connection, by the pool after idleTimeout. Waited for with
        // a margin for a loaded machine: a connection never closed fails here.
        try await waitUntil("the attempt's connection was closed within the pool's idle timeout", limit: idleTimeout + .seconds(10)) {
            proxy.statistics.connectionsOpen == 0
        }
        #expect(opens.withLockedValue { $0 } == 1)
    }

    @Test func restartReconnectsAtOnceWithTheLastEventID() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        let feeds = NIOLockedValueBox<[ChunkFeed]>([])
        server.route("/events") { request in
            let feed = ChunkFeed()
            let after = Int(request.headers["last-event-id"] ?? "0") ?? 0
            feed.send("id: \(after + 1)\ndata: e\(after + 1)\n\n")
            feeds.withLockedValue { $0.append(feed) }
            return .init(headers: sseHeaders, body: .feed(feed))
        }
        // An hour between attempts: only restart() can bring the second connection in time.
        let source = EventSource(url: URL(string: server.baseURL + "/events")!, configuration: fastConfiguration {
            $0.reconnectionTime = .seconds(3600)
        })
        var seen: [String] = []
        for try await event in source.events {
            seen.append(event.data)
            if seen.count == 1 { source.restart() }
            if seen.count == 2 { break }
        }
        source.close()
        #expect(seen == ["e1", "e2"])
        #expect(server.requests(to: "/events").map { $0.headers["last-event-id"] } == [nil, "1"])
        for feed in feeds.withLockedValue({ $0 }) { feed.finish() }
    }

    @Test func a14MBEventPassesByDefaultAndTheLimitErrorNamesTheOption() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        let big = String(repeating: "z", count: 14_000_000)
        server.route("/big") { _ in .init(headers: sseHeaders, body: .bytes(ByteBuffer(string: "data: \(big)\n\n"))) }
        let source = EventSource(url: URL(string: server.baseURL + "/big")!, configuration: fastConfiguration())
        let events = try await collect(source, count: 1)
        source.close()
        #expect(events.first?.data.utf8.count == 14_000_000)

        let limited = EventSource(url: URL(string: server.baseURL + "/big")!, configuration: fastConfiguration { $0.maxEventSize = 1 << 20 })
        let error = await #expect(throws: RealtimeError.self) { _ = try await collect(limited, count: 1) }
        #expect(error?.code == .messageTooLarge)
        #expect(error?.description.contains("EventSourceConfiguration.maxEventSize") == true)
    }
}

struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}


/// The process's resident set size, from /proc/self/statm.
func residentBytes() -> Int {
    guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
    let fields = text.split(separator: " ")
    return (fields.count > 1 ? Int(fields[1]) ?? 0 : 0) * 4096
}

