import Logging
import RealtimeCore
import RealtimeTesting
import ServiceLifecycle
import SocketIOEngine
import Testing

/// SocketManager as a Service: the graceful shutdown disconnects every socket and run() returns.
@Suite(.timeLimit(.minutes(1))) struct SocketManagerServiceTests {
    @Test func gracefulShutdownDisconnects() async throws {
        let server = try await SocketIOTestServer.start()
        defer { Task { await server.stop() } }
        let manager = SocketManager(url: server.url, configuration: .testing([.websocket]))
        let group = ServiceGroup(services: [manager], logger: Logger(label: "test"))
        let running = Task { try await group.run() }
        let socket = manager.defaultSocket
        try await socket.connect(timeout: .seconds(30))
        #expect(try await socket.emitWithAck("echo", "hi") == ["hi"])
        await group.triggerGracefulShutdown()
        try await running.value
        #expect(socket.status == .disconnected)
        #expect(manager.connectionState.current.isDisconnected)
    }
}
