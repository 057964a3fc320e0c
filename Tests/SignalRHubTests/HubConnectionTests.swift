import Foundation
import NIOConcurrencyHelpers
import RealtimeCore
import RealtimeTesting
import SignalRHub
import Testing

@Suite("HubConnection against the in-process SignalR server", .serialized, .timeLimit(.minutes(3)))
struct HubConnectionTests {
    static func connect(
        _ server: SignalRTestServer, _ kind: HubProtocolType, _ transport: HttpTransportType = .webSockets,
        configure: (inout HubConnectionOptions) -> Void = { _ in }
    ) -> HubConnection {
        HubConnectionBuilder().withUrl(url: server.url, transport: transport).withHubProtocol(hubProtocol: kind).withOptions(configure).build()
    }

    /// Every transport with every protocol it can carry (MessagePack is binary: not over SSE).
    static let combinations: [(HttpTransportType, HubProtocolType)] = [
        (.webSockets, .json), (.webSockets, .messagePack), (.serverSentEvents, .json), (.longPolling, .json), (.longPolling, .messagePack),
    ]

    @Test("invoke, send, on and stream work on every transport with both hub protocols", arguments: combinations)
    func basicExchange(_ transport: HttpTransportType, _ kind: HubProtocolType) async throws {
        let server = try await SignalRTestServer.start()
        defer { Task { await server.stop() } }
        let connection = Self.connect(server, kind, transport)
        let received = Recorder<String>()
        connection.on("receive") { (user: String, count: Int) in received.append("\(user):\(count)") }
        try await connection.start()
        #expect(connection.currentState == .connected)
        #expect(connection.connectionId != nil)
        #expect(connection.transport == transport)
        #expect(server.transportsUsed == [transport.negotiateName])

        let echoed: String = try await connection.invoke(method: "echo", arguments: "héllo")
        #expect(echoed == "héllo")
        let sum: Int = try await connection.invoke(method: "add", arguments: 2, 40)
        #expect(sum == 42)
        try await connection.invoke(method: "void")
        let bytes: Data = try await connection.invoke(method: "echo", arguments: Data([0, 1, 2, 255]))
        #expect(bytes == Data([0, 1, 2, 255]))
        await #expect(throws: HubInvocationError.self) { try await connection.invoke(method: "fail", arguments: "nope") }
        await #expect(throws: HubInvocationError.self) { try await connection.invoke(method: "noSuchMethod") }

        try await connection.send(method: "broadcast", arguments: "ann", 7)
        #expect(try await received.wait(count: 1) == ["ann:7"])

        let stream: any StreamResult<Int> = try await connection.stream(method: "countTo", arguments: 5)
        var items: [Int] = []
        for try await item in stream.stream { items.append(item) }
        #expect(items == [1, 2, 3, 4, 5])

        await connection.stop()
        #expect(connection.currentState == .stopped)
        await #expect(throws: RealtimeError.self) { try await connection.invoke(method: "void") }
    }

    /// stop() returns once the connection's end is handled: a slow onClosed handler has finished,
    /// so nothing of the connection runs after stop() (it used to poll the state, which changes
    /// before the handlers run).
    @Test("stop() returns after onClosed has run, on every transport", arguments: [HttpTransportType.webSockets, .serverSentEvents, .longPolling])
    func stopWaitsForOnClosed(_ transport: HttpTransportType) async throws {
        let server = try await SignalRTestServer.start()
        defer { Task { await server.stop() } }
        let connection = Self.connect(server, .json, transport)
        let events = Recorder<String>()
        connection.onClosed { error in
            // A slow handler: stop() must wait for it (the behaviour under test).
            try? await Task.sleep(for: .milliseconds(300))
            events.append("closed \(error == nil ? "nil" : "\(error!)")")
        }
        try await connection.start()
        await connection.stop()
        events.append("stop returned")
        #expect(events.all == ["closed nil", "stop returned"])
        #expect(connection.currentState == .stopped)
    }

