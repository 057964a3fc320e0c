import Foundation
import RealtimeCore
import RealtimeTesting
import SignalRHub
import Testing

func signalRPeerScript(_ name: String) -> String {
    URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Peers").appendingPathComponent(name).path
}

/// Our client against aiosignalr 0.1.1 (an asyncio SignalR server written by others), over
/// WebSockets with both hub protocols. The peer must be installed (Scripts/test.sh); a missing
/// peer fails the test with the command to run.
@Suite("HubConnection against aiosignalr", .serialized, .timeLimit(.minutes(3)))
struct AioSignalRInteropTests {
    @Test("invoke, send, on, streams, cancel and client results, on every transport it serves", arguments: HubConnectionTests.combinations)
    func exchange(_ transport: HttpTransportType, _ kind: HubProtocolType) async throws {
        let peer = try await PythonPeer.start(scriptPath: signalRPeerScript("aiosignalr_server.py"))
        defer { Task { await peer.stop() } }
        let connection = HubConnectionBuilder().withUrl(url: "http://127.0.0.1:\(peer.port)/hub", transport: transport).withHubProtocol(hubProtocol: kind).build()
        let received = Recorder<String>()
        connection.on("receive") { (user: String, count: Int) in received.append("\(user):\(count)") }
        connection.on("getValue") { (argument: String) in "client got \(argument)" }
        try await connection.start()
        #expect(connection.connectionId != nil)
        #expect(connection.transport == transport)

        let echoed: [String: Int] = try await connection.invoke(method: "echo", arguments: ["a": 1, "b": 2])
        #expect(echoed == ["a": 1, "b": 2])
        let sum: Int = try await connection.invoke(method: "add", arguments: 40, 2)
        #expect(sum == 42)
        try await connection.invoke(method: "void")
        let failure = await #expect(throws: HubInvocationError.self) { try await connection.invoke(method: "fail", arguments: "bad input") }
        #expect(failure?.message == "bad input")

        try await connection.send(method: "broadcast", arguments: "zoe", 3)
        #expect(try await received.wait(count: 1) == ["zoe:3"])

        let stream: any StreamResult<Int> = try await connection.stream(method: "countTo", arguments: 4)
        var items: [Int] = []
        for try await item in stream.stream { items.append(item) }
        #expect(items == [1, 2, 3, 4])

        let forever = try await connection.streamRaw(method: "countForever", arguments: [])
        var seen = 0
        for try await _ in forever {
            seen += 1
            if seen == 3 { break }
        }
        await forever.cancel()

        let answer: String = try await connection.invoke(method: "askClient", arguments: "getValue", "x")
        #expect(answer == "client got x")

        let uploaded: [Int] = try await connection.invoke(method: "collect", arguments: UploadStream(AsyncStream<Int> { continuation in
            for number in 1...20 { continuation.yield(number) }
            continuation.finish()
        }))
        #expect(uploaded == Array(1...20))

        // 200 in flight.
        let results = try await withThrowingTaskGroup(of: Int.self) { group in
            for index in 0..<200 { group.addTask { try await connection.invoke(method: "echo", arguments: index) } }
            var all: [Int] = []
            for try await value in group { all.append(value) }
            return all
        }
        #expect(results.sorted() == Array(0..<200))
        await connection.stop()
    }

