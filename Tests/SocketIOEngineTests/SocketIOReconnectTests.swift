import Foundation
import RealtimeCore
import RealtimeTesting
import SocketIOEngine
import Testing

/// Reconnection as the JavaScript socket.io-client 4.x does it: the backoff starts over after every
/// session that carried a packet, and the disconnect reasons (with no `error` event) of a
/// connection that ended under the client. Over a real socket (SocketIOTestServer's WebSocket).
@Suite(.serialized, .timeLimit(.minutes(3)))
struct SocketIOReconnectTests {
    /// Sessions shorter than the policy's `stableAfter` (5 s) that carried a packet each: without
    /// the reset the attempts would count 1, 2, 3 (the delay doubling each time).
    @Test("the backoff starts over after each session that carried a packet, however short")
    func backoffResetsAfterEachSession() async throws {
        let server = try await SocketIOTestServer.start()
        defer { Task { await server.stop() } }
        let manager = SocketManager(url: server.url, configuration: .testing([.websocket]))
        defer { manager.disconnect() }
        let socket = manager.defaultSocket
        let attempts = Recorder<JSONValue>()
        socket.on(clientEvent: .reconnectAttempt) { attempts.append($0.arguments.first ?? .null) }
        let reconnects = Recorder<JSONValue>()
        socket.on(clientEvent: .reconnect) { reconnects.append($0.arguments.first ?? .null) }
        let connects = Recorder<Int>()
        socket.on(clientEvent: .connect) { _ in connects.append(1) }
        try await socket.connect(timeout: .seconds(30))
        for session in 1...3 {
            #expect(try await socket.emitWithAck("echo", session, timeout: .seconds(30)) == [.integer(Int64(session))])
            server.dropAllConnections()
            try await waitUntil("reconnected after cut \(session)") { connects.values.count == session + 1 }
        }
        #expect(try await socket.emitWithAck("echo", "last", timeout: .seconds(30)) == ["last"])
        #expect(attempts.values == [1, 1, 1], "\(attempts.values)")
        #expect(reconnects.values == [1, 1, 1], "\(reconnects.values)")
    }
}
