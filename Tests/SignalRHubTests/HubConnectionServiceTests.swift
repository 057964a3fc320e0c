import Logging
import RealtimeCore
import RealtimeTesting
import ServiceLifecycle
import SignalRHub
import Testing

/// HubConnection as a Service: run() starts it; the group's graceful shutdown stops it, onClosed
/// has run when run() returns, and nothing throws.
@Suite(.timeLimit(.minutes(1))) struct HubConnectionServiceTests {
    @Test func runStartsAndGracefulShutdownStops() async throws {
        let server = try await SignalRTestServer.start()
        defer { Task { await server.stop() } }
        let connection = HubConnectionBuilder().withUrl(url: server.url).build()
        let closed = Recorder<String>()
        connection.onClosed { error in closed.append(error == nil ? "clean" : "\(error!)") }
        let group = ServiceGroup(services: [connection], logger: Logger(label: "test"))
        let running = Task { try await group.run() }
        while connection.currentState != .connected { await Task.yield() }
        let sum: Int = try await connection.invoke(method: "add", arguments: 2, 3)
        #expect(sum == 5)
        await group.triggerGracefulShutdown()
        try await running.value
        #expect(closed.values == ["clean"])
        #expect(connection.currentState == .stopped)
    }
}