    @Test("A cut mid-invocation fails the call at once; automatic reconnect gets a new connection")
    func cutAndReconnect() async throws {
        let peer = try await PythonPeer.start(scriptPath: signalRPeerScript("aiosignalr_server.py"))
        defer { Task { await peer.stop() } }
        let proxy = try await FaultProxy.start(targetPort: peer.port)
        defer { Task { await proxy.stop() } }
        let connection = HubConnectionBuilder().withUrl(url: proxy.url(scheme: "http") + "/hub").withAutomaticReconnect([0, 0.5]).build()
        let events = Recorder<String>()
        connection.onReconnecting { _ in events.append("reconnecting") }
        connection.onReconnected { events.append("reconnected") }
        try await connection.start()
        let first = connection.connectionId
        let stream = try await connection.streamRaw(method: "countForever", arguments: [])
        let outcome = Task { () -> String in
            do {
                for try await _ in stream {}
                return "ended"
            } catch let error as RealtimeError { return "\(error.code)" } catch { return "\(error)" }
        }
        let before = proxy.statistics.bytesToClient
        try await waitUntil("stream items crossed the proxy") { proxy.statistics.bytesToClient > before }
        proxy.inject(.cut(.reset))
        #expect(await outcome.value == "connectionClosed")
        #expect(try await events.wait(count: 2) == ["reconnecting", "reconnected"])
        #expect(connection.connectionId != first)
        let value: Int = try await connection.invoke(method: "echo", arguments: 9)
        #expect(value == 9)
        await connection.stop()
    }

    /// Python ints above 2^53 from aiosignalr arrive unchanged over both hub protocols, into
    /// `JSONValue` and into `Int64`/`UInt64`, and ours reach it as the same ints.
    @Test("64-bit integers both ways, JSON and MessagePack", arguments: [HubProtocolType.json, .messagePack])
    func exactIntegers(_ kind: HubProtocolType) async throws {
        let peer = try await PythonPeer.start(scriptPath: signalRPeerScript("aiosignalr_server.py"))
        defer { Task { await peer.stop() } }
        let connection = HubConnectionBuilder().withUrl(url: "http://127.0.0.1:\(peer.port)/hub").withHubProtocol(hubProtocol: kind).build()
        try await connection.start()
        let numbers: [JSONValue] = try await connection.invoke(method: "bigNumbers")
        #expect(numbers == [.integer(9_007_199_254_740_993), .integer(.max), .integer(.min), .unsignedInteger(.max), .number(1e300), .number(0.1)])
        #expect(numbers.prefix(3).map(\.int64Value) == [9_007_199_254_740_993, .max, .min])
        #expect(numbers[3].uint64Value == .max)
        let typed: [Int64] = try await connection.invoke(method: "echo", arguments: [Int64.min, Int64.max, 9_007_199_254_740_993])
        #expect(typed == [.min, .max, 9_007_199_254_740_993])
        for (value, text) in [(JSONValue.integer(9_007_199_254_740_993), "9007199254740993"), (.integer(.min), "-9223372036854775808"),
                              (.unsignedInteger(.max), "18446744073709551615")] {
            let exact: Bool = try await connection.invoke(method: "isExactly", arguments: value, text)
            #expect(exact, "\(text) reached the server as that int")
        }
        let unsigned: Bool = try await connection.invoke(method: "isExactly", arguments: UInt64.max, "18446744073709551615")
        #expect(unsigned)
        await connection.stop()
    }

    @Test("Long polling idle for 40 s (the server sends no Pings there): still connected, invokes still answered")
    func longPollingIdle() async throws {
        let peer = try await PythonPeer.start(scriptPath: signalRPeerScript("aiosignalr_server.py"))
        defer { Task { await peer.stop() } }
        let connection = HubConnectionBuilder()
            .withUrl(url: "http://127.0.0.1:\(peer.port)/hub", transport: .longPolling)
            .withAutomaticReconnect()
            .build()
        let events = Recorder<String>()
        connection.onReconnecting { error in events.append("reconnecting \(error)") }
        connection.onClosed { error in events.append("closed \(error.map { "\($0)" } ?? "nil")") }
        try await connection.start()
        let id = connection.connectionId
        let before: Int = try await connection.invoke(method: "add", arguments: 1, 2)
        #expect(before == 3)
        // Idle on purpose, past the 30 s server timeout: the absence of a drop is what is tested,
        // and there is nothing to await for it but time.
        try await Task.sleep(for: .seconds(40))
        #expect(events.values.isEmpty, "\(events.values)")
        #expect(connection.currentState == .connected)
        #expect(connection.connectionId == id, "the same connection, not a reconnected one")
        let after: Int = try await connection.invoke(method: "add", arguments: 20, 22)
        #expect(after == 42)
        await connection.stop()
    }
}