    @Test("1,000 invocations in flight all complete, in any order", arguments: combinations)
    func manyInFlight(_ transport: HttpTransportType, _ kind: HubProtocolType) async throws {
        let server = try await SignalRTestServer.start()
        defer { Task { await server.stop() } }
        let connection = Self.connect(server, kind, transport)
        try await connection.start()
        let results = try await withThrowingTaskGroup(of: Int.self) { group in
            for index in 0..<1_000 {
                group.addTask { try await connection.invoke(method: "echo", arguments: index) }
            }
            var all: [Int] = []
            for try await value in group { all.append(value) }
            return all
        }
        #expect(results.sorted() == Array(0..<1_000))
        await connection.stop()
    }

    @Test("Upload streams: items and the end reach the server; the result comes back", arguments: combinations)
    func uploadStreams(_ transport: HttpTransportType, _ kind: HubProtocolType) async throws {
        let server = try await SignalRTestServer.start()
        defer { Task { await server.stop() } }
        let connection = Self.connect(server, kind, transport)
        try await connection.start()
        let words = AsyncStream<String> { continuation in
            for word in ["a", "b", "c"] { continuation.yield(word) }
            continuation.finish()
        }
        let numbers = AsyncStream<Int> { continuation in
            for number in 1...100 { continuation.yield(number) }
            continuation.finish()
        }
        let collected: [JSONValue] = try await connection.invoke(method: "collect", arguments: UploadStream(words), UploadStream(numbers))
        #expect(collected == ["a", "b", "c"] + (1...100).map { JSONValue.number(Double($0)) })
        await connection.stop()
    }

    @Test("Cancelling a stream sends CancelInvocation and the server stops producing")
    func streamCancel() async throws {
        let server = try await SignalRTestServer.start()
        defer { Task { await server.stop() } }
        let connection = Self.connect(server, .json)
        try await connection.start()
        let stream = try await connection.streamRaw(method: "countForever", arguments: [])
        var seen = 0
        for try await _ in stream {
            seen += 1
            if seen == 3 { break }
        }
        await stream.cancel()
        // The connection stays usable and the cancelled stream's id is forgotten.
        let echoed: String = try await connection.invoke(method: "echo", arguments: "still here")
        #expect(echoed == "still here")
        await connection.stop()
    }

    @Test("Client results: a returning handler answers; no handler gives the server an error", arguments: combinations)
    func clientResults(_ transport: HttpTransportType, _ kind: HubProtocolType) async throws {
        let server = try await SignalRTestServer.start()
        defer { Task { await server.stop() } }
        let connection = Self.connect(server, kind, transport)
        connection.on("getValue") { (prefix: String) in prefix + " from the client" }
        connection.on("throwing") { (_: Int) async throws -> String in throw SignalRTestServerError(message: "client says no") }
        try await connection.start()
        let answer: String = try await connection.invoke(method: "askClient", arguments: "getValue", "value")
        #expect(answer == "value from the client")
        let missing = await #expect(throws: HubInvocationError.self) { try await connection.invoke(method: "askClient", arguments: "unknownMethod") }
        #expect(missing?.message.contains("Client didn't provide a result") == true)
        let failed = await #expect(throws: HubInvocationError.self) { try await connection.invoke(method: "askClient", arguments: "throwing", 1) }
        #expect(failed?.message.contains("client says no") == true)
        await connection.stop()
    }
}


