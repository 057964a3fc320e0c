import RealtimeCore
import RealtimeTesting
@testable import SocketIOEngine
import Testing

/// A namespace's offline queue exists only while emits wait in it: made when an emit must wait
/// (before the namespace connects, or taken back at a cut), let go once flushed, so a connected
/// namespace whose emits go straight out keeps none (Docs/Benchmarks.md, idle connections).
@Suite(.timeLimit(.minutes(1))) struct SocketIOOfflineQueueMemoryTests {
    @Test func theOfflineQueueIsLetGoOnceFlushed() async throws {
        let server = try await SocketIOTestServer.start()
        defer { Task { await server.stop() } }
        let proxy = try await FaultProxy.start(targetPort: server.port)
        defer { Task { await proxy.stop() } }
        let manager = SocketManager(url: proxy.url(), configuration: .testing([.websocket]))
        defer { manager.disconnect() }
        let socket = manager.defaultSocket
        #expect(!socket.holdsOfflineQueue)
        for index in 0..<3 { try socket.emit("record", arguments: [.number(Double(index))]) }
        #expect(socket.holdsOfflineQueue && socket.queuedEmitCount == 3)
        try await socket.connect(timeout: .seconds(30))
        #expect(socket.queuedEmitCount == 0)
        #expect(!socket.holdsOfflineQueue, "flushed on connect, then let go")
        for index in 3..<100 { try socket.emit("record", arguments: [.number(Double(index))]) }
        #expect(!socket.holdsOfflineQueue, "emits of a connected namespace go straight out")
        try await waitUntil("100 events at the server") { server.receivedEvents.filter { $0.name == "record" }.count == 100 }

        // A stalled peer and a cut: what the session did not deliver for sure comes back into a
        // new offline queue, which is let go again once the next connection takes it.
        proxy.inject(.stall(.clientToTarget, for: nil))
        for index in 100..<110 { try socket.emit("record", arguments: [.number(Double(index))]) }
        proxy.inject(.cut(.reset))
        proxy.resume()
        try await waitUntil("reconnected and flushed", limit: .seconds(30)) {
            socket.status == .connected && socket.queuedEmitCount == 0
        }
        #expect(!socket.holdsOfflineQueue)
        try await waitUntil("every emit arrived at least once") {
            Set(server.receivedEvents.filter { $0.name == "record" }.compactMap { $0.arguments.first?.intValue }).count == 110
        }
    }
}
