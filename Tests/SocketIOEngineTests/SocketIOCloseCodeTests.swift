import Foundation
import RealtimeCore
import RealtimeTesting
import SocketIOEngine
import Testing

/// A server that closes the WebSocket with a code during a session (1008, 1009, 1011) is
/// reported with that code and its reason (`messageTooLarge` for 1009, `webSocketClosed` for the
/// others), in the manager's state and the socket's `error` event, never as a connection that
/// could not be made. Over a real socket (SocketIOTestServer's WebSocket).
@Suite(.serialized, .timeLimit(.minutes(2)))
struct SocketIOCloseCodeTests {
    @Test("a close code during a session", arguments: [
        (UInt16(1008), "policy violation", RealtimeError.Code.webSocketClosed),
        (UInt16(1009), "message too big", RealtimeError.Code.messageTooLarge),
        (UInt16(1011), "internal error", RealtimeError.Code.webSocketClosed),
    ])
    func closeCodeDuringASession(code: UInt16, reason: String, expected: RealtimeError.Code) async throws {
        let server = try await SocketIOTestServer.start()
        defer { Task { await server.stop() } }
        var configuration = SocketIOConfiguration.testing([.websocket])
        configuration.reconnection = false
        let manager = SocketManager(url: server.url, configuration: configuration)
        defer { manager.disconnect() }
        let socket = manager.defaultSocket
        let errors = Recorder<String>()
        socket.on(clientEvent: .error) { event in errors.append(event.arguments.first?.stringValue ?? "") }
        try await socket.connect(timeout: .seconds(30))
        #expect(try await socket.emitWithAck("echo", "before", timeout: .seconds(30)) == ["before"])
        server.closeWebSockets(code: code, reason: reason)
        var ended: RealtimeError?
        for await state in manager.connectionState.updates() {
            if case .disconnected(let error) = state {
                ended = error
                break
            }
        }
        // With reconnection off the manager's state says it gave up at once, with the session's
        // error as the cause.
        let gaveUp = try #require(ended, "the session ended without an error")
        #expect(gaveUp.code == .reconnectGaveUp, "\(gaveUp)")
        let error = try #require(gaveUp.underlying as? RealtimeError, "\(gaveUp)")
        #expect(error.closeCode == code, "\(error)")
        #expect(error.code == expected, "\(error)")
        #expect(error.serverMessage == reason, "\(error)")
        #expect(error.code != .connectFailed && !error.description.contains("could not connect"), "\(error)")
        let reported = try await errors.wait(count: 1)
        #expect(reported.first?.contains("close code \(code)") == true, "\(reported)")
    }
}
