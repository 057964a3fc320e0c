import Foundation
import NIOConcurrencyHelpers
import RealtimeCore
import RealtimeTesting
import SignalRHub
import Testing

/// SignalRGuide.md, performance: what one socket read brings reaches the reader (a server
/// stream's `for try await`, over the ``HubStream`` or over its `stream`, and the `on` handlers)
/// in one hand-over. The server writes 1,000 messages as 1,000 WebSocket frames, one write each,
/// as real servers do; the network holds them and lets them through together, so they arrive in a
/// few reads. The count is the pipeline's own (hand-overs to the reader), not a timing: one per
/// message would be 1,000.
@Suite(.timeLimit(.minutes(2)))
struct HubHandOverTests {
    static let total = 1_000

    /// The server, a proxy in front of it, and a connection through the proxy.
    static func connected() async throws -> (SignalRTestServer, FaultProxy, HubConnection) {
        let server = try await SignalRTestServer.start()
        let proxy = try await FaultProxy.start(targetPort: server.port)
        let connection = HubConnectionBuilder().withUrl(url: proxy.url() + "/hub", transport: .webSockets).build()
        try await connection.start()
        return (server, proxy, connection)
    }

    /// Waits until the proxy holds at least `bytes` for the client (the server's writes are in).
    static func waitForHeld(_ proxy: FaultProxy, bytes: Int) async throws {
        try await waitUntil("the proxy holds the server's writes", limit: .seconds(30)) {
            proxy.statistics.bytesHeldForClients >= bytes
        }
    }

    enum Reader: String, CaseIterable, Sendable { case hubStream, streamResult }

    @Test("a server stream's items reach the reader in one hand-over per read", arguments: Reader.allCases)
    func streamItems(reader: Reader) async throws {
        let (server, proxy, connection) = try await Self.connected()
        defer { Task { await proxy.stop(); await server.stop() } }
        // The server's pump asks for item n + 1 once item n is written: past `total`, all are in.
        let pulled = NIOLockedValueBox(0)
        server.stream("Counter") { _ in
            AsyncThrowingStream(unfolding: {
                let next = pulled.withLockedValue { value -> Int in
                    value += 1
                    return value
                }
                return next <= Self.total ? .integer(Int64(next)) : nil
            })
        }
        proxy.hold(.targetToClient)
        let stream: HubStream<Int> = try await connection.stream(method: "Counter")
        let consumer = Task {
            var seen: [Int] = []
            switch reader {
            case .hubStream: for try await item in stream { seen.append(item) }
            case .streamResult: for try await item in stream.stream { seen.append(item) }
            }
            return seen
        }
        try await waitUntil("the server wrote every item", limit: .seconds(30)) { pulled.withLockedValue { $0 } > Self.total }
        // Each item is at least a few bytes of JSON on the wire.
        try await Self.waitForHeld(proxy, bytes: Self.total * 20)
        let before = stream.consumerWakeUps
        proxy.resume()
        #expect(try await consumer.value == Array(1...Self.total))
        let handOvers = stream.consumerWakeUps - before
        #expect(handOvers >= 1)
        #expect(handOvers <= Self.total / 10, "\(handOvers) hand-overs for \(Self.total) items")
        await connection.stop()
    }

    @Test("server invocations reach the on handlers in one hand-over per read")
    func invocations() async throws {
        let (server, proxy, connection) = try await Self.connected()
        defer { Task { await proxy.stop(); await server.stop() } }
        let received = Recorder<Int>()
        connection.on("tick") { (value: Int) in received.append(value) }
        // One invocation first: the handlers' task has run once before the burst.
        await server.broadcast("tick", [.integer(0)])
        _ = try await received.wait(count: 1, within: 30)
        proxy.hold(.targetToClient)
        for index in 1...Self.total { await server.broadcast("tick", [.integer(Int64(index))]) }
        try await Self.waitForHeld(proxy, bytes: Self.total * 40)
        let before = connection.handlerWakeUps
        proxy.resume()
        let values = try await received.wait(count: Self.total + 1, within: 30)
        #expect(values == Array(0...Self.total))
        let handOvers = connection.handlerWakeUps - before
        #expect(handOvers >= 1)
        #expect(handOvers <= Self.total / 10, "\(handOvers) hand-overs for \(Self.total) invocations")
        await connection.stop()
    }
}
