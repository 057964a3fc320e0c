import InMemoryTracing
import RealtimeCore
import RealtimeTesting
import SocketIOEngine
import Testing
import Tracing

/// A Socket.IO connection's `realtime.connect` span ends when the Engine.IO session opens; an
/// emit with an ack is a `realtime.emit` span ended by the ack (or its timeout, as an error).
@Suite(.timeLimit(.minutes(1))) struct SocketIOTracingTests {
    @Test func connectAndEmitSpans() async throws {
        let server = try await SocketIOTestServer.start()
        defer { Task { await server.stop() } }
        let tracer = InMemoryTracer()
        var configuration = SocketIOConfiguration.testing([.websocket])
        configuration.runtime = RealtimeRuntime(tracer: tracer)
        let manager = SocketManager(url: server.url, configuration: configuration)
        let socket = manager.defaultSocket
        try await socket.connect(timeout: .seconds(30))
        #expect(try await socket.emitWithAck("echo", "hi") == ["hi"])
        await #expect(throws: RealtimeError.self) { try await socket.emitWithAck("no_handler", "x", timeout: .milliseconds(200)) }
        manager.disconnect()
        await manager.waitUntilStopped()
        let spans = tracer.finishedSpans
        let connect = try #require(spans.first { $0.operationName == "realtime.connect" })
        #expect(connect.events.map(\.name) == ["opened"])
        let emits = spans.filter { $0.operationName == "realtime.emit" }
        #expect(emits.count == 2)
        #expect(emits.first { $0.status?.code == .error } != nil, "the unanswered emit")
    }
}
