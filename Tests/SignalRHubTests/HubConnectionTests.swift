import Foundation
import NIOConcurrencyHelpers
import RealtimeCore
import RealtimeTesting
import SignalRHub
import Testing

/// Records values from handlers and waits for them without timing assumptions beyond a generous limit.
final class Recorder<Value: Sendable>: Sendable {
    private let values = NIOLockedValueBox<[Value]>([])
    func append(_ value: Value) { values.withLockedValue { $0.append(value) } }
    var all: [Value] { values.withLockedValue { $0 } }
    func wait(count: Int, within seconds: Double = 20) async throws -> [Value] {
        let deadline = ContinuousClock.now + .seconds(seconds)
        while ContinuousClock.now < deadline {
            let current = all
            if current.count >= count { return current }
            try await Task.sleep(for: .milliseconds(10))
        }
        Issue.record("waited \(seconds) s for \(count) values, got \(all.count)")
        return all
    }
}

@Suite("HubConnection against the in-process SignalR server", .serialized)
struct HubConnectionTests {
    static func connect(
        _ server: SignalRTestServer, _ kind: HubProtocolKind, configure: (inout HubConnectionOptions) -> Void = { _ in }
    ) -> HubConnection {
        HubConnectionBuilder().withUrl(url: server.url).withHubProtocol(kind).withOptions(configure).build()
    }

    @Test("invoke, send, on and stream work with both hub protocols", arguments: HubProtocolKind.allCases)
    func basicExchange(_ kind: HubProtocolKind) async throws {
        let server = try await SignalRTestServer.start()
        defer { Task { await server.stop() } }
        let connection = Self.connect(server, kind)
        let received = Recorder<String>()
        connection.on("receive") { (user: String, count: Int) in received.append("\(user):\(count)") }
        try await connection.start()
        #expect(connection.currentState == .connected)
        #expect(connection.connectionId != nil)

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

    @Test("1,000 invocations in flight all complete, in any order", arguments: HubProtocolKind.allCases)
    func manyInFlight(_ kind: HubProtocolKind) async throws {
        let server = try await SignalRTestServer.start()
        defer { Task { await server.stop() } }
        let connection = Self.connect(server, kind)
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

    @Test("Client results: a returning handler answers; no handler gives the server an error", arguments: HubProtocolKind.allCases)
    func clientResults(_ kind: HubProtocolKind) async throws {
        let server = try await SignalRTestServer.start()
        defer { Task { await server.stop() } }
        let connection = Self.connect(server, kind)
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
