import Logging
import RealtimeTesting
import ServiceLifecycle
import SpreadbotClient
import Testing

/// Spreadbot as a Service: at the graceful shutdown the sends still queued go out first, then the
/// connection closes and run() returns without an error.
@Suite(.timeLimit(.minutes(1))) struct SpreadbotServiceTests {
    @Test func gracefulShutdownFlushesQueuedSends() async throws {
        let server = try await SpreadbotTestServer.start()
        defer { Task { await server.stop() } }
        let client = Spreadbot(configuration: spreadbotConfiguration(server))
        client.establishConnection(path: "room")
        await eventually("connected") { client.state == .connected }
        let group = ServiceGroup(services: [client], logger: Logger(label: "test"))
        let running = Task { try await group.run() }
        let deliveries = try (1...50).map { try client.enqueue(.text("m\($0)")) }
        await group.triggerGracefulShutdown()
        try await running.value
        // Each one went out (written to the WebSocket) before the close; the server reads them in order.
        for delivery in deliveries { try await delivery.delivered() }
        await eventually("the server read all 50") { server.received(on: "room").count == 50 }
        #expect(server.received(on: "room") == (1...50).map { .text("m\($0)") })
        #expect(client.state == .disconnected)
    }
}
