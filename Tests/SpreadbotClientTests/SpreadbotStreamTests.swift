import Foundation
import RealtimeTesting
import SpreadbotClient
import Testing

/// The stream: the transport fallback chain, sends over each transport, messages in, states.
@Suite(.timeLimit(.minutes(3)))
struct SpreadbotStreamTests {
    /// Each refusal forces the next transport; the refused attempts are visible in the server's log
    /// and the transport in use is observable.
    @Test(arguments: [
        (refuseWebSocket: false, refuseEventStream: false, expected: SpreadbotTransport.webSocket),
        (refuseWebSocket: true, refuseEventStream: false, expected: .serverSentEvents),
        (refuseWebSocket: true, refuseEventStream: true, expected: .polling),
    ])
    func fallbackChain(refuseWebSocket: Bool, refuseEventStream: Bool, expected: SpreadbotTransport) async throws {
        let server = try await SpreadbotTestServer.start()
        defer { Task { await server.stop() } }
        server.refuseWebSocket(refuseWebSocket)
        server.refuseEventStream(refuseEventStream)
        let client = Spreadbot(configuration: spreadbotConfiguration(server))
        let recorder = Recorder(client)
        let transports = Task {
            var seen: [SpreadbotTransport?] = []
            for await transport in client.transportUpdates() {
                seen.append(transport)
                if seen.count == 2 { break }
            }
            return seen
        }
        client.establishConnection(path: "prices")
        await eventually("connected") { client.state == .connected }
        #expect(client.transport == expected, "errors: \(recorder.errors)")
        #expect(await transports.value == [nil, expected])
        // The state says connected just before the open handlers run, on the opening thread: a
        // repeat run beside two CPU-burning loops read `opens` in between and saw 0.
        await eventually("the open handler ran") { recorder.opens >= 1 }
        #expect(recorder.opens == 1)

        server.publish("one", to: "prices")
        server.publish("two\nlines", to: "prices")
        await eventually("two messages") { recorder.messages.count >= 2 }
        #expect(recorder.messages.map(\.id) == ["1", "2"])
        #expect(recorder.messages.map(\.event) == ["/prices", "/prices"])
        #expect(recorder.texts == ["one", "two\nlines"])

        // send returns once written (WebSocket) or answered (POST); the server records on arrival.
        try await client.send("hello over \(expected)")
        try await client.send(Data([0, 1, 2, 255]))
        await eventually("both sends arrived") { server.received(on: "prices").count == 2 }
        #expect(server.received(on: "prices") == [.text("hello over \(expected)"), .binary([0, 1, 2, 255])])

        let log = server.requestLog
        #expect(log.contains("GET /prices ws 400") == refuseWebSocket)
        #expect(log.contains("GET /prices sse 406") == refuseEventStream)
        if expected == .polling {
            #expect(log.contains("GET /prices poll"))
            #expect(log.contains("POST /prices"))
        }
        // A refused transport is reported, not hidden.
        #expect(recorder.errors.count == (refuseWebSocket ? 1 : 0) + (refuseEventStream ? 1 : 0))
        client.closeConnection()
        #expect(client.state == .disconnected)
        #expect(client.transport == nil)
    }

    /// Binary frames from the server arrive as binary data for the path (WebSocket only).
    @Test func binaryFromTheServer() async throws {
        let server = try await SpreadbotTestServer.start()
        defer { Task { await server.stop() } }
        let client = Spreadbot(configuration: spreadbotConfiguration(server))
        let recorder = Recorder(client)
        client.establishConnection(path: "/files")
        await eventually("connected") { client.state == .connected }
        server.publish(bytes: [9, 8, 7], to: "files")
        await eventually("a message") { !recorder.messages.isEmpty }
        #expect(recorder.messages.first?.data == .binary(Data([9, 8, 7])))
        #expect(recorder.messages.first?.event == "/files")
        client.closeConnection()
    }

    /// SSE reconnects with Last-Event-ID and polling asks `since` the last id: nothing published
    /// while the client was away is missed, nothing is repeated.
    @Test(arguments: [SpreadbotTransport.serverSentEvents, .polling])
    func resumesAfterTheLastId(transport: SpreadbotTransport) async throws {
        let server = try await SpreadbotTestServer.start()
        defer { Task { await server.stop() } }
        var configuration = spreadbotConfiguration(server)
        configuration.transports = [transport]
        let client = Spreadbot(configuration: configuration)
        let recorder = Recorder(client)
        client.establishConnection(path: "feed")
        await eventually("connected") { client.state == .connected }
        server.publish("a", to: "feed")
        await eventually("a") { recorder.texts == ["a"] }
        server.dropStreams()
        server.refuseEventStream(true)  // keeps an SSE client away while b is published
        if transport == .serverSentEvents { await eventually("dropped") { client.state == .connecting } }
        server.publish("b", to: "feed")
        server.refuseEventStream(false)
        await eventually("b") { recorder.texts == ["a", "b"] }
        server.publish("c", to: "feed")
        await eventually("c") { recorder.texts == ["a", "b", "c"] }
        #expect(recorder.messages.map(\.id) == ["1", "2", "3"])
        client.closeConnection()
    }