@Suite("Transport fallback and HTTP transports", .serialized, .timeLimit(.minutes(3)))
struct HubTransportFallbackTests {
    @Test("Each refused transport forces the next: WebSockets, then Server-Sent Events, then Long Polling")
    func fallbackChain() async throws {
        for (failing, expected) in [([String](), "WebSockets"), (["WebSockets"], "ServerSentEvents"), (["WebSockets", "ServerSentEvents"], "LongPolling")] {
            var options = SignalRTestServer.Options()
            options.failingTransports = Set(failing)
            let server = try await SignalRTestServer.start(options: options)
            let connection = HubConnectionBuilder().withUrl(url: server.url).build()
            try await connection.start()
            #expect(connection.transport?.negotiateName == expected)
            #expect(server.negotiateCount == failing.count + 1, "a new negotiate before each next transport")
            let value: Int = try await connection.invoke(method: "echo", arguments: 3)
            #expect(value == 3)
            await connection.stop()
            await server.stop()
        }
        var options = SignalRTestServer.Options()
        options.failingTransports = ["WebSockets", "ServerSentEvents", "LongPolling"]
        let server = try await SignalRTestServer.start(options: options)
        defer { Task { await server.stop() } }
        let connection = HubConnectionBuilder().withUrl(url: server.url).build()
        let error = await #expect(throws: RealtimeError.self) { try await connection.start() }
        #expect(error?.detail.contains("WebSockets") == true)
        #expect(error?.detail.contains("ServerSentEvents") == true)
        #expect(error?.detail.contains("LongPolling") == true)
    }

    @Test("MessagePack skips Server-Sent Events: WebSockets refused goes straight to Long Polling")
    func messagePackSkipsSSE() async throws {
        var options = SignalRTestServer.Options()
        options.failingTransports = ["WebSockets"]
        let server = try await SignalRTestServer.start(options: options)
        defer { Task { await server.stop() } }
        let connection = HubConnectionBuilder().withUrl(url: server.url).withHubProtocol(hubProtocol: .messagePack).build()
        try await connection.start()
        #expect(connection.transport == .longPolling)
        await connection.stop()
    }

    @Test("Long polling: stop() sends DELETE and the server forgets the connection; a 204 makes the client reconnect")
    func longPollingLifecycle() async throws {
        var options = SignalRTestServer.Options()
        options.pollTimeout = .milliseconds(200)
        let server = try await SignalRTestServer.start(options: options)
        defer { Task { await server.stop() } }
        let connection = HubConnectionBuilder().withUrl(url: server.url, transport: .longPolling).withAutomaticReconnect([0]).build()
        let events = Recorder<String>()
        connection.onReconnecting { _ in events.append("reconnecting") }
        connection.onReconnected { events.append("reconnected") }
        try await connection.start()
        // Several empty polls (200 with no body) pass without harm.
        try await waitUntil("three empty polls") { server.emptyPollCount >= 3 }
        let value: String = try await connection.invoke(method: "echo", arguments: "after empty polls")
        #expect(value == "after empty polls")
        await server.dropAll()
        #expect(try await events.wait(count: 2) == ["reconnecting", "reconnected"])
        #expect(connection.transport == .longPolling)
        await connection.stop()
        try await waitUntil("the server saw the connection end") { server.connectionIds.isEmpty }
    }

    @Test("A cut fails pending calls at once on the HTTP transports too", arguments: [HttpTransportType.serverSentEvents, .longPolling])
    func cutOverHTTP(_ transport: HttpTransportType) async throws {
        let server = try await SignalRTestServer.start()
        defer { Task { await server.stop() } }
        let invoked = NIOLockedValueBox(false)
        server.method("hang", concurrent: true) { _ in
            invoked.withLockedValue { $0 = true }
            try await Task.sleep(for: .seconds(600))  // a method that never answers: the cut comes first
            return nil
        }
        let proxy = try await FaultProxy.start(targetPort: server.port)
        defer { Task { await proxy.stop() } }
        let connection = HubConnectionBuilder().withUrl(url: proxy.url(scheme: "http") + "/hub", transport: transport).build()
        try await connection.start()
        let pending = Task { () -> String in
            do {
                try await connection.invoke(method: "hang")
                return "completed"
            } catch let error as RealtimeError { return "\(error.code)" } catch { return "\(error)" }
        }
        // Cut once the call is pending at the server (a fixed 200 ms was not always enough under CI load).
        try await waitUntil("the invocation reached the server", limit: .seconds(20)) { invoked.withLockedValue { $0 } }
        proxy.inject(.cut(.reset))
        let outcome = await pending.value
        #expect(outcome == "connectionClosed")
    }
}