    /// `messages()` delivers in order, and a consumer that stops reading stops the stream from
    /// reading (the buffer stays at its capacity) instead of growing.
    @Test func messagesSequenceIsBounded() async throws {
        let server = try await SpreadbotTestServer.start()
        defer { Task { await server.stop() } }
        var configuration = spreadbotConfiguration(server)
        configuration.messageBufferCapacity = 4
        let client = Spreadbot(configuration: configuration)
        let recorder = Recorder(client)
        let iterator = client.messages().makeAsyncIterator()
        client.establishConnection(path: "burst")
        await eventually("connected") { client.state == .connected }
        for index in 1...50 { server.publish("m\(index)", to: "burst") }
        // The callback sees what the stream read: the buffer's 4; then reading stops.
        await eventually("buffer full") { recorder.messages.count >= 4 }
        // Nothing to await for "nothing more happens": give the stream time it would use to read on.
        try await Task.sleep(for: .milliseconds(300))
        #expect(recorder.messages.count == 4, "the stream kept reading past a full buffer")
        // Read with a deadline: a lost message must fail the test, not hang it.
        let reader = Task { [iterator] in
            var iterator = iterator
            var read: [String] = []
            while read.count < 50, let message = try await iterator.next() { read.append(message.data.string ?? "") }
            return (read, iterator)
        }
        let deadline = Task {
            try await Task.sleep(for: .seconds(30))  // the deadline itself
            reader.cancel()
        }
        let (read, rest) = try await reader.value
        deadline.cancel()
        #expect(read == (1...50).map { "m\($0)" })
        client.closeConnection()
        var end = rest
        #expect(try await end.next() == nil)
    }

    /// Malformed envelopes are reported as typed errors and skipped; the stream goes on.
    @Test func malformedEnvelopeIsReportedAndSkipped() async throws {
        let server = try await SpreadbotTestServer.start()
        defer { Task { await server.stop() } }
        let client = Spreadbot(configuration: spreadbotConfiguration(server))
        let recorder = Recorder(client)
        client.establishConnection(path: "bad")
        await eventually("connected") { client.state == .connected }
        server.publishRaw("not json", to: "bad")
        server.publishRaw("[1,2]", to: "bad")
        // An object, but not an envelope: none of id, event, data (it was delivered as an empty message).
        server.publishRaw(#"{"type":"subscribe_ack","channel":"bad"}"#, to: "bad")
        server.publish("fine", to: "bad")
        await eventually("the good message") { recorder.texts == ["fine"] }
        #expect(recorder.messages.count == 1)
        #expect(recorder.errors.count == 3)
        #expect(recorder.errors.allSatisfy { $0.contains("protocolViolation") })
        #expect(client.state == .connected)
        client.closeConnection()
    }
}

/// Bad input that ends the stream with a typed error instead of a loop or a hang.
@Suite(.timeLimit(.minutes(2)))
struct SpreadbotBadInputTests {
    /// A message over maxMessageSize on any transport: `messageTooLarge`, and the stream stops
    /// (SSE would get it again after Last-Event-ID, polling after `since`: a reconnect would loop).
    @Test(arguments: SpreadbotTransport.allCases)
    func oversizedMessageStopsWithATypedError(transport: SpreadbotTransport) async throws {
        let server = try await SpreadbotTestServer.start()
        defer { Task { await server.stop() } }
        var configuration = spreadbotConfiguration(server)
        configuration.transports = [transport]
        configuration.maxMessageSize = 1_024
        let client = Spreadbot(configuration: configuration)
        let recorder = Recorder(client)
        client.establishConnection(path: "big")
        await eventually("connected") { client.state == .connected }
        server.publish("small", to: "big")
        await eventually("the small one") { recorder.texts == ["small"] }  // (a poll body holding both would be too large as a whole)
        server.publish(String(repeating: "x", count: 4_096), to: "big")
        await client.waitUntilClosed()
        #expect(recorder.texts == ["small"])
        #expect(client.state == .disconnected)
        #expect(client.lastError?.code == .messageTooLarge, "\(String(describing: client.lastError))")
        #expect(recorder.opens == 1)
    }

    /// A base URL that is not http(s): `invalidURL` at once, from every transport, no retries.
    @Test func invalidBaseURL() async throws {
        var configuration = SpreadbotConfiguration(baseURL: "ftp://example.com", accessToken: "t")
        configuration.reachability = AlwaysReachable()
        let client = Spreadbot(configuration: configuration)
        let recorder = Recorder(client)
        client.establishConnection(path: "x")
        await client.waitUntilClosed()
        #expect(client.lastError?.code == .invalidURL)
        #expect(recorder.errors.count == 3)
        let error = await #expect(throws: RealtimeError.self) { try await client.rest.getData(path: "x") }
        #expect(error?.code == .invalidURL)
    }
}

/// What is published while a WebSocket is down arrives after the reconnect: it asks for
/// `?since=<last id>`, as polling does and as SSE does with Last-Event-ID.
@Suite(.timeLimit(.minutes(1))) struct SpreadbotWebSocketResumeTests {
    @Test func theReconnectAsksForWhatItMissed() async throws {
        let server = try await SpreadbotTestServer.start()
        defer { Task { await server.stop() } }
        var configuration = spreadbotConfiguration(server)
        configuration.transports = [.webSocket]
        let client = Spreadbot(configuration: configuration)
        let recorder = Recorder(client)
        client.establishConnection(path: "ticker")
        await eventually("connected") { client.state == .connected }
        server.publish("one", to: "ticker")
        await eventually("one") { recorder.texts == ["one"] }
        // The next upgrade waits unanswered while two messages are published, then proceeds.
        server.stall()
        server.dropStreams()
        await eventually("reconnecting") { client.state != .connected }
        await eventually("the reconnect's upgrade reached the server") {
            server.requestLog.filter { $0.hasPrefix("GET /ticker ws") }.count >= 1 && client.state == .connecting
        }
        server.publish("two", to: "ticker")
        server.publish("three", to: "ticker")
        server.resume()
        await eventually("two and three") { recorder.texts == ["one", "two", "three"] }
        #expect(recorder.messages.map(\.id) == ["1", "2", "3"])
        client.closeConnection()
    }
}
